//! Constrained searches per second, single-threaded, on the paper graph (configs/paper.toml).
//! Two query mixes: |I|, |X| uniform on 0..=4, and the training set's Geometric(0.5) capped at
//! 4. Random node pairs, h_max = 10. Run: `cargo bench --bench search`.

use std::path::Path;
use std::time::Instant;

use lab::config::Config;
use lab::graph::Graph;
use lab::rng::{Purpose, stream};
use lab::search::{Query, Searcher};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

const QUERIES: usize = 50_000;

fn queries(n: u32, rng: &mut ChaCha8Rng, draw: impl Fn(&mut ChaCha8Rng) -> usize) -> Vec<Query> {
    (0..QUERIES)
        .map(|_| {
            let u = rng.random_range(0..n);
            let v = rng.random_range(0..n);
            let mut labels: Vec<u32> = (0..26).collect();
            for i in 0..8 {
                let j = rng.random_range(i..26);
                labels.swap(i, j);
            }
            let (ni, nx) = (draw(rng), draw(rng));
            let set = |ls: &[u32]| ls.iter().fold(0, |s, l| s | 1 << l);
            Query {
                u,
                v,
                include: set(&labels[..ni]),
                exclude: set(&labels[4..4 + nx]),
            }
        })
        .collect()
}

fn main() {
    let cfg = Config::load(Path::new("configs/paper.toml")).expect("configs/paper.toml");
    let g = Graph::generate(&cfg.graph, cfg.n_edges());
    let n = g.n_nodes() as u32;
    let mut rng = stream(99, Purpose::Explore, 0);
    let uniform = queries(n, &mut rng, |r| r.random_range(0..=4));
    let geometric = queries(n, &mut rng, |r| {
        let mut k = 0;
        while k < 4 && !r.random_bool(0.5) {
            k += 1;
        }
        k
    });
    let mut s = Searcher::new(&g);
    for (name, qs) in [("uniform 0-4", &uniform), ("geometric 0-4", &geometric)] {
        let t = Instant::now();
        let (mut found, mut hops) = (0u64, 0u64);
        for q in qs {
            if let Some(p) = s.shortest(q, 10, &mut rng) {
                found += 1;
                hops += p.hops() as u64;
            }
        }
        let dt = t.elapsed().as_secs_f64();
        println!(
            "search, |I| and |X| {name}: {:.0} searches/s single-threaded ({} queries in {dt:.2} s; {found} found, mean {:.2} hops)",
            qs.len() as f64 / dt,
            qs.len(),
            hops as f64 / found.max(1) as f64
        );
    }
}
