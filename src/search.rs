//! Constrained search over (node, inclusion mask) (SPEC §2): bidirectional BFS, a path drawn
//! uniformly among all shortest valid walks, and exact counts of valid walks by length.

use rand::Rng;

use crate::config::MAX_INCLUDE;
use crate::graph::{Graph, Label, Node, unpack};

/// A query x = (u, v, I, X); label sets are bitsets over label ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Query {
    pub u: Node,
    pub v: Node,
    pub include: u32,
    pub exclude: u32,
}

/// A walk v0 l1 v1 … lh vh; `nodes.len() == labels.len() + 1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Path {
    pub nodes: Vec<Node>,
    pub labels: Vec<Label>,
}

impl Path {
    pub fn hops(&self) -> usize {
        self.labels.len()
    }

    /// Bitset of the labels the walk uses.
    pub fn label_set(&self) -> u32 {
        self.labels.iter().fold(0, |s, &l| s | 1 << l)
    }
}

impl Query {
    /// SPEC §2 validity: real labelled edges, right ends, I ⊆ labels(P), X ∩ labels(P) = ∅.
    pub fn accepts(&self, g: &Graph, p: &Path) -> bool {
        p.nodes.len() == p.labels.len() + 1
            && p.nodes.first() == Some(&self.u)
            && p.nodes.last() == Some(&self.v)
            && p.nodes
                .windows(2)
                .zip(&p.labels)
                .all(|(w, &l)| g.label_between(w[0], w[1]) == Some(l))
            && self.include & !p.label_set() == 0
            && self.exclude & p.label_set() == 0
    }
}

/// One direction of the bidirectional BFS. The BFS itself only stamps each reached state with
/// its distance; shortest-walk counts are computed afterwards, on demand, for the few states
/// that lie on shortest walks, which keeps the hot loop to one 4-byte cell per state.
#[derive(Default)]
struct Side {
    /// Per state: `tag(generation, distance)`; other generations mean "unseen".
    tags: Vec<Tag>,
    /// Per node: the tag of the deepest layer that reached it (any mask).
    node_tag: Vec<Tag>,
    /// Per state: shortest walks from the source, valid where `count_gen` is current.
    counts: Vec<u64>,
    count_gen: Vec<u32>,
    order: Vec<u32>,
    layer_start: Vec<usize>,
    pending: Vec<u32>,
}

/// Reached states gathered before they are recorded (see `Side::expand`).
const PREFETCH_BATCH: usize = 32;

/// Ask the CPU to start loading `r`'s cache line.
#[inline(always)]
fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; it reads nothing and cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            r as *const T as *const i8,
        );
    }
}

/// The predecessor states of state mask `a` across edge entry `e`: the neighbour's state with
/// the same mask, and with this label's bit cleared when the label is an inclusion.
#[inline]
fn pred_states(q: &Prepared, a: u32, e: u32) -> ([u32; 2], usize, Label) {
    let (y, l) = unpack(e);
    if q.exclude >> l & 1 != 0 {
        return ([0; 2], 0, l);
    }
    let b = q.bit[l as usize];
    let base = y << q.k;
    if b == 0 {
        ([base | a, 0], 1, l)
    } else if a & b == 0 {
        ([0; 2], 0, l)
    } else {
        ([base | a, base | (a ^ b)], 2, l)
    }
}

impl Side {
    fn grow(&mut self, states: usize, nodes: usize) {
        if self.tags.len() < states {
            self.tags = vec![0; states];
            self.counts = vec![0; states];
            self.count_gen = vec![0; states];
        }
        if self.node_tag.len() < nodes {
            self.node_tag = vec![0; nodes];
        }
    }

    fn reset_stamps(&mut self) {
        self.tags.fill(0);
        self.count_gen.fill(0);
        self.node_tag.fill(0);
    }

