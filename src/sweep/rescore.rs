//! `lab sweep rescore`: every answer file a results directory commits (greedy, or sampled as
//! sets), re-scored from its text on a world rebuilt from the run's config, against results.csv.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::config::Config;
use crate::dataset::{self, DataDir};
use crate::eval::answers::{Overrides, Scoring, score_file, scoring};
use crate::report::{Row, read_csv};
use crate::rundir::{CONFIG, EVAL};
use crate::sweep::{collect, export};
use crate::tags;

/// Re-scored figures that differ from results.csv by at most this relative amount are counted
/// as `close`, not mismatches: the scorer's summation order has moved since the oldest studies
/// (the repro-cpu runs re-score to within a few ULPs, not to the bit).
pub const CLOSE: f64 = 1e-12;

/// What re-scoring found.
pub struct Rescored {
    pub files: usize,
    /// Figures compared, and those equal to the last digit.
    pub figures: usize,
    pub exact: usize,
    /// Figures the re-scoring gives that results.csv has no column for (the cut-off share of
    /// runs collected before the lab counted it).
    pub uncollected: usize,
    /// One line per figure that differs: run, epoch, column, committed and re-scored values.
    pub mismatches: Vec<String>,
}

/// The budget B of answers decoded under a final budget, `epoch-NN.budget<B>.jsonl.gz`.
fn final_budget(name: &str) -> Option<u32> {
    name.split('.')
        .find_map(|part| part.strip_prefix("budget")?.parse().ok())
}

/// Re-score every `eval/epoch-NN.jsonl.gz` of `results`'s exported runs with the weights of the
/// run's config and compare each figure an evaluation logs (and each one collect derives) with
/// the committed `results.csv`, digit for digit. Worlds are built once each under `work`.
pub fn rescore(results: &Path, work: &Path) -> Result<Rescored> {
    let rows = read_csv(&results.join("results.csv"))?;
    let by: BTreeMap<(&str, &str), &Row> = rows
        .iter()
        .map(|r| ((r.get("run"), r.get("epoch")), r))
        .collect();
    let mut out = Rescored {
        files: 0,
        figures: 0,
        exact: 0,
        uncollected: 0,
        mismatches: Vec::new(),
    };
    for (meta, dir) in export::runs(results)? {
        let config = dir.join(CONFIG);
        let cfg = Config::load(&config)?;
        let data = work.join(
            dataset::default_dir(&cfg)
                .file_name()
                .context("a data name")?,
        );
        dataset::ensure(&cfg, &data, false)?;
        let (data, weights) = scoring(
            Some(data),
            None,
            Some(config.clone()),
            &Overrides::default(),
        )?;
        let d = DataDir::open(&data)?;
        let queries = d.eval()?;
        let mut names: Vec<String> = std::fs::read_dir(dir.join(EVAL))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("epoch-") && n.ends_with(".jsonl.gz"))
            .collect();
        names.sort();
        for name in names {
            let epoch: u64 = name["epoch-".len()..]
                .split('.')
                .next()
                .and_then(|e| e.parse().ok())
                .with_context(|| format!("{}: not an epoch's answers", name))?;
            let path = dir.join(EVAL).join(&name);
            // Sampled answers score as sets, against the set figures alone; answers under a
            // final budget at that budget, against its own figures.
            let sets = name.contains(".samples.");
            let budget = final_budget(&name);
            let at = Scoring {
                budget: budget.map_or(weights.budget, |b| b as usize),
                ..weights.clone()
            };
            let scored = score_file(&d, &queries, &path, sets, &at)?;
            out.files += 1;
            let run = meta.plan.run.as_str();
            let e = epoch.to_string();
            let Some(row) = by.get(&(run, e.as_str())) else {
                out.mismatches
                    .push(format!("{run} epoch {epoch}: no row in results.csv"));
                continue;
            };
            let figures: Vec<(String, Value)> = if sets {
                crate::eval::figures(&scored.summary)
                    .into_iter()
                    .filter(|(k, _)| k.starts_with(tags::SET))
                    .map(|(k, v)| (k, Value::from(v)))
                    .collect()
            } else if let Some(b) = budget {
                crate::eval::headline(&scored.summary)
                    .into_iter()
                    .map(|(k, v)| (tags::at_budget(&k, b), Value::from(v)))
                    .collect()
            } else {
                crate::eval::figures(&scored.summary)
                    .into_iter()
                    .map(|(k, v)| (k, Value::from(v)))
                    .chain(collect::derived(&scored.summary))
                    .collect()
            };
            for (column, v) in figures {
                if !row.has(&column) {
                    out.uncollected += 1;
                    continue;
                }
                let (was, now) = (row.get(&column), collect::csv_field(&v));
                out.figures += 1;
                let close = match (was.parse::<f64>(), now.parse::<f64>()) {
                    (Ok(a), Ok(b)) => (a - b).abs() <= CLOSE * a.abs().max(b.abs()),
                    _ => false,
                };
                if was == now {
                    out.exact += 1;
                } else if !close {
                    out.mismatches.push(format!(
                        "{run} epoch {epoch} {column}: results.csv {was:?}, re-scored {now:?}"
                    ));
                }
            }
        }
    }
    Ok(out)
}
