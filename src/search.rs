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

/// The search's record of one product-space state, packed so a visit touches one line.
#[derive(Clone, Copy, Default)]
struct Cell {
    /// The query generation that last reached this state; older values mean "unseen".
    stamp: u32,
    dist: u8,
    /// Shortest walks from the side's source to this state (saturating).
    count: u64,
}

/// One direction of the bidirectional BFS: per-state cells over the product space, a per-node
/// tag saying at which depth a node was last reached, and the visit order split into layers.
#[derive(Default)]
struct Side {
    cells: Vec<Cell>,
    node_tag: Vec<u64>,
    order: Vec<u32>,
    layer_start: Vec<usize>,
}

impl Side {
    fn grow(&mut self, states: usize, nodes: usize) {
        if self.cells.len() < states {
            self.cells = vec![Cell::default(); states];
        }
        if self.node_tag.len() < nodes {
            self.node_tag = vec![0; nodes];
        }
    }

    fn reset_stamps(&mut self) {
        self.cells.fill(Cell::default());
        self.node_tag.fill(0);
    }

    fn start(&mut self, s: u32, k: u32, gen_: u32) {
        self.order.clear();
        self.layer_start.clear();
        self.layer_start.push(0);
        self.order.push(s);
        self.cells[s as usize] = Cell {
            stamp: gen_,
            dist: 0,
            count: 1,
        };
        self.node_tag[(s >> k) as usize] = tag(gen_, 0);
    }

    fn depth(&self) -> usize {
        self.layer_start.len() - 1
    }

    fn frontier(&self) -> &[u32] {
        &self.order[*self.layer_start.last().unwrap()..]
    }

    #[inline]
    fn seen(&self, s: u32, gen_: u32) -> bool {
        self.cells[s as usize].stamp == gen_
    }

    #[inline]
    fn dist(&self, s: u32) -> u8 {
        self.cells[s as usize].dist
    }

    #[inline]
    fn count(&self, s: u32) -> u64 {
        self.cells[s as usize].count
    }

    /// Expand the last layer by one hop. Returns false when the new layer is empty.
    fn expand(&mut self, g: &Graph, q: &Prepared, gen_: u32) -> bool {
        let begin = *self.layer_start.last().unwrap();
        let end = self.order.len();
        let next = (self.depth() + 1) as u8;
        let next_tag = tag(gen_, next);
        self.layer_start.push(end);
        for i in begin..end {
            let s = self.order[i];
            let (x, a) = (s >> q.k, s & q.full);
            let c = self.cells[s as usize].count;
            for &e in g.neighbors(x) {
                let (y, l) = unpack(e);
                if q.exclude >> l & 1 != 0 {
                    continue;
                }
                let t = (y << q.k) | a | q.bit[l as usize];
                let cell = &mut self.cells[t as usize];
                if cell.stamp != gen_ {
                    *cell = Cell {
                        stamp: gen_,
                        dist: next,
                        count: c,
                    };
                    self.order.push(t);
                    self.node_tag[y as usize] = next_tag;
                } else if cell.dist == next {
                    cell.count = cell.count.saturating_add(c);
                }
            }
        }
        self.order.len() > end
    }

    /// Walk back from state `s` to this side's source, choosing each predecessor with
    /// probability proportional to its shortest-walk count. Pushes (node, label) steps, the
    /// source's node last with no label.
    fn trace<R: Rng>(
        &self,
        g: &Graph,
        q: &Prepared,
        gen_: u32,
        mut s: u32,
        rng: &mut R,
        nodes: &mut Vec<Node>,
        labels: &mut Vec<Label>,
    ) {
        loop {
            let d = self.dist(s);
            let (x, a) = (s >> q.k, s & q.full);
            nodes.push(x);
            if d == 0 {
                return;
            }
            let mut total: u128 = 0;
            let preds = |visit: &mut dyn FnMut(u32, Label)| {
                for &e in g.neighbors(x) {
                    let (y, l) = unpack(e);
                    if q.exclude >> l & 1 != 0 {
                        continue;
                    }
                    let b = q.bit[l as usize];
                    if b != 0 && a & b == 0 {
                        continue;
                    }
                    for pa in [a, a ^ b].into_iter().take(if b == 0 { 1 } else { 2 }) {
                        let p = (y << q.k) | pa;
                        if self.seen(p, gen_) && self.dist(p) + 1 == d {
                            visit(p, l);
                        }
                    }
                }
            };
            preds(&mut |p, _| total += self.count(p) as u128);
            let mut r = rng.random_range(0..total);
            let mut chosen = None;
            preds(&mut |p, l| {
                if chosen.is_none() {
                    let c = self.count(p) as u128;
                    if r < c {
                        chosen = Some((p, l));
                    } else {
                        r -= c;
                    }
                }
            });
            let (p, l) = chosen.expect("a reached state has a predecessor");
            labels.push(l);
            s = p;
        }
    }
}

/// A per-node tag: the query generation and the depth at which the node was last reached.
#[inline]
fn tag(gen_: u32, depth: u8) -> u64 {
    (gen_ as u64) << 8 | depth as u64
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
        for l in 0..32 {
            if q.include >> l & 1 != 0 {
                bit[l] = 1 << k;
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
        self.gen_ = self.gen_.wrapping_add(1);
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
                fwd: q.u << p.k,
                bwd: q.v << p.k,
                weight: 1,
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
            if !grow.expand(self.g, &p, gen_) {
                return None;
            }
            let other_depth = other.depth() as u8;
            let other_tag = tag(gen_, other_depth);
            for &s in grow.frontier() {
                let (y, a) = (s >> p.k, s & p.full);
                if other.node_tag[y as usize] != other_tag {
                    continue;
                }
                let need = p.full & !a;
                let mut t = a;
                loop {
                    let o = (y << p.k) | need | t;
                    if other.seen(o, gen_) && other.dist(o) == other_depth {
                        let weight = grow.count(s) as u128 * other.count(o) as u128;
                        let (fwd, bwd) = if forward { (s, o) } else { (o, s) };
                        self.meets.push(Meet { fwd, bwd, weight });
                    }
                    if t == 0 {
                        break;
                    }
                    t = (t - 1) & a;
                }
            }
            if !self.meets.is_empty() {
                return Some((p, self.fwd.depth() + self.bwd.depth()));
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
