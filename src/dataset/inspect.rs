//! `lab inspect`: a human summary of a data directory, recomputed from its files (graph,
//! eval set, training set), so it doubles as an independent check of the holdout.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::Result;

use crate::dataset::evalset::pair_key;
use crate::dataset::{DataDir, eval_edge_stats, holdout};
use crate::graph::label_char;

/// A text histogram: one row per key with a count and a bar scaled to the largest count.
fn histogram(out: &mut String, rows: &[(String, u64)]) {
    let max = rows.iter().map(|r| r.1).max().unwrap_or(0).max(1);
    for (k, c) in rows {
        let bar = "#".repeat(((*c as f64 / max as f64) * 40.0).ceil() as usize);
        let _ = writeln!(out, "  {k:>6} {c:>9}  {bar}");
    }
}

pub fn summary(dir: &DataDir) -> Result<String> {
    let m = &dir.manifest;
    let g = &dir.graph;
    let eval = dir.eval()?;
    let train = dir.train()?;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "{}: {} (config hash {}, world seed {})",
        dir.dir.display(),
        m.name,
        &m.config_hash[..12],
        m.seeds.world
    );

    let hist = g.degree_histogram();
    let isolated = hist.first().copied().unwrap_or(0);
    let _ = writeln!(
        w,
        "\ngraph: {} nodes, {} edges, {} isolated; degree min {} mean {:.3} max {}",
        g.n_nodes(),
        g.edges.len(),
        isolated,
        m.degree.min,
        m.degree.mean,
        m.degree.max
    );
    let _ = writeln!(w, "degree histogram (degree, nodes):");
    let rows: Vec<(String, u64)> = hist
        .iter()
        .enumerate()
        .map(|(d, c)| (d.to_string(), *c))
        .collect();
    histogram(w, &rows);

    let _ = writeln!(w, "\nlabels (share of edges against w):");
    let counts = g.label_counts();
    let total = g.edges.len().max(1) as f64;
    for (l, c) in counts.iter().enumerate() {
        let share = *c as f64 / total;
        let _ = writeln!(
            w,
            "  {}  {:>7}  {:>6.2}%  w {:>6.2}%  ({:+.2} pp)",
            label_char(l as u8),
            c,
            100.0 * share,
            100.0 * g.weights[l],
            100.0 * (share - g.weights[l])
        );
    }

    let mut grid: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for q in &eval {
        *grid.entry((q.hop, q.level)).or_default() += 1;
    }
    let levels: Vec<u32> = {
        let mut l: Vec<u32> = grid.keys().map(|k| k.1).collect();
        l.sort_unstable();
        l.dedup();
        l
    };
    let hops: Vec<u32> = {
        let mut h: Vec<u32> = grid.keys().map(|k| k.0).collect();
        h.sort_unstable();
        h.dedup();
        h
    };
    let _ = writeln!(
        w,
        "\neval: {} queries over {} pairs (hop x level)",
        eval.len(),
        holdout(&eval).len()
    );
    let _ = write!(w, "  {:>9}", "hop\\level");
    for l in &levels {
        let _ = write!(w, " {l:>6}");
    }
    let _ = writeln!(w, " {:>10}", "mean paths");
    for h in &hops {
        let _ = write!(w, "  {h:>9}");
        for l in &levels {
            let _ = write!(w, " {:>6}", grid.get(&(*h, *l)).copied().unwrap_or(0));
        }
        let per: Vec<f64> = eval
            .iter()
            .filter(|q| q.hop == *h)
            .map(|q| q.n_paths as f64)
            .collect();
        let _ = writeln!(
            w,
            " {:>10.1}",
            per.iter().sum::<f64>() / per.len().max(1) as f64
        );
    }

    let mut lengths: BTreeMap<usize, u64> = BTreeMap::new();
    for ex in &train {
        *lengths.entry(ex.path.hops()).or_default() += 1;
    }
    let _ = writeln!(
        w,
        "\ntraining: {} examples ({} edge coverage, {} exploration); path length (hops, examples):",
        train.len(),
        m.counts.edge_coverage_examples,
        m.counts.explore_examples
    );
    let rows: Vec<(String, u64)> = lengths.iter().map(|(h, c)| (h.to_string(), *c)).collect();
    histogram(w, &rows);
    let _ = writeln!(
        w,
        "rejections: {} draws with no valid path, {} draws redrawn for the holdout",
        m.rejections.no_path, m.rejections.holdout_redraws
    );

    let tune = dir.tune()?.unwrap_or_default();
    if !tune.is_empty() {
        let _ = writeln!(
            w,
            "tuning split: {} queries over {} pairs, none of them an eval pair: {}",
            tune.len(),
            holdout(&tune).len(),
            holdout(&tune).is_disjoint(&holdout(&eval))
        );
    }
    let held = holdout(&[eval.as_slice(), tune.as_slice()].concat());
    let leaks = train
        .iter()
        .filter(|ex| held.contains(&pair_key(ex.query.u, ex.query.v)))
        .count();
    let _ = writeln!(
        w,
        "\nholdout check: {} ({} training examples use one of the {} eval and tuning pairs, either direction)",
        if leaks == 0 { "ok" } else { "FAILED" },
        leaks,
        held.len()
    );
    let (eval_edges, unseen) = eval_edge_stats(g, &eval, &train);
    let _ = writeln!(
        w,
        "eval edges: {eval_edges} eval pairs are edges; {unseen} of them appear in no training path"
    );
    Ok(out)
}
