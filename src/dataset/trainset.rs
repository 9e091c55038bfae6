//! The training set of SPEC §3: two edge-coverage examples per non-held-out edge, then
//! randomized exploration by constrained BFS, holding out every eval pair, then a shuffle.

use std::collections::HashSet;

use indicatif::ProgressBar;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::config::{Config, ConfigError};
use crate::dataset::evalset::pair_key;
use crate::dataset::example::Example;
use crate::graph::{Graph, Node};
use crate::rng::{Purpose, stream};
use crate::search::{Path, Query, Searcher};

/// Consecutive redraws one exploration example may need before the data is declared broken.
const MAX_REDRAWS: u32 = 100_000;
/// Exploration examples per parallel chunk (one searcher per chunk).
const CHUNK: usize = 2048;

/// The training set and what it took to build it.
pub struct TrainSet {
    pub examples: Vec<Example>,
    pub coverage: usize,
    pub explore: usize,
    /// Exploration draws with no valid path within h_max_train.
    pub rejections: u64,
    /// Exploration draws that hit an eval pair and were redrawn.
    pub holdout_redraws: u64,
}

/// Draw k from a geometric distribution on {0, 1, …} with success probability p, capped.
fn geometric(rng: &mut ChaCha8Rng, p: f64, cap: u32) -> u32 {
    let mut k = 0;
    while k < cap && !rng.random_bool(p) {
        k += 1;
    }
    k
}

/// A random subset of `k` labels out of `pool` (a bitset).
fn random_labels(rng: &mut ChaCha8Rng, mut pool: u32, k: u32) -> u32 {
    let mut set = 0;
    for _ in 0..k {
        let l = crate::dataset::evalset::nth_bit(pool, rng.random_range(0..pool.count_ones()));
        set |= 1 << l;
        pool &= !(1 << l);
    }
    set
}

struct Drawn {
    example: Example,
    rejections: u64,
    holdout_redraws: u64,
}

fn explore_one(
    cfg: &Config,
    searcher: &mut Searcher,
    held: &HashSet<u64>,
    rng: &mut ChaCha8Rng,
) -> Result<Drawn, ConfigError> {
    let g = searcher.graph();
    let n = g.n_nodes() as Node;
    let all = (1u32 << g.n_labels) - 1;
    let d = &cfg.data;
    let (mut rejections, mut holdout_redraws) = (0, 0);
    for _ in 0..MAX_REDRAWS {
        let u = rng.random_range(0..n);
        let v = rng.random_range(0..n);
        if u == v {
            continue;
        }
        if held.contains(&pair_key(u, v)) {
            holdout_redraws += 1;
            continue;
        }
        let ni = geometric(rng, d.p_geom, d.max_constraints).min(g.n_labels);
        let nx = geometric(rng, d.p_geom, d.max_constraints).min(g.n_labels - ni);
        let include = random_labels(rng, all, ni);
        let exclude = random_labels(rng, all & !include, nx);
        let query = Query {
            u,
            v,
            include,
            exclude,
        };
        match searcher.shortest(&query, d.h_max_train, rng) {
            Some(path) => {
                return Ok(Drawn {
                    example: Example { query, path },
                    rejections,
                    holdout_redraws,
                });
            }
            None => rejections += 1,
        }
    }
    Err(cfg.field_error(
        "data",
        format!(
            "{MAX_REDRAWS} exploration draws in a row found no valid path within h_max_train = {}; \
             the graph is too sparse for these constraints",
            d.h_max_train
        ),
    ))
}

/// Build the training set. `held` holds the eval pairs; `bar` counts exploration examples.
pub fn build(
    cfg: &Config,
    g: &Graph,
    held: &HashSet<u64>,
    bar: &ProgressBar,
) -> Result<TrainSet, ConfigError> {
    let mut examples = Vec::new();
    for &(u, l, v) in &g.edges {
        if held.contains(&pair_key(u, v)) {
            continue;
        }
        for (a, b) in [(u, v), (v, u)] {
            examples.push(Example {
                query: Query {
                    u: a,
                    v: b,
                    include: 1 << l,
                    exclude: 0,
                },
                path: Path {
                    nodes: vec![a, b],
                    labels: vec![l],
                },
            });
        }
    }
    let coverage = examples.len();
    let explore = cfg.data.n_explore.unwrap_or(3 * coverage as u64) as usize;
    let seed = cfg.graph.seed;
    bar.set_length(explore as u64);
    let chunks: Vec<Vec<Drawn>> = (0..explore.div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut searcher = Searcher::new(g);
            let range = c * CHUNK..((c + 1) * CHUNK).min(explore);
            let n = range.len() as u64;
            let out = range
                .map(|i| {
                    let mut rng = stream(seed, Purpose::Explore, i as u64);
                    explore_one(cfg, &mut searcher, held, &mut rng)
                })
                .collect::<Result<Vec<_>, _>>();
            bar.inc(n);
            out
        })
        .collect::<Result<_, _>>()?;
    let (mut rejections, mut holdout_redraws) = (0, 0);
    for d in chunks.into_iter().flatten() {
        rejections += d.rejections;
        holdout_redraws += d.holdout_redraws;
        examples.push(d.example);
    }
    examples.shuffle(&mut stream(seed, Purpose::Shuffle, 0));
    Ok(TrainSet {
        examples,
        coverage,
        explore,
        rejections,
        holdout_redraws,
    })
}
