//! Aggregates over scored answers (SPEC §6): C, mean U, mean N of valid paths, validity, error
//! counts, the hop × level breakdown, and novelty normalised by 1-hop answers for Figure 4.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::eval::score::{EdgeError, ErrorType, Scored};
use crate::eval::sets::{SetFigures, SetMeans};

/// The figures of one group of answers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Figures {
    pub n: usize,
    pub creativity: f64,
    pub utility: f64,
    /// Mean novelty of the valid answers (null when none is valid).
    pub novelty_valid: Option<f64>,
    pub valid_rate: f64,
    /// Every error type with its count, zeros included.
    pub errors: BTreeMap<String, usize>,
    /// Figure 5's roll-up: format, hallucination, invalid_path.
    pub rollup: BTreeMap<String, usize>,
    /// Hallucinated edges by kind: no_edge, wrong_label.
    pub edge_errors: BTreeMap<String, usize>,
    pub repeats_node: usize,
    pub is_reference: usize,
    /// Answers cut off by the decode budget (no `<eos>` within it); absent from summaries
    /// written before the lab counted them.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cut_off: Option<usize>,
}

impl Figures {
    pub fn of<'a>(answers: impl IntoIterator<Item = &'a Scored>) -> Figures {
        let mut f = Figures {
            errors: ErrorType::ALL
                .iter()
                .map(|e| (e.name().to_string(), 0))
                .collect(),
            rollup: ["format", "hallucination", "invalid_path"]
                .iter()
                .map(|k| (k.to_string(), 0))
                .collect(),
            edge_errors: ["no_edge", "wrong_label"]
                .iter()
                .map(|k| (k.to_string(), 0))
                .collect(),
            ..Figures::default()
        };
        let (mut c, mut u, mut nov, mut valid, mut cut) = (0.0, 0.0, 0.0, 0usize, 0usize);
        for s in answers {
            f.n += 1;
            cut += s.cut_off as usize;
            c += s.creativity;
            u += s.utility;
            if s.valid {
                valid += 1;
                nov += s.novelty.unwrap_or(0.0);
                f.repeats_node += s.repeats_node as usize;
                f.is_reference += s.is_reference as usize;
            }
            if let Some(e) = s.error {
                *f.errors.get_mut(e.name()).unwrap() += 1;
                *f.rollup.get_mut(e.rollup()).unwrap() += 1;
            }
            if let Some(e) = s.edge_error {
                let k = match e {
                    EdgeError::NoEdge => "no_edge",
                    EdgeError::WrongLabel => "wrong_label",
                };
                *f.edge_errors.get_mut(k).unwrap() += 1;
            }
        }
        let n = f.n.max(1) as f64;
        f.creativity = c / n;
        f.utility = u / n;
        f.valid_rate = valid as f64 / n;
        f.novelty_valid = (valid > 0).then(|| nov / valid as f64);
        f.cut_off = Some(cut);
        f
    }

    /// The share of answers cut off by the decode budget, where counted.
    pub fn cut_off_rate(&self) -> Option<f64> {
        self.cut_off.map(|c| c as f64 / self.n.max(1) as f64)
    }
}

/// One cell of the hop × level grid.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Cell {
    pub hop: u32,
    pub level: u32,
    #[serde(flatten)]
    pub figures: Figures,
    /// novelty_valid over the mean novelty of valid 1-hop answers at the same level (the
    /// same number of constraints): Figure 4's y-axis.
    pub novelty_norm: Option<f64>,
    /// Set figures averaged over this cell's queries, when several answers were sampled.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub set: Option<SetMeans>,
}

/// The summary JSON of an evaluation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    #[serde(flatten)]
    pub figures: Figures,
    /// Set figures averaged over queries, when several answers were sampled (SPEC §7).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub set: Option<SetMeans>,
    /// Absent from the tuning-split summaries a study commits (docs/RESULTS.md).
    #[serde(default)]
    pub by_hop_level: Vec<Cell>,
}

/// Summarise answers, each tagged with its query's (hop, level), and the set figures of each
/// query, tagged likewise (empty when one answer per query was asked for).
pub fn summarise(answers: &[(u32, u32, &Scored)], sets: &[(u32, u32, &SetFigures)]) -> Summary {
    let mut groups: BTreeMap<(u32, u32), Vec<&Scored>> = BTreeMap::new();
    for &(h, l, s) in answers {
        groups.entry((h, l)).or_default().push(s);
    }
    let cells: Vec<(u32, u32, Figures)> = groups
        .iter()
        .map(|(&(h, l), v)| (h, l, Figures::of(v.iter().copied())))
        .collect();
    let one_hop: BTreeMap<u32, f64> = cells
        .iter()
        .filter(|(h, _, _)| *h == 1)
        .filter_map(|(_, l, f)| f.novelty_valid.map(|n| (*l, n)))
        .collect();
    let set_of = |keep: &dyn Fn(u32, u32) -> bool| {
        let v: Vec<&SetFigures> = sets
            .iter()
            .filter(|(h, l, _)| keep(*h, *l))
            .map(|s| s.2)
            .collect();
        (!v.is_empty()).then(|| SetMeans::of(v))
    };
    Summary {
        figures: Figures::of(answers.iter().map(|a| a.2)),
        set: set_of(&|_, _| true),
        by_hop_level: cells
            .into_iter()
            .map(|(hop, level, figures)| Cell {
                set: set_of(&|h, l| h == hop && l == level),
                novelty_norm: figures
                    .novelty_valid
                    .zip(one_hop.get(&level))
                    .map(|(n, base)| n / base),
                hop,
                level,
                figures,
            })
            .collect(),
    }
}
