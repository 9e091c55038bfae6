//! Uniform sampling among shortest paths: on a layered graph whose shortest paths pass
//! through nodes very unevenly, a chi-square test must accept the lab's sampler and reject a
//! sampler that picks each step uniformly, showing that the test can fail.

use std::collections::HashMap;

use lab::graph::Graph;
use lab::rng::{Purpose, stream};
use lab::search::{Path as Walk, Query, Searcher};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::util::chi_square_p;

/// u = 0, then layers {1, 2}, {3..=7}, {8, 9, 10}, then v = 11, with uneven edges between layers so that
/// the number of shortest paths through each node differs. All shortest paths have 4 hops.
fn layered() -> (Graph, Query) {
    let links: [&[(u32, u32)]; 4] = [
        &[(0, 1), (0, 2)],
        &[(1, 3), (1, 4), (1, 5), (1, 6), (2, 7)],
        &[
            (3, 8),
            (4, 8),
            (5, 8),
            (6, 9),
            (7, 8),
            (7, 9),
            (7, 10),
            (3, 10),
        ],
        &[(8, 11), (9, 11), (10, 11)],
    ];
    let mut edges = Vec::new();
    for (i, layer) in links.iter().enumerate() {
        for &(a, b) in layer.iter() {
            // Labels vary so that a constraint-free query still exercises label handling.
            edges.push((a, (i % 3) as u8, b));
        }
    }
    let g = Graph::from_edges(2, 3, vec![1.0 / 3.0; 3], edges);
    (
        g,
        Query {
            u: 0,
            v: 11,
            include: 0,
            exclude: 0,
        },
    )
}

/// All shortest paths, by enumeration of 4-hop walks from u to v.
fn all_shortest(g: &Graph, q: &Query) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    let mut stack = vec![vec![q.u]];
    while let Some(p) = stack.pop() {
        if p.len() == 5 {
            if *p.last().unwrap() == q.v {
                out.push(p);
            }
            continue;
        }
        for &e in g.neighbors(*p.last().unwrap()) {
            let mut n = p.clone();
            n.push(lab::graph::unpack(e).0);
            stack.push(n);
        }
    }
    out
}

/// A biased sampler: walk forward from u, choosing uniformly among neighbours that are one
/// step closer to v (by the layer index), ignoring how many paths go through each.
fn biased(g: &Graph, q: &Query, rng: &mut ChaCha8Rng) -> Walk {
    let layer = |x: u32| match x {
        0 => 0,
        1..=2 => 1,
        3..=7 => 2,
        8..=10 => 3,
        _ => 4,
    };
    let mut nodes = vec![q.u];
    let mut labels = vec![];
    while *nodes.last().unwrap() != q.v {
        let x = *nodes.last().unwrap();
        let next: Vec<(u32, u8)> = g
            .neighbors(x)
            .iter()
            .map(|&e| lab::graph::unpack(e))
            .filter(|&(y, _)| layer(y) == layer(x) + 1)
            .collect();
        let (y, l) = next[rng.random_range(0..next.len())];
        nodes.push(y);
        labels.push(l);
    }
    Walk { nodes, labels }
}

/// Chi-square p-value of `samples` against the uniform distribution over `paths`.
fn uniformity_p(paths: &[Vec<u32>], samples: &[Walk]) -> f64 {
    let mut counts: HashMap<&[u32], u64> = paths.iter().map(|p| (p.as_slice(), 0)).collect();
    for s in samples {
        *counts
            .get_mut(s.nodes.as_slice())
            .expect("a sample is a shortest path") += 1;
    }
    let expected = samples.len() as f64 / paths.len() as f64;
    let chi2: f64 = counts
        .values()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    chi_square_p(chi2, (paths.len() - 1) as f64)
}

#[test]
fn shortest_paths_are_sampled_uniformly() {
    let (g, q) = layered();
    let paths = all_shortest(&g, &q);
    // Through node 1: 3-8, 3-10, 4-8, 5-8, 6-9 (5 paths); through node 2: 7-8, 7-9, 7-10 (3).
    assert_eq!(paths.len(), 8, "the layered graph has 8 shortest paths");
    let mut s = Searcher::new(&g);
    assert_eq!(s.shortest_count(&q, 10), Some((4, 8)));
    let mut rng = stream(1, Purpose::Explore, 0);
    let n = 8 * 500;
    let ours: Vec<Walk> = (0..n)
        .map(|_| s.shortest(&q, 10, &mut rng).unwrap())
        .collect();
    let p = uniformity_p(&paths, &ours);
    assert!(
        p > 0.001,
        "the lab's sampler is rejected as non-uniform: p = {p}"
    );

    let theirs: Vec<Walk> = (0..n).map(|_| biased(&g, &q, &mut rng)).collect();
    let p = uniformity_p(&paths, &theirs);
    assert!(
        p < 0.001,
        "the chi-square test must reject a biased sampler: p = {p}"
    );
}

#[test]
fn adjacency_order_does_not_bias_the_choice() {
    // The same graph with node ids permuted gives the same path distribution, up to the
    // relabelling: compare how often each middle node is used.
    let (g, q) = layered();
    let perm: [u32; 12] = [0, 2, 1, 7, 6, 5, 4, 3, 10, 9, 8, 11];
    let edges: Vec<(u32, u8, u32)> = g
        .edges
        .iter()
        .map(|&(a, l, b)| (perm[a as usize], l, perm[b as usize]))
        .collect();
    let h = Graph::from_edges(2, 3, g.weights.clone(), edges);
    let mut rng = stream(2, Purpose::Explore, 0);
    let n = 20_000;
    let mut freq_g = [0f64; 12];
    let mut freq_h = [0f64; 12];
    let (mut sg, mut sh) = (Searcher::new(&g), Searcher::new(&h));
    for _ in 0..n {
        for &x in &sg.shortest(&q, 10, &mut rng).unwrap().nodes {
            freq_g[x as usize] += 1.0 / n as f64;
        }
        for &x in &sh.shortest(&q, 10, &mut rng).unwrap().nodes {
            freq_h[perm.iter().position(|&p| p == x).unwrap()] += 1.0 / n as f64;
        }
    }
    for x in 0..12 {
        assert!(
            (freq_g[x] - freq_h[x]).abs() < 0.02,
            "node {x}: {} vs {}",
            freq_g[x],
            freq_h[x]
        );
    }
}
