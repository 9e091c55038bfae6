//! The evaluation set of SPEC §3: base pairs at exact graph distances, nested constraint
//! levels, a uniform reference path and the exact count of valid paths for each query.

use std::collections::{HashMap, HashSet};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError};
use crate::graph::{Graph, Node, label_char};
use crate::rng::{Purpose, stream};
use crate::search::{Path, Query, Searcher};

/// One eval query with its reference answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalQuery {
    pub id: u32,
    pub hop: u32,
    pub level: u32,
    pub query: Query,
    pub path: Path,
    /// Valid walks of exactly `hop` hops.
    pub n_paths: u64,
}

/// The `eval.jsonl` line, field for field.
#[derive(Serialize, Deserialize)]
pub struct EvalLine {
    pub id: u32,
    pub hop: u32,
    pub level: u32,
    pub u: String,
    pub v: String,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub path: Vec<String>,
    pub n_paths: u64,
}

fn label_names(set: u32) -> Vec<String> {
    (0..26u8)
        .filter(|l| set >> l & 1 != 0)
        .map(|l| label_char(l).to_string())
        .collect()
}

impl EvalQuery {
    pub fn to_line(&self, g: &Graph) -> EvalLine {
        let mut path = Vec::with_capacity(2 * self.path.nodes.len());
        for (i, &x) in self.path.nodes.iter().enumerate() {
            if i > 0 {
                path.push(label_char(self.path.labels[i - 1]).to_string());
            }
            path.push(g.node_name(x));
        }
        EvalLine {
            id: self.id,
            hop: self.hop,
            level: self.level,
            u: g.node_name(self.query.u),
            v: g.node_name(self.query.v),
            include: label_names(self.query.include),
            exclude: label_names(self.query.exclude),
            path,
            n_paths: self.n_paths,
        }
    }

    pub fn from_line(g: &Graph, l: &EvalLine) -> anyhow::Result<EvalQuery> {
        let node = |s: &str| {
            g.parse_node(s)
                .ok_or_else(|| anyhow::anyhow!("`{s}` is not a node of this graph"))
        };
        let labels = |v: &[String]| -> anyhow::Result<u32> {
            v.iter().try_fold(0u32, |acc, s| {
                g.parse_label(s)
                    .map(|l| acc | 1 << l)
                    .ok_or_else(|| anyhow::anyhow!("`{s}` is not a label of this graph"))
            })
        };
        let mut path = Path {
            nodes: Vec::new(),
            labels: Vec::new(),
        };
        for (i, t) in l.path.iter().enumerate() {
            if i % 2 == 0 {
                path.nodes.push(node(t)?);
            } else {
                path.labels.push(
                    g.parse_label(t)
                        .ok_or_else(|| anyhow::anyhow!("`{t}` is not a label"))?,
                );
            }
        }
        Ok(EvalQuery {
            id: l.id,
            hop: l.hop,
            level: l.level,
            query: Query {
                u: node(&l.u)?,
                v: node(&l.v)?,
                include: labels(&l.include)?,
                exclude: labels(&l.exclude)?,
            },
            path,
            n_paths: l.n_paths,
        })
    }
}

/// The unordered key of a node pair.
pub fn pair_key(u: Node, v: Node) -> u64 {
    ((u.min(v) as u64) << 32) | u.max(v) as u64
}

/// Draw `count` distinct unordered pairs at distance exactly `h`: a random u, then a random
/// v among the nodes at distance h. Nodes with no unused partner are dropped, so this ends
/// with an error instead of looping when the graph has too few such pairs.
fn pairs_at_distance(
    cfg: &Config,
    g: &Graph,
    split: Split,
    h: u32,
    taken: &HashSet<u64>,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<(Node, Node)>, ConfigError> {
    let want = split.base_paths(cfg) as usize;
    let mut searcher = Searcher::new(g);
    let mut alive: Vec<Node> = (0..g.n_nodes() as Node).collect();
    let mut at_h: HashMap<Node, Vec<Node>> = HashMap::new();
    let mut used = taken.clone();
    let mut pairs = Vec::with_capacity(want);
    while pairs.len() < want {
        if alive.is_empty() {
            return Err(cfg.field_error(
                "data.eval_hops",
                format!(
                    "hop {h}: only {} node pairs lie at distance {h}, need {want} ({})",
                    pairs.len(),
                    split.field()
                ),
            ));
        }
        let i = rng.random_range(0..alive.len());
        let u = alive[i];
        let partners = at_h
            .entry(u)
            .or_insert_with(|| searcher.nodes_at_distance(u, h));
        partners.retain(|&v| !used.contains(&pair_key(u, v)));
        if partners.is_empty() {
            alive.swap_remove(i);
            continue;
        }
        let v = partners[rng.random_range(0..partners.len())];
        used.insert(pair_key(u, v));
        pairs.push((u, v));
    }
    Ok(pairs)
}

/// Add one constraint to (I, X) as SPEC §3 says: an inclusion from the base path's unused
/// labels with probability p_inc, else an exclusion from labels off the path; an empty pool
/// falls back to the other.
fn add_constraint(q: &mut Query, base_labels: u32, all: u32, p_inc: f64, rng: &mut ChaCha8Rng) {
    let inc_pool = base_labels & !q.include;
    let exc_pool = all & !base_labels & !q.exclude;
    let want_inc = rng.random_bool(p_inc);
    let inc = if want_inc {
        inc_pool != 0
    } else {
        exc_pool == 0
    };
    let pool = if inc { inc_pool } else { exc_pool };
    let l = nth_bit(pool, rng.random_range(0..pool.count_ones()));
    if inc {
        q.include |= 1 << l;
    } else {
        q.exclude |= 1 << l;
    }
}

/// The position of the n-th set bit of `set`.
pub fn nth_bit(mut set: u32, n: u32) -> u32 {
    for _ in 0..n {
        set &= set - 1;
    }
    set.trailing_zeros()
}

/// A set of queries built by the eval set's recipe: the eval set itself, or the tuning split
/// (`tune.jsonl`), whose pairs avoid the eval set's and whose draws use streams of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Split {
    Eval,
    Tune,
}

