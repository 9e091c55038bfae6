//! Parsing and scoring one answer (SPEC §6), the one place every command uses: the path shape,
//! the 8 error types in the spec's order, novelty, utility and creativity.

use serde::{Deserialize, Serialize};

use crate::graph::{Graph, Label, Node};
use crate::search::{Path, Query};

/// The error taxonomy, in the order the checks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    Empty,
    ParseFailure,
    HallucinatedNode,
    HallucinatedEdge,
    WrongStart,
    WrongEnd,
    IncludeViolation,
    ExcludeViolation,
}

impl ErrorType {
    pub const ALL: [ErrorType; 8] = [
        ErrorType::Empty,
        ErrorType::ParseFailure,
        ErrorType::HallucinatedNode,
        ErrorType::HallucinatedEdge,
        ErrorType::WrongStart,
        ErrorType::WrongEnd,
        ErrorType::IncludeViolation,
        ErrorType::ExcludeViolation,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorType::Empty => "empty",
            ErrorType::ParseFailure => "parse_failure",
            ErrorType::HallucinatedNode => "hallucinated_node",
            ErrorType::HallucinatedEdge => "hallucinated_edge",
            ErrorType::WrongStart => "wrong_start",
            ErrorType::WrongEnd => "wrong_end",
            ErrorType::IncludeViolation => "include_violation",
            ErrorType::ExcludeViolation => "exclude_violation",
        }
    }

    /// Figure 5's roll-up: 3–4 are hallucinations, 5–8 invalid paths, 1–2 format errors.
    pub fn rollup(self) -> &'static str {
        match self {
            ErrorType::Empty | ErrorType::ParseFailure => "format",
            ErrorType::HallucinatedNode | ErrorType::HallucinatedEdge => "hallucination",
            _ => "invalid_path",
        }
    }
}

/// Which way a hallucinated edge is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EdgeError {
    /// The two nodes are not adjacent.
    NoEdge,
    /// They are adjacent, through an edge with another label.
    WrongLabel,
}

impl EdgeError {
    /// How `lab query` says it.
    pub fn describe(self) -> &'static str {
        match self {
            EdgeError::NoEdge => "no edge between two consecutive nodes",
            EdgeError::WrongLabel => "an edge with another label",
        }
    }
}

/// The weights of the score (SPEC §6 Decision: all 1.0).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Alphas {
    pub hops: f64,
    pub rarity: f64,
    pub include: f64,
    pub exclude: f64,
}

impl Alphas {
    /// The weights of a config's `[eval]` section.
    pub fn of(e: &crate::config::EvalConfig) -> Alphas {
        Alphas {
            hops: e.alpha_hops,
            rarity: e.alpha_rarity,
            include: e.alpha_include,
            exclude: e.alpha_exclude,
        }
    }
}

impl Default for Alphas {
    fn default() -> Self {
        Alphas {
            hops: 1.0,
            rarity: 1.0,
            include: 1.0,
            exclude: 1.0,
        }
    }
}

/// One scored answer: the `eval/epoch-NN.jsonl` line without its id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub output: String,
    pub valid: bool,
    pub error: Option<ErrorType>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub edge_error: Option<EdgeError>,
    pub hops: Option<usize>,
    pub novelty: Option<f64>,
    pub utility: f64,
    pub creativity: f64,
    pub repeats_node: bool,
    pub is_reference: bool,
    /// No `<eos>` within the decode budget (a parse failure): written only when true.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub cut_off: bool,
    /// The parsed walk of a valid answer (for set metrics); not written.
    #[serde(skip)]
    pub path: Option<Path>,
}

/// Novelty N(P) = α_h·h + α_r·S(P), S(P) the mean of −ln w over the path's labels.
pub fn novelty(g: &Graph, labels: &[Label], a: &Alphas) -> f64 {
    let h = labels.len();
    let s = if h == 0 {
        0.0
    } else {
        labels
            .iter()
            .map(|&l| -g.weights[l as usize].ln())
            .sum::<f64>()
            / h as f64
    };
    a.hops * h as f64 + a.rarity * s
}

