//! Set-level creativity (SPEC §7): the distinct valid answers of a query scored as a set with
//! CREATE's creative utility (greedy order, f = U·N, d = 1 − Jaccard over labelled edges,
//! patience γ), and coverage: the answers found over every valid path, counted exactly.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::eval::score::Scored;
use crate::search::{Path, Query, Searcher};

/// The patience values of CREATE's curve.
pub const PATIENCE: [f64; 4] = [0.5, 0.7, 0.9, 1.0];

/// A path's labelled edges as a sorted set of (smaller node, label, larger node).
pub fn edge_set(p: &Path) -> Vec<(u32, u8, u32)> {
    let mut e: Vec<(u32, u8, u32)> = p
        .nodes
        .windows(2)
        .zip(&p.labels)
        .map(|(w, &l)| (w[0].min(w[1]), l, w[0].max(w[1])))
        .collect();
    e.sort_unstable();
    e.dedup();
    e
}

/// 1 − Jaccard similarity of two sorted edge sets (0 for two empty sets).
pub fn distance(a: &[(u32, u8, u32)], b: &[(u32, u8, u32)]) -> f64 {
    let (mut i, mut j, mut common) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - common;
    if union == 0 {
        0.0
    } else {
        1.0 - common as f64 / union as f64
    }
}

/// One member of a set: its value f = U·N, its edges, and a key that orders ties.
#[derive(Clone, Debug)]
pub struct Item {
    pub f: f64,
    pub edges: Vec<(u32, u8, u32)>,
    pub key: String,
}

/// The greedy order and each item's contribution f · min distance to those before it.
#[derive(Clone, Debug, PartialEq)]
pub struct Greedy {
    pub order: Vec<usize>,
    pub gains: Vec<f64>,
}

/// CREATE's greedy order (Eq. 1 adapted, SPEC §7): at each step the item with the largest
/// f · (min distance to those taken), the first at distance 1; ties go to the smaller key, so
/// the order does not depend on the input order.
pub fn greedy(items: &[Item]) -> Greedy {
    let n = items.len();
    let mut taken = vec![false; n];
    let mut mind = vec![1.0f64; n];
    let (mut order, mut gains) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let mut best: Option<usize> = None;
        for i in (0..n).filter(|&i| !taken[i]) {
            let g = items[i].f * mind[i];
            best = match best {
                None => Some(i),
                Some(b) => {
                    let gb = items[b].f * mind[b];
                    if g > gb || (g == gb && items[i].key < items[b].key) {
                        Some(i)
                    } else {
                        Some(b)
                    }
                }
            };
        }
        let b = best.expect("an item is left");
        taken[b] = true;
        order.push(b);
        gains.push(items[b].f * mind[b]);
        for i in (0..n).filter(|&i| !taken[i]) {
            mind[i] = mind[i].min(distance(&items[i].edges, &items[b].edges));
        }
    }
    Greedy { order, gains }
}

/// s(S) = Σ γ^(i−1) · gain_i over the greedy order.
pub fn score(g: &Greedy, gamma: f64) -> f64 {
    g.gains
        .iter()
        .enumerate()
        .fold(0.0, |acc, (i, x)| acc + gamma.powi(i as i32) * x)
}

/// The set figures of one query's answers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SetFigures {
    /// Answers, valid or not.
    pub answers: usize,
    /// Answers repeating an earlier answer's text.
    pub repeats: usize,
    /// Distinct valid paths.
    pub distinct_valid: usize,
    /// s(S) at the configured γ.
    pub score: f64,
    /// s(S) at each γ of CREATE's patience curve.
    pub patience: BTreeMap<String, f64>,
    /// Distinct valid paths of at most h + k hops over the exact count of all such paths.
    pub coverage: f64,
    /// That exact count.
    pub paths_within: u64,
    /// Mean pairwise distance of the distinct valid paths (null below two).
    pub mean_distance: Option<f64>,
    /// Mean novelty of the valid answers (null when none is valid).
    pub novelty_valid: Option<f64>,
}

