//! Property tests on small random worlds, checked against brute force written here, not
//! against the lab's search: paths are valid and shortest, counts are exact, the eval set is
//! nested and at the right distances, and the holdout holds.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

use indicatif::ProgressBar;
use lab::config::Config;
use lab::dataset::{evalset, trainset};
use lab::graph::Graph;
use lab::search::{Path as Walk, Query, Searcher};
use proptest::prelude::*;

/// The graph as a map from unordered pair to label, built from the edge list only.
fn edge_map(g: &Graph) -> HashMap<(u32, u32), u8> {
    let mut m = HashMap::new();
    for &(u, l, v) in &g.edges {
        m.insert((u, v), l);
        m.insert((v, u), l);
    }
    m
}

/// Validity, written from the spec's definition.
fn valid(edges: &HashMap<(u32, u32), u8>, q: &Query, p: &Walk) -> bool {
    if p.nodes.len() != p.labels.len() + 1 || p.nodes[0] != q.u || *p.nodes.last().unwrap() != q.v {
        return false;
    }
    let mut used = 0u32;
    for (i, &l) in p.labels.iter().enumerate() {
        if edges.get(&(p.nodes[i], p.nodes[i + 1])) != Some(&l) {
            return false;
        }
        used |= 1 << l;
    }
    q.include & !used == 0 && q.exclude & used == 0
}

/// Every walk from u of exactly `len` hops, by depth-first enumeration.
fn walks(g: &Graph, edges: &HashMap<(u32, u32), u8>, u: u32, len: usize) -> Vec<Walk> {
    let mut adj: HashMap<u32, Vec<(u32, u8)>> = HashMap::new();
    for (&(a, b), &l) in edges {
        adj.entry(a).or_default().push((b, l));
    }
    let _ = g;
    let mut out = Vec::new();
    let mut stack = vec![Walk {
        nodes: vec![u],
        labels: vec![],
    }];
    while let Some(w) = stack.pop() {
        if w.labels.len() == len {
            out.push(w);
            continue;
        }
        for &(b, l) in adj
            .get(w.nodes.last().unwrap())
            .map(|v| v.as_slice())
            .unwrap_or(&[])
        {
            let mut n = w.clone();
            n.nodes.push(b);
            n.labels.push(l);
            stack.push(n);
        }
    }
    out
}

/// Count of valid walks of exactly `len` hops, by enumeration.
fn brute_count(g: &Graph, edges: &HashMap<(u32, u32), u8>, q: &Query, len: usize) -> u64 {
    walks(g, edges, q.u, len)
        .iter()
        .filter(|w| valid(edges, q, w))
        .count() as u64
}

/// The shortest valid walk length up to `h_max`, by enumeration.
fn brute_shortest(
    g: &Graph,
    edges: &HashMap<(u32, u32), u8>,
    q: &Query,
    h_max: usize,
) -> Option<usize> {
    (0..=h_max).find(|&len| brute_count(g, edges, q, len) > 0)
}

/// Plain BFS distance, ignoring labels.
fn bfs_dist(edges: &HashMap<(u32, u32), u8>, u: u32, v: u32) -> Option<usize> {
    let mut seen = HashSet::from([u]);
    let mut queue = VecDeque::from([(u, 0)]);
    while let Some((x, d)) = queue.pop_front() {
        if x == v {
            return Some(d);
        }
        for (&(a, b), _) in edges.iter() {
            if a == x && seen.insert(b) {
                queue.push_back((b, d + 1));
            }
        }
    }
    None
}

