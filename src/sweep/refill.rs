//! Figures a committed run lacks, filled in from the same run trained again (issue 52): each
//! evaluation line of the retrained run must hold every figure the committed line holds (equal,
//! or within 1e-12 relative where later code sums identical answers in another order), and each
//! kept answer file must be the retrained run's answers, before the figures the retrained lines
//! (or its tuning-split summaries) add are written into the committed `metrics.jsonl`, the
//! committed figures left as they are.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Result, bail};
use serde_json::{Map, Value};

use crate::eval::{self, answers::outputs};
use crate::fsutil::write_atomic;
use crate::rundir::EVAL;
use crate::sweep::rescore::CLOSE;
use crate::tags;
use crate::train::metrics::{self, METRICS};

/// What a refill did.
pub struct Refilled {
    /// Evaluation lines that gained figures, and the figures they gained.
    pub lines: usize,
    pub added: BTreeSet<String>,
    /// Kept answer files found equal to the retrained run's.
    pub answers: usize,
}

/// A committed figure and the retrained run's: equal, or numbers within `rescore::CLOSE` of each
/// other relative (the summaries' sums of identical answers, in an order later code changed).
fn same(committed: &Value, retrained: Option<&Value>) -> bool {
    match (committed.as_f64(), retrained.and_then(Value::as_f64)) {
        (Some(a), Some(b)) => a == b || (a - b).abs() <= CLOSE * a.abs().max(b.abs()),
        _ => Some(committed) == retrained,
    }
}

/// Fill `committed`'s evaluation lines from `retrained`'s (the same run trained again).
pub fn refill(committed: &Path, retrained: &Path) -> Result<Refilled> {
    let mut theirs: BTreeMap<u64, Map<String, Value>> = metrics::read_lines(retrained)?
        .into_iter()
        .filter(|l| l.contains_key(tags::VAL_LOSS))
        .filter_map(|l| Some((l.get("epoch")?.as_u64()?, l)))
        .collect();
    // A run retrained by the code that trained it logs only what that code logged; the tuning
    // split's figures come from `lab eval --split tune` on its epoch checkpoints instead.
    for (epoch, line) in theirs.iter_mut() {
        for (k, v) in eval::tune_figures_at(retrained, *epoch)?.unwrap_or_default() {
            line.entry(k).or_insert_with(|| Value::from(v));
        }
    }
    let mut ours = metrics::read_lines(committed)?;
    let mut out = Refilled {
        lines: 0,
        added: BTreeSet::new(),
        answers: 0,
    };
    for line in ours.iter_mut().filter(|l| l.contains_key(tags::VAL_LOSS)) {
        let epoch = line.get("epoch").and_then(Value::as_u64).unwrap_or(0);
        let Some(t) = theirs.get(&epoch) else {
            bail!(
                "{}: no evaluation at epoch {epoch}, which {} has",
                retrained.display(),
                committed.display()
            );
        };
        for (k, v) in line.iter() {
            if !same(v, t.get(k)) {
                bail!(
                    "{}: not the same run as {}: epoch {epoch}'s {k} is {v} there and {} here",
                    retrained.display(),
                    committed.display(),
                    t.get(k).map_or("missing".to_string(), Value::to_string)
                );
            }
        }
        let new: Vec<(String, Value)> = t
            .iter()
            .filter(|(k, _)| !line.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if !new.is_empty() {
            out.lines += 1;
        }
        for (k, v) in new {
            out.added.insert(k.clone());
            line.insert(k, v);
        }
    }
    // Every kept answer file, against the retrained run's answers of the same name.
    if let Ok(dir) = std::fs::read_dir(committed.join(EVAL)) {
        for e in dir {
            let name = e?.file_name().to_string_lossy().into_owned();
            let Some(stem) = name
                .strip_suffix(".jsonl.gz")
                .or_else(|| name.strip_suffix(".jsonl"))
            else {
                continue;
            };
            // Greedy answers only: a file of samples keeps several answers a query.
            if !stem.starts_with("epoch-") || stem.contains("sample") {
                continue;
            }
            let theirs = retrained.join(EVAL).join(format!("{stem}.jsonl"));
            if outputs(&committed.join(EVAL).join(&name))? != outputs(&theirs)? {
                bail!(
                    "{}: not the same run as {}: its answers differ",
                    theirs.display(),
                    committed.join(EVAL).join(&name).display()
                );
            }
            out.answers += 1;
        }
    }
    if out.lines > 0 {
        let text: String = ours
            .iter()
            .map(|l| Value::Object(l.clone()).to_string() + "\n")
            .collect();
        write_atomic(&committed.join(METRICS), text.as_bytes())?;
    }
    Ok(out)
}