    fn start(&mut self, s: u32, k: u32, gen_: u32) {
        self.order.clear();
        self.layer_start.clear();
        self.layer_start.push(0);
        self.order.push(s);
        self.tags[s as usize] = tag(gen_, 0);
        self.node_tag[(s >> k) as usize] = tag(gen_, 0);
    }

    fn depth(&self) -> usize {
        self.layer_start.len() - 1
    }

    fn frontier(&self) -> &[u32] {
        &self.order[*self.layer_start.last().unwrap()..]
    }

    /// Expand the last layer by one hop. Returns false when the new layer is empty.
    /// Targets are gathered in batches and prefetched before they are touched: the search is
    /// bound by cache misses on the tags, and this lets them overlap.
    fn expand(&mut self, g: &Graph, q: &Prepared, gen_: u32) -> bool {
        let begin = *self.layer_start.last().unwrap();
        let end = self.order.len();
        let next_tag = tag(gen_, (self.depth() + 1) as u8);
        self.layer_start.push(end);
        let mut pending = std::mem::take(&mut self.pending);
        for i in begin..end {
            let s = self.order[i];
            let (x, a) = (s >> q.k, s & q.full);
            for &e in g.neighbors(x) {
                let (y, l) = unpack(e);
                if q.exclude >> l & 1 == 0 {
                    let t = (y << q.k) | a | q.bit[l as usize];
                    prefetch(&self.tags[t as usize]);
                    pending.push(t);
                }
            }
            if pending.len() >= PREFETCH_BATCH {
                self.settle(&mut pending, q.k, gen_, next_tag);
            }
        }
        self.settle(&mut pending, q.k, gen_, next_tag);
        self.pending = pending;
        self.order.len() > end
    }

    /// Look one hop past the frontier for states that meet `other`'s frontier, without
    /// recording the layer: the last layer is the largest, and only its meeting states are
    /// needed. Meeting states get their tag (for `count`); meetings go to `meets`.
    fn probe(
        &mut self,
        g: &Graph,
        q: &Prepared,
        gen_: u32,
        other: &Side,
        forward: bool,
        meets: &mut Vec<Meet>,
    ) -> bool {
        let next_tag = tag(gen_, (self.depth() + 1) as u8);
        let other_tag = tag(gen_, other.depth() as u8);
        for i in *self.layer_start.last().unwrap()..self.order.len() {
            let s = self.order[i];
            let (x, a) = (s >> q.k, s & q.full);
            for &e in g.neighbors(x) {
                let (y, l) = unpack(e);
                if q.exclude >> l & 1 != 0 || other.node_tag[y as usize] != other_tag {
                    continue;
                }
                let a2 = a | q.bit[l as usize];
                let t = (y << q.k) | a2;
                if gen_of(self.tags[t as usize]) == gen_ {
                    // Met already in this probe, or reached earlier (then never a meeting).
                    continue;
                }
                let need = q.full & !a2;
                let mut sub = a2;
                let mut met = false;
                loop {
                    let o = (y << q.k) | need | sub;
                    if other.tags[o as usize] == other_tag {
                        met = true;
                        let (fwd, bwd) = if forward { (t, o) } else { (o, t) };
                        meets.push(Meet::new(fwd, bwd));
                    }
                    if sub == 0 {
                        break;
                    }
                    sub = (sub - 1) & a2;
                }
                if met {
                    self.tags[t as usize] = next_tag;
                }
            }
        }
        !meets.is_empty()
    }

    /// Record the reached states of `pending`, in order: unseen ones join the new layer.
    fn settle(&mut self, pending: &mut Vec<u32>, k: u32, gen_: u32, next_tag: Tag) {
        for &t in pending.iter() {
            let cell = &mut self.tags[t as usize];
            if gen_of(*cell) != gen_ {
                *cell = next_tag;
                self.order.push(t);
                self.node_tag[(t >> k) as usize] = next_tag;
            }
        }
        pending.clear();
    }