/// U(P; x) for a valid path: (1 + α_I|I|)(1 + α_X|X|).
pub fn utility(q: &Query, a: &Alphas) -> f64 {
    (1.0 + a.include * q.include.count_ones() as f64)
        * (1.0 + a.exclude * q.exclude.count_ones() as f64)
}

/// Score an answer for query `q` (whose reference answer is `reference`). `finished` is false
/// when a model emitted no `<eos>` within its budget. Any string is accepted.
pub fn score(
    g: &Graph,
    q: &Query,
    reference: Option<&Path>,
    output: &str,
    finished: bool,
    a: &Alphas,
) -> Scored {
    let toks: Vec<&str> = output.split_whitespace().collect();
    let fail = |error: ErrorType, edge_error: Option<EdgeError>| Scored {
        output: output.to_string(),
        valid: false,
        error: Some(error),
        edge_error,
        hops: None,
        novelty: None,
        utility: 0.0,
        creativity: 0.0,
        repeats_node: false,
        is_reference: false,
        cut_off: !finished,
        path: None,
    };
    if toks.is_empty() && finished {
        return fail(ErrorType::Empty, None);
    }
    // Node-shaped tokens at even positions, one lowercase letter at odd ones, odd length: any
    // special token (`<eos>`, `:`, `#a`, …) breaks the shape.
    let shape_ok = finished
        && toks.len() % 2 == 1
        && toks.iter().enumerate().all(|(i, t)| {
            if i % 2 == 0 {
                t.bytes().all(|b| b.is_ascii_uppercase())
            } else {
                t.len() == 1 && t.as_bytes()[0].is_ascii_lowercase()
            }
        });
    if !shape_ok {
        return fail(ErrorType::ParseFailure, None);
    }
    let nodes: Option<Vec<Node>> = toks.iter().step_by(2).map(|t| g.parse_node(t)).collect();
    let Some(nodes) = nodes else {
        return fail(ErrorType::HallucinatedNode, None);
    };
    // Label-shaped letters beyond the graph's labels exist on no edge.
    let labels: Vec<Option<Label>> = toks
        .iter()
        .skip(1)
        .step_by(2)
        .map(|t| g.parse_label(t))
        .collect();
    for (w, l) in nodes.windows(2).zip(&labels) {
        match (g.label_between(w[0], w[1]), l) {
            (None, _) => return fail(ErrorType::HallucinatedEdge, Some(EdgeError::NoEdge)),
            (Some(real), Some(l)) if real == *l => {}
            (Some(_), _) => return fail(ErrorType::HallucinatedEdge, Some(EdgeError::WrongLabel)),
        }
    }
    let path = Path {
        nodes,
        labels: labels
            .into_iter()
            .map(|l| l.expect("checked above"))
            .collect(),
    };
    let used = path.label_set();
    let error = if path.nodes[0] != q.u {
        Some(ErrorType::WrongStart)
    } else if *path.nodes.last().unwrap() != q.v {
        Some(ErrorType::WrongEnd)
    } else if q.include & !used != 0 {
        Some(ErrorType::IncludeViolation)
    } else if q.exclude & used != 0 {
        Some(ErrorType::ExcludeViolation)
    } else {
        None
    };
    if let Some(e) = error {
        return fail(e, None);
    }
    let n = novelty(g, &path.labels, a);
    let u = utility(q, a);
    let mut seen = std::collections::HashSet::new();
    Scored {
        output: output.to_string(),
        valid: true,
        error: None,
        edge_error: None,
        hops: Some(path.hops()),
        novelty: Some(n),
        utility: u,
        creativity: u * n,
        repeats_node: !path.nodes.iter().all(|x| seen.insert(*x)),
        is_reference: reference == Some(&path),
        cut_off: false,
        path: Some(path),
    }
}