/// The distinct valid answers as set items.
pub fn items(answers: &[Scored]) -> Vec<(Item, Path)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for a in answers {
        if let Some(p) = &a.path
            && seen.insert((p.nodes.clone(), p.labels.clone()))
        {
            out.push((
                Item {
                    f: a.creativity,
                    edges: edge_set(p),
                    key: a.output.clone(),
                },
                p.clone(),
            ));
        }
    }
    out
}

/// Score the answers to query `q`, whose shortest valid paths have `hop` hops; coverage
/// counts paths of at most `hop + k` hops.
pub fn figures(
    answers: &[Scored],
    q: &Query,
    hop: u32,
    k: u32,
    gamma: f64,
    searcher: &mut Searcher,
) -> SetFigures {
    let its = items(answers);
    let plain: Vec<Item> = its.iter().map(|(i, _)| i.clone()).collect();
    let g = greedy(&plain);
    let limit = hop + k;
    let within = its.iter().filter(|(_, p)| p.hops() as u32 <= limit).count();
    let total: u64 = searcher
        .count_walks(q, limit)
        .iter()
        .fold(0u64, |a, &c| a.saturating_add(c));
    let pairs: Vec<f64> = (0..plain.len())
        .flat_map(|i| (i + 1..plain.len()).map(move |j| (i, j)))
        .map(|(i, j)| distance(&plain[i].edges, &plain[j].edges))
        .collect();
    let texts: BTreeSet<&str> = answers.iter().map(|a| a.output.as_str()).collect();
    let valid: Vec<f64> = answers.iter().filter_map(|a| a.novelty).collect();
    SetFigures {
        answers: answers.len(),
        repeats: answers.len() - texts.len(),
        distinct_valid: plain.len(),
        score: score(&g, gamma),
        patience: PATIENCE
            .iter()
            .map(|&gm| (format!("{gm:.1}"), score(&g, gm)))
            .collect(),
        coverage: if total == 0 {
            0.0
        } else {
            within as f64 / total as f64
        },
        paths_within: total,
        mean_distance: (!pairs.is_empty()).then(|| pairs.iter().sum::<f64>() / pairs.len() as f64),
        novelty_valid: (!valid.is_empty()).then(|| valid.iter().sum::<f64>() / valid.len() as f64),
    }
}

/// Means of set figures over queries.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SetMeans {
    pub queries: usize,
    pub score: f64,
    pub patience: BTreeMap<String, f64>,
    pub coverage: f64,
    pub distinct_valid: f64,
    pub repeats: f64,
    pub mean_distance: Option<f64>,
    pub novelty_valid: Option<f64>,
}

impl SetMeans {
    pub fn of<'a>(sets: impl IntoIterator<Item = &'a SetFigures>) -> SetMeans {
        let sets: Vec<&SetFigures> = sets.into_iter().collect();
        let n = sets.len().max(1) as f64;
        let mean_opt = |f: &dyn Fn(&SetFigures) -> Option<f64>| {
            let v: Vec<f64> = sets.iter().filter_map(|s| f(s)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        SetMeans {
            queries: sets.len(),
            score: sets.iter().map(|s| s.score).sum::<f64>() / n,
            patience: PATIENCE
                .iter()
                .map(|g| {
                    let k = format!("{g:.1}");
                    let m = sets
                        .iter()
                        .map(|s| s.patience.get(&k).copied().unwrap_or(0.0))
                        .sum::<f64>()
                        / n;
                    (k, m)
                })
                .collect(),
            coverage: sets.iter().map(|s| s.coverage).sum::<f64>() / n,
            distinct_valid: sets.iter().map(|s| s.distinct_valid as f64).sum::<f64>() / n,
            repeats: sets.iter().map(|s| s.repeats as f64).sum::<f64>() / n,
            mean_distance: mean_opt(&|s| s.mean_distance),
            novelty_valid: mean_opt(&|s| s.novelty_valid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jaccard_distance() {
        let a = vec![(0, 0, 1), (1, 1, 2)];
        let b = vec![(1, 1, 2), (2, 2, 3)];
        assert!((distance(&a, &b) - (1.0 - 1.0 / 3.0)).abs() < 1e-12);
        assert_eq!(distance(&a, &a), 0.0);
        assert_eq!(distance(&a, &[]), 1.0);
    }
}