    /// Shortest walks from this side's source to state `s` (reached in this generation),
    /// memoised; it only ever visits states on shortest walks to `s`.
    fn count(&mut self, g: &Graph, q: &Prepared, gen_: u32, s: u32) -> u64 {
        if self.count_gen[s as usize] == gen_ {
            return self.counts[s as usize];
        }
        let d = depth_of(self.tags[s as usize]);
        let total = if d == 0 {
            1
        } else {
            let want = tag(gen_, d - 1);
            let a = s & q.full;
            let mut total = 0u64;
            for &e in g.neighbors(s >> q.k) {
                let (ps, n, _) = pred_states(q, a, e);
                for &p in &ps[..n] {
                    if self.tags[p as usize] == want {
                        total = total.saturating_add(self.count(g, q, gen_, p));
                    }
                }
            }
            total
        };
        self.count_gen[s as usize] = gen_;
        self.counts[s as usize] = total;
        total
    }

    /// Walk back from state `s` to this side's source, choosing each predecessor with
    /// probability proportional to its shortest-walk count. Pushes the nodes (the source's
    /// last) and the labels between them.
    #[allow(clippy::too_many_arguments)]
    fn trace<R: Rng>(
        &mut self,
        g: &Graph,
        q: &Prepared,
        gen_: u32,
        mut s: u32,
        rng: &mut R,
        nodes: &mut Vec<Node>,
        labels: &mut Vec<Label>,
    ) {
        loop {
            nodes.push(s >> q.k);
            let d = depth_of(self.tags[s as usize]);
            if d == 0 {
                return;
            }
            let want = tag(gen_, d - 1);
            let a = s & q.full;
            let mut r = rng.random_range(0..self.count(g, q, gen_, s));
            let mut chosen = None;
            'find: for &e in g.neighbors(s >> q.k) {
                let (ps, n, l) = pred_states(q, a, e);
                for &p in &ps[..n] {
                    if self.tags[p as usize] == want {
                        let c = self.count(g, q, gen_, p);
                        if r < c {
                            chosen = Some((p, l));
                            break 'find;
                        }
                        r -= c;
                    }
                }
            }
            let (p, l) = chosen.expect("a reached state has a predecessor");
            labels.push(l);
            s = p;
        }
    }
}

/// A state's or node's tag: the query generation and the depth at which it was reached, in
/// 16 bits so that a node's 2^|I| states share a cache line and a side fits in L2.
type Tag = u16;
const DEPTH_BITS: u32 = 6;
/// Generations wrap here; the tag arrays are then cleared.
const GEN_MASK: u32 = (1 << (16 - DEPTH_BITS)) - 1;

#[inline]
fn tag(gen_: u32, depth: u8) -> Tag {
    (gen_ << DEPTH_BITS | depth as u32) as Tag
}

#[inline]
fn gen_of(t: Tag) -> u32 {
    (t >> DEPTH_BITS) as u32
}

#[inline]
fn depth_of(t: Tag) -> u8 {
    (t & ((1 << DEPTH_BITS) - 1)) as u8
}

/// Per-query tables: which bit each inclusion label sets, and the excluded labels.
#[derive(Clone, Copy)]
struct Prepared {
    k: u32,
    full: u32,
    bit: [u32; 32],
    exclude: u32,
}

impl Prepared {
    fn new(q: &Query) -> Prepared {
        let mut bit = [0u32; 32];
        let mut k = 0;
        for (l, b) in bit.iter_mut().enumerate() {
            if q.include >> l & 1 != 0 {
                *b = 1 << k;
                k += 1;
            }
        }
        assert!(k <= MAX_INCLUDE, "at most {MAX_INCLUDE} inclusion labels");
        Prepared {
            k,
            full: (1 << k) - 1,
            bit,
            exclude: q.exclude,
        }
    }
}

