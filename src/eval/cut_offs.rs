//! What the answers a decode budget cut off become under a longer budget (SPEC §6 Revision):
//! each query whose greedy answer at the run's budget reached it without `<eos>`, classified by
//! its answer at the longer budget as a valid longer path, a finished invalid answer, a loop or
//! babble.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::eval::Answers;
use crate::eval::answers::{cut_off, outputs};
use crate::eval::score::Scored;

/// What a cut-off answer became under the longer budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Became {
    /// A valid path, finished within the longer budget.
    Valid,
    /// Finished within the longer budget, but invalid.
    Invalid,
    /// Still cut off, with a node visited twice: a walk that cycles.
    Loop,
    /// Still cut off, without a repeated node.
    Babble,
}

/// Whether an answer's walk visits a node twice: its node tokens (every other token, from the
/// first) hold a repeat.
pub fn repeats_a_node(output: &str) -> bool {
    let nodes: Vec<&str> = output.split_whitespace().step_by(2).collect();
    let mut seen = std::collections::BTreeSet::new();
    nodes.iter().any(|n| !seen.insert(*n))
}

/// The class of an answer scored at the longer budget.
pub fn became(s: &Scored) -> Became {
    if s.valid {
        Became::Valid
    } else if !s.cut_off {
        Became::Invalid
    } else if repeats_a_node(&s.output) {
        Became::Loop
    } else {
        Became::Babble
    }
}

/// The answers of `default` (a greedy answers file at the run's `budget`) that the budget cut
/// off, each classified by its answer in `longer` (the same queries at `longer_budget`), as
/// lines of text.
pub fn report(
    default: &Path,
    budget: usize,
    longer: &[Answers],
    longer_budget: usize,
) -> Result<String> {
    // The first answer of each query (a greedy file holds one).
    let mut before: BTreeMap<u64, String> = BTreeMap::new();
    for (id, o) in outputs(default)? {
        before.entry(id).or_insert(o);
    }
    let cut: Vec<u64> = before
        .iter()
        .filter(|(_, o)| cut_off(o, budget))
        .map(|(id, _)| *id)
        .collect();
    let mut counts: BTreeMap<Became, usize> = BTreeMap::new();
    let mut hops: BTreeMap<usize, usize> = BTreeMap::new();
    let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
    for a in longer.iter().filter(|a| cut.contains(&(a.query.id as u64))) {
        let Some(s) = a.answers.first() else { continue };
        let b = became(s);
        *counts.entry(b).or_default() += 1;
        match b {
            Became::Valid => *hops.entry(s.hops.unwrap_or(0)).or_default() += 1,
            Became::Invalid => {
                *errors
                    .entry(s.error.map_or("none", |e| e.name()))
                    .or_default() += 1
            }
            _ => {}
        }
    }
    let n = |b| counts.get(&b).copied().unwrap_or(0);
    fn list<K: std::fmt::Display>(m: &BTreeMap<K, usize>) -> String {
        m.iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  cut off at the run's budget of {budget} tokens: {} of {} answers; at {longer_budget} tokens they become:",
        cut.len(),
        before.len()
    );
    let _ = writeln!(
        out,
        "    {} valid longer paths (hops {}), {} finished invalid ({}), {} loops (a node repeated, still cut off), {} babble (still cut off, no node repeated)",
        n(Became::Valid),
        list(&hops),
        n(Became::Invalid),
        list(&errors),
        n(Became::Loop),
        n(Became::Babble)
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(output: &str, valid: bool, cut_off: bool) -> Scored {
        Scored {
            output: output.into(),
            valid,
            error: None,
            edge_error: None,
            hops: None,
            novelty: None,
            utility: 0.0,
            creativity: 0.0,
            repeats_node: false,
            is_reference: false,
            cut_off,
            path: None,
        }
    }

    /// A node visited twice is a loop only among the node tokens: a label repeated is not one.
    #[test]
    fn each_cut_off_answer_gets_one_class() {
        assert!(repeats_a_node("AAA b BBB c AAA d CCC"));
        assert!(!repeats_a_node("AAA b BBB b CCC b DDD"));
        assert_eq!(became(&scored("AAA b BBB", true, false)), Became::Valid);
        assert_eq!(became(&scored("AAA b BBB", false, false)), Became::Invalid);
        assert_eq!(
            became(&scored("AAA b BBB c AAA d", false, true)),
            Became::Loop
        );
        assert_eq!(
            became(&scored("AAA b BBB c CCC d", false, true)),
            Became::Babble
        );
    }
}