impl Split {
    fn base_paths(self, cfg: &Config) -> u32 {
        match self {
            Split::Eval => cfg.data.base_paths_per_hop,
            Split::Tune => cfg.data.tune_base_paths_per_hop,
        }
    }

    fn field(self) -> &'static str {
        match self {
            Split::Eval => "data.base_paths_per_hop",
            Split::Tune => "data.tune_base_paths_per_hop",
        }
    }

    fn purposes(self) -> (Purpose, Purpose) {
        match self {
            Split::Eval => (Purpose::EvalPairs, Purpose::EvalQueries),
            Split::Tune => (Purpose::TunePairs, Purpose::TuneQueries),
        }
    }
}

/// Build the whole eval set.
pub fn build(cfg: &Config, g: &Graph) -> Result<Vec<EvalQuery>, ConfigError> {
    build_split(cfg, g, Split::Eval, &HashSet::new())
}

/// Build a split whose pairs avoid `taken` (`pair_key`s). Pairs per hop and queries per base
/// pair each use their own random stream, so the result does not depend on the thread count.
pub fn build_split(
    cfg: &Config,
    g: &Graph,
    split: Split,
    taken: &HashSet<u64>,
) -> Result<Vec<EvalQuery>, ConfigError> {
    let seed = cfg.graph.seed;
    let (pair_purpose, query_purpose) = split.purposes();
    let pairs: Vec<(u32, Vec<(Node, Node)>)> = cfg
        .data
        .eval_hops
        .par_iter()
        .map(|&h| {
            let mut rng = stream(seed, pair_purpose, h as u64);
            pairs_at_distance(cfg, g, split, h, taken, &mut rng).map(|p| (h, p))
        })
        .collect::<Result<_, _>>()?;
    let bases: Vec<(u32, Node, Node)> = pairs
        .iter()
        .flat_map(|(h, ps)| ps.iter().map(move |&(u, v)| (*h, u, v)))
        .collect();
    let levels = cfg.data.levels;
    let all_labels = (1u32 << g.n_labels) - 1;
    let per_base: Vec<Vec<EvalQuery>> = bases
        .par_iter()
        .enumerate()
        .map_init(
            || Searcher::new(g),
            |searcher, (i, &(h, u, v))| {
                let mut rng = stream(seed, query_purpose, i as u64);
                let mut q = Query {
                    u,
                    v,
                    include: 0,
                    exclude: 0,
                };
                let base = searcher
                    .shortest(&q, h, &mut rng)
                    .expect("a pair at distance h has a path of h hops");
                let base_labels = base.label_set();
                (1..=levels)
                    .map(|level| {
                        if level > 1 {
                            add_constraint(
                                &mut q,
                                base_labels,
                                all_labels,
                                cfg.data.p_inc,
                                &mut rng,
                            );
                        }
                        let path = searcher
                            .shortest(&q, h, &mut rng)
                            .expect("the base path satisfies every constraint");
                        debug_assert_eq!(path.hops(), h as usize);
                        let n_paths = searcher.count_walks(&q, h)[h as usize];
                        EvalQuery {
                            id: i as u32 * levels + level - 1,
                            hop: h,
                            level,
                            query: q,
                            path,
                            n_paths,
                        }
                    })
                    .collect()
            },
        )
        .collect();
    Ok(per_base.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_bit_walks_set_bits() {
        assert_eq!(nth_bit(0b1011_0000, 0), 4);
        assert_eq!(nth_bit(0b1011_0000, 1), 5);
        assert_eq!(nth_bit(0b1011_0000, 2), 7);
    }
}