/// A meeting of the two sides: forward state, backward state and the walks through them.
struct Meet {
    fwd: u32,
    bwd: u32,
    weight: u128,
}

impl Meet {
    fn new(fwd: u32, bwd: u32) -> Meet {
        Meet {
            fwd,
            bwd,
            weight: 0,
        }
    }
}

/// Reusable search buffers for one graph. Nothing is allocated per query once warm.
pub struct Searcher<'g> {
    g: &'g Graph,
    gen_: u32,
    fwd: Side,
    bwd: Side,
    meets: Vec<Meet>,
    layers: [Vec<Vec<(u32, u64)>>; 2],
    acc_stamp: Vec<u32>,
    acc_slot: Vec<u32>,
    acc_gen: u32,
}

impl<'g> Searcher<'g> {
    pub fn new(g: &'g Graph) -> Searcher<'g> {
        Searcher {
            g,
            gen_: 0,
            fwd: Side::default(),
            bwd: Side::default(),
            meets: Vec::new(),
            layers: [Vec::new(), Vec::new()],
            acc_stamp: Vec::new(),
            acc_slot: Vec::new(),
            acc_gen: 0,
        }
    }

    pub fn visited(&self) -> usize {
        self.fwd.order.len() + self.bwd.order.len()
    }

    pub fn graph(&self) -> &'g Graph {
        self.g
    }

    fn next_gen(&mut self, states: usize) -> u32 {
        let nodes = self.g.n_nodes();
        self.fwd.grow(states, nodes);
        self.bwd.grow(states, nodes);
        self.gen_ = (self.gen_ + 1) & GEN_MASK;
        if self.gen_ == 0 {
            self.fwd.reset_stamps();
            self.bwd.reset_stamps();
            self.gen_ = 1;
        }
        self.gen_
    }

    /// Bidirectional BFS to the shortest valid walk length ≤ `h_max`. Fills `self.meets`
    /// with every (forward state, backward state) split of the shortest walks.
    fn meet(&mut self, q: &Query, h_max: u32) -> Option<(Prepared, usize)> {
        let p = Prepared::new(q);
        let states = self.g.n_nodes() << p.k;
        let gen_ = self.next_gen(states);
        self.fwd.start(q.u << p.k, p.k, gen_);
        self.bwd.start(q.v << p.k, p.k, gen_);
        self.meets.clear();
        if q.u == q.v && p.full == 0 {
            self.meets.push(Meet {
                weight: 1,
                ..Meet::new(q.u << p.k, q.v << p.k)
            });
            return Some((p, 0));
        }
        loop {
            if self.fwd.depth() + self.bwd.depth() >= h_max as usize {
                return None;
            }
            let forward = self.fwd.frontier().len() <= self.bwd.frontier().len();
            let (grow, other) = if forward {
                (&mut self.fwd, &self.bwd)
            } else {
                (&mut self.bwd, &self.fwd)
            };
            let found = grow.probe(self.g, &p, gen_, other, forward, &mut self.meets);
            if found {
                let d = self.fwd.depth() + self.bwd.depth() + 1;
                for m in self.meets.iter_mut() {
                    let cf = self.fwd.count(self.g, &p, gen_, m.fwd);
                    let cb = self.bwd.count(self.g, &p, gen_, m.bwd);
                    m.weight = cf as u128 * cb as u128;
                }
                return Some((p, d));
            }
            if !grow.expand(self.g, &p, gen_) {
                return None;
            }
        }
    }

    /// The number of hops of the shortest valid walk and how many such walks exist.
    pub fn shortest_count(&mut self, q: &Query, h_max: u32) -> Option<(usize, u128)> {
        let (_, d) = self.meet(q, h_max)?;
        Some((d, self.meets.iter().map(|m| m.weight).sum()))
    }