fn world(seed: u64, n_labels: u32, degree: f64) -> (Config, Graph) {
    let text = format!(
        "[graph]\nnode_len = 1\nn_labels = {n_labels}\navg_degree = {degree}\nseed = {seed}\n\
         [data]\neval_hops = [1, 2, 3]\nbase_paths_per_hop = 4\nlevels = 3\nn_explore = 60\nh_max_train = 6\n"
    );
    let cfg = Config::from_toml(&text, Path::new("prop.toml"), "prop").unwrap();
    let g = Graph::generate(&cfg.graph, cfg.n_edges());
    (cfg, g)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Every training and eval path is valid for its query and as short as brute force says;
    /// the eval set is nested, sized and at the right distances; the holdout holds.
    #[test]
    fn datasets_are_valid_shortest_and_held_out(seed in 0u64..1_000, n_labels in 2u32..6, degree in 3.0f64..6.0) {
        let (cfg, g) = world(seed, n_labels, degree);
        let edges = edge_map(&g);
        // Worlds of 26 nodes and degree >= 3 always have 4 pairs at each of 1..=3 hops.
        let eval = evalset::build(&cfg, &g).expect("enough pairs at each hop");
        prop_assert_eq!(eval.len(), 3 * 4 * 3);
        for q in &eval {
            prop_assert!(valid(&edges, &q.query, &q.path), "eval path valid");
            prop_assert_eq!(q.path.hops(), q.hop as usize);
            prop_assert_eq!(bfs_dist(&edges, q.query.u, q.query.v), Some(q.hop as usize));
            prop_assert_eq!(brute_shortest(&g, &edges, &q.query, q.hop as usize), Some(q.hop as usize));
            prop_assert_eq!(q.n_paths, brute_count(&g, &edges, &q.query, q.hop as usize));
            let n = q.query.include.count_ones() + q.query.exclude.count_ones();
            prop_assert_eq!(n, q.level - 1, "level l has l-1 constraints");
            prop_assert_eq!(q.query.include & q.query.exclude, 0);
        }
        for base in eval.chunks(3) {
            for w in base.windows(2) {
                prop_assert_eq!((w[0].query.u, w[0].query.v), (w[1].query.u, w[1].query.v));
                prop_assert_eq!(w[0].query.include & !w[1].query.include, 0, "levels nest");
                prop_assert_eq!(w[0].query.exclude & !w[1].query.exclude, 0, "levels nest");
            }
        }
        let held: HashSet<(u32, u32)> = eval
            .iter()
            .flat_map(|q| [(q.query.u, q.query.v), (q.query.v, q.query.u)])
            .collect();
        let train = trainset::build(&cfg, &g, &lab::dataset::holdout(&eval), &ProgressBar::hidden()).unwrap();
        for ex in &train.examples {
            prop_assert!(valid(&edges, &ex.query, &ex.path), "training path valid");
            prop_assert!(!held.contains(&(ex.query.u, ex.query.v)), "holdout");
            prop_assert_eq!(brute_shortest(&g, &edges, &ex.query, 6), Some(ex.path.hops()));
        }
        let coverage = train.examples.iter().filter(|e| e.path.hops() == 1 && e.query.include.count_ones() == 1 && e.query.exclude == 0).count();
        prop_assert!(coverage >= train.coverage);
    }

    /// Walk counts of every length up to 5 equal brute-force enumeration, with constraints.
    #[test]
    fn walk_counts_match_enumeration(seed in 0u64..1_000, u in 0u32..26, v in 0u32..26, inc in 0u32..16, exc in 0u32..16) {
        let (_, g) = world(seed, 4, 3.0);
        let edges = edge_map(&g);
        let q = Query { u, v, include: inc & !exc, exclude: exc };
        let mut s = Searcher::new(&g);
        let counts = s.count_walks(&q, 5);
        for (len, &c) in counts.iter().enumerate() {
            prop_assert_eq!(c, brute_count(&g, &edges, &q, len), "length {}", len);
        }
        let shortest = s.shortest_count(&q, 5);
        let first = counts.iter().position(|&c| c > 0);
        prop_assert_eq!(shortest.map(|(d, _)| d), first);
        if let (Some((d, n)), Some(_)) = (shortest, first) {
            prop_assert_eq!(n as u64, counts[d], "shortest count");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// A world of the first N names: every edge and eval node is among them, the vocabulary
    /// holds exactly those N nodes, and a name past them is not a node.
    #[test]
    fn a_cut_world_keeps_the_first_n_names(n in 30u64..676, seed in 0u64..1_000) {
        let text = format!("[graph]\nnode_len = 2\nn_nodes = {n}\nseed = {seed}\n");
        let cfg = Config::from_toml(&text, Path::new("cut.toml"), "cut").unwrap();
        let g = Graph::generate(&cfg.graph, cfg.n_edges());
        prop_assert_eq!(g.n_nodes() as u64, n);
        prop_assert_eq!(g.edges.len() as u64, n * 3);
        prop_assert!(g.edges.iter().all(|&(u, _, v)| (u as u64) < n && (v as u64) < n));
        let last = g.node_name(n as u32 - 1);
        prop_assert_eq!(g.parse_node(&last), Some(n as u32 - 1));
        let past: String = {
            let x = n as u32;
            [(b'A' + (x / 26) as u8) as char, (b'A' + (x % 26) as u8) as char].iter().collect()
        };
        prop_assert_eq!(g.parse_node(&past), None);
        let v = lab::tokenizer::Vocab::new(&g);
        prop_assert_eq!(v.encode(&past), vec![lab::tokenizer::UNK]);
        prop_assert!(v.encode(&last)[0] != lab::tokenizer::UNK);
        let nodes = (0..v.n_tokens()).filter(|&i| v.as_node(i).is_some()).count() as u64;
        prop_assert_eq!(nodes, n);
    }
}

/// `edge_labels = "uniform"` draws labels uniformly while w (zipf) stays the scoring weights;
/// "weighted" draws them from w. Chi-square against each, 25 degrees of freedom: 1% critical
/// value 44.3.
#[test]
fn edge_labels_uniform_or_weighted() {
    let chi2 = |counts: &[u64], w: &[f64]| -> f64 {
        let n: u64 = counts.iter().sum();
        counts
            .iter()
            .zip(w)
            .map(|(&c, &p)| (c as f64 - n as f64 * p).powi(2) / (n as f64 * p))
            .sum()
    };
    let uniform = vec![1.0 / 26.0; 26];
    for (draw, fits_uniform) in [("uniform", true), ("weighted", false)] {
        let text = format!("[graph]\nedge_labels = \"{draw}\"\n");
        let cfg = Config::from_toml(&text, Path::new("w.toml"), "w").unwrap();
        let g = Graph::generate(&cfg.graph, cfg.n_edges());
        // w is the zipf distribution either way.
        assert!((g.weights[0] / g.weights[1] - 2.0).abs() < 1e-12, "{draw}");
        let counts = g.label_counts();
        let (to_uniform, to_w) = (chi2(&counts, &uniform), chi2(&counts, &g.weights));
        if fits_uniform {
            assert!(
                to_uniform < 44.3 && to_w > 1000.0,
                "{draw}: {to_uniform} {to_w}"
            );
        } else {
            assert!(
                to_w < 44.3 && to_uniform > 1000.0,
                "{draw}: {to_uniform} {to_w}"
            );
        }
    }
}
