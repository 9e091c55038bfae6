//! Constrained searches per second, single-threaded, on the paper graph (configs/paper.toml),
//! with |I| and |X| each drawn uniformly from 0..=4. Run: `cargo bench --bench search`.

use std::path::Path;
use std::time::Instant;

use lab::config::Config;
use lab::graph::Graph;
use lab::rng::{Purpose, stream};
use lab::search::{Query, Searcher};
use rand::Rng;

fn main() {
    let cfg = Config::load(Path::new("configs/paper.toml")).expect("configs/paper.toml");
    let g = Graph::generate(&cfg.graph, cfg.n_edges());
    let n = g.n_nodes() as u32;
    let mut rng = stream(99, Purpose::Explore, 0);
    let queries: Vec<Query> = (0..20_000)
        .map(|_| {
            let u = rng.random_range(0..n);
            let v = rng.random_range(0..n);
            let mut labels: Vec<u32> = (0..26).collect();
            for i in 0..8 {
                let j = rng.random_range(i..26);
                labels.swap(i, j);
            }
            let geo = |rng: &mut rand_chacha::ChaCha8Rng| {
                let mut k = 0;
                while k < 4 && !rng.random_bool(0.5) {
                    k += 1;
                }
                k
            };
            let (ni, nx) = if std::env::var("GEO").is_ok() {
                (geo(&mut rng), geo(&mut rng))
            } else {
                (rng.random_range(0..=4), rng.random_range(0..=4))
            };
            let set = |ls: &[u32]| ls.iter().fold(0, |s, l| s | 1 << l);
            Query {
                u,
                v,
                include: set(&labels[..ni]),
                exclude: set(&labels[4..4 + nx]),
            }
        })
        .collect();
    let mut s = Searcher::new(&g);
    for (name, h_max) in [("h_max 10", 10)] {
        let t = Instant::now();
        let (mut found, mut hops) = (0u64, 0u64);
        let mut vis = [0usize; 5];
        let mut cnt = [0usize; 5];
        for q in &queries {
            let ok = s.shortest(q, h_max, &mut rng).is_some();
            let k = q.include.count_ones() as usize;
            vis[k] += s.visited();
            cnt[k] += 1;
            if !ok && s.visited() > 20000 {
                println!(
                    "fail visited {} I={} X={}",
                    s.visited(),
                    q.include.count_ones(),
                    q.exclude.count_ones()
                );
            }
        }
        for k in 0..5 {
            println!("|I|={k}: mean visited {}", vis[k] / cnt[k].max(1));
        }
        for q in &queries {
            if let Some(p) = s.shortest(q, h_max, &mut rng) {
                found += 1;
                hops += p.hops() as u64;
            }
        }
        let dt = t.elapsed().as_secs_f64();
        println!(
            "search {name}: {} queries in {dt:.3} s = {:.0} searches/s single-threaded ({found} found, mean {:.2} hops)",
            queries.len(),
            queries.len() as f64 / dt,
            hops as f64 / found.max(1) as f64
        );
        let (t2, mut fail_t, mut fails) = (Instant::now(), 0.0, 0);
        for q in &queries {
            let t = Instant::now();
            if s.shortest(q, h_max, &mut rng).is_none() {
                fail_t += t.elapsed().as_secs_f64();
                fails += 1;
            }
        }
        println!(
            "  of which {fails} failed searches took {fail_t:.3} s of {:.3} s",
            t2.elapsed().as_secs_f64()
        );
    }
}