    /// A walk drawn uniformly at random among all shortest valid walks of at most `h_max`
    /// hops, or None if there is none.
    pub fn shortest<R: Rng>(&mut self, q: &Query, h_max: u32, rng: &mut R) -> Option<Path> {
        let (p, d) = self.meet(q, h_max)?;
        let total: u128 = self.meets.iter().map(|m| m.weight).sum();
        let mut r = rng.random_range(0..total);
        let m = self
            .meets
            .iter()
            .find(|m| {
                if r < m.weight {
                    true
                } else {
                    r -= m.weight;
                    false
                }
            })
            .expect("r < total");
        let (fs, bs) = (m.fwd, m.bwd);
        let gen_ = self.gen_;
        let mut nodes = Vec::with_capacity(d + 2);
        let mut labels = Vec::with_capacity(d + 1);
        // Forward half, traced back to u, then reversed.
        self.fwd
            .trace(self.g, &p, gen_, fs, rng, &mut nodes, &mut labels);
        nodes.reverse();
        labels.reverse();
        // Backward half, traced from the meeting node on to v; drop the repeated meeting node.
        let split = nodes.len();
        self.bwd
            .trace(self.g, &p, gen_, bs, rng, &mut nodes, &mut labels);
        nodes.remove(split);
        debug_assert_eq!(labels.len(), d);
        Some(Path { nodes, labels })
    }

    /// Nodes at graph distance exactly `h` from `u`, ignoring labels.
    pub fn nodes_at_distance(&mut self, u: Node, h: u32) -> Vec<Node> {
        let p = Prepared::new(&Query {
            u,
            v: u,
            include: 0,
            exclude: 0,
        });
        let gen_ = self.next_gen(self.g.n_nodes());
        self.fwd.start(u, 0, gen_);
        for _ in 0..h {
            if !self.fwd.expand(self.g, &p, gen_) {
                return Vec::new();
            }
        }
        self.fwd.frontier().to_vec()
    }

    /// counts[ℓ] = the number of valid walks of exactly ℓ hops, for ℓ = 0..=max_len.
    /// Counts saturate at u64::MAX.
    pub fn count_walks(&mut self, q: &Query, max_len: u32) -> Vec<u64> {
        let p = Prepared::new(q);
        let states = self.g.n_nodes() << p.k;
        if self.acc_stamp.len() < states {
            self.acc_stamp = vec![0; states];
            self.acc_slot = vec![0; states];
        }
        let kf = max_len.div_ceil(2) as usize;
        let kb = (max_len / 2) as usize;
        for (side, (start, depth)) in [(q.u, kf), (q.v, kb)].into_iter().enumerate() {
            let mut layers = std::mem::take(&mut self.layers[side]);
            layers.resize_with(depth + 1, Vec::new);
            layers[0].clear();
            layers[0].push((start << p.k, 1));
            for t in 1..=depth {
                let (done, rest) = layers.split_at_mut(t);
                self.step_layer(&p, &done[t - 1], &mut rest[0]);
            }
            self.layers[side] = layers;
        }
        let mut counts = vec![0u64; max_len as usize + 1];
        for j in 0..=kb {
            // Index backward layer j by state, then pair it with forward layers j and j + 1.
            let g = self.bump_acc();
            for (slot, &(s, _)) in self.layers[1][j].iter().enumerate() {
                self.acc_stamp[s as usize] = g;
                self.acc_slot[s as usize] = slot as u32;
            }
            for i in [j, j + 1] {
                let len = i + j;
                if len > max_len as usize || i > kf {
                    continue;
                }
                let mut total = 0u64;
                for &(s, c) in &self.layers[0][i] {
                    let (y, a) = (s >> p.k, s & p.full);
                    let need = p.full & !a;
                    let mut t = a;
                    loop {
                        let o = ((y << p.k) | need | t) as usize;
                        if self.acc_stamp[o] == g {
                            let cb = self.layers[1][j][self.acc_slot[o] as usize].1;
                            total = total.saturating_add(c.saturating_mul(cb));
                        }
                        if t == 0 {
                            break;
                        }
                        t = (t - 1) & a;
                    }
                }
                counts[len] = total;
            }
        }
        counts
    }

    fn bump_acc(&mut self) -> u32 {
        self.acc_gen = self.acc_gen.wrapping_add(1);
        if self.acc_gen == 0 {
            self.acc_stamp.fill(0);
            self.acc_gen = 1;
        }
        self.acc_gen
    }

    /// One step of the walk-count DP: every walk of the previous layer extended by one edge.
    fn step_layer(&mut self, p: &Prepared, prev: &[(u32, u64)], next: &mut Vec<(u32, u64)>) {
        let g = self.bump_acc();
        next.clear();
        for &(s, c) in prev {
            let (x, a) = (s >> p.k, s & p.full);
            for &e in self.g.neighbors(x) {
                let (y, l) = unpack(e);
                if p.exclude >> l & 1 != 0 {
                    continue;
                }
                let t = (y << p.k) | a | p.bit[l as usize];
                let ti = t as usize;
                if self.acc_stamp[ti] != g {
                    self.acc_stamp[ti] = g;
                    self.acc_slot[ti] = next.len() as u32;
                    next.push((t, c));
                } else {
                    let slot = &mut next[self.acc_slot[ti] as usize].1;
                    *slot = slot.saturating_add(c);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{Purpose, stream};

    /// AA-AB-AC-AD in a line plus a shortcut AA-AC, labels chosen by hand.
    fn small() -> Graph {
        Graph::from_edges(
            2,
            4,
            vec![0.25; 4],
            vec![(0, 0, 1), (1, 1, 2), (2, 2, 3), (0, 3, 2)],
        )
    }

    #[test]
    fn shortest_respects_constraints() {
        let g = small();
        let mut s = Searcher::new(&g);
        let mut rng = stream(0, Purpose::Explore, 0);
        let q = Query {
            u: 0,
            v: 3,
            include: 0,
            exclude: 0,
        };
        let p = s.shortest(&q, 10, &mut rng).unwrap();
        assert_eq!(p.nodes, vec![0, 2, 3]);
        // Forcing label b (1) takes the long way round.
        let q = Query {
            include: 1 << 1,
            ..q
        };
        let p = s.shortest(&q, 10, &mut rng).unwrap();
        assert_eq!(p.nodes, vec![0, 1, 2, 3]);
        assert!(q.accepts(&g, &p));
        // Excluding c (2) leaves no way to AD.
        let q = Query {
            include: 0,
            exclude: 1 << 2,
            ..q
        };
        assert!(s.shortest(&q, 10, &mut rng).is_none());
        // Including a (0) and d (3) needs a walk that comes back: AA a AB a AA d AC c AD.
        let q = Query {
            include: 1 | 1 << 3,
            exclude: 0,
            ..q
        };
        let p = s.shortest(&q, 10, &mut rng).unwrap();
        assert_eq!(p.hops(), 4);
        assert!(q.accepts(&g, &p));
        assert_eq!(
            s.shortest_count(&q, 10),
            Some((4, 1)),
            "only AA a AB a AA d AC c AD"
        );
        assert!(
            s.shortest(&q, 3, &mut rng).is_none(),
            "h_max bounds the search"
        );
    }

    #[test]
    fn walk_counts_by_hand() {
        let g = small();
        let mut s = Searcher::new(&g);
        let q = Query {
            u: 0,
            v: 3,
            include: 0,
            exclude: 0,
        };
        // ℓ=2: AA-AC-AD. ℓ=3: AA-AB-AC-AD. ℓ=4: AA-AB-AA-AC-AD, AA-AC-AA-AC-AD,
        // AA-AC-AB-AC-AD and AA-AC-AD-AC-AD.
        assert_eq!(s.count_walks(&q, 4), vec![0, 0, 1, 1, 4]);
    }
}
