//! Selection (SPEC Revision: selection): a sweep axis whose value comes from an earlier sweep's
//! exported runs, the best by a named metric for each setting of the other axes (tune, then seeds).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use toml::Value;

use crate::eval;
use crate::sweep::export;
use crate::sweep::planned::Planned;
use crate::tags;
use crate::train::metrics;

/// `[[select]]` in a spec: `key` takes, for each run, the value of the run of `from` (an earlier
/// sweep's spec, relative to this one) with the same model shape and other axes whose `metric`
/// at its last evaluation is lowest (or highest, as `best` says).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectSpec {
    pub key: String,
    pub from: PathBuf,
    pub metric: String,
    /// Fields not compared when matching runs (`["model.n_embd", "model.n_head"]`: one
    /// choice per depth, for variants whose widths or heads the tuning sweep did not train).
    #[serde(default)]
    pub ignore: Vec<String>,
    #[serde(default)]
    pub best: Best,
}

/// Which end of the metric wins: the lowest (a loss; the default) or the highest (the tuning
/// split's creativity, the second reading of "near-optimal conditions").
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Best {
    #[default]
    Lowest,
    Highest,
}

impl Best {
    fn word(self) -> &'static str {
        match self {
            Best::Lowest => "lowest",
            Best::Highest => "highest",
        }
    }
}

/// Metrics that are computed on the eval queries: selecting on them would tune on the test set.
const EVAL_SET_METRICS: [&str; 5] = ["val/", "eval/", "rollup/", "novelty_", "creativity_by_hop"];

/// One choice: the setting it was made for, every candidate with its metric, and the winner.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Choice {
    pub key: String,
    pub metric: String,
    pub best: &'static str,
    pub from: String,
    /// The other axes' values (model shape first) that the candidates share with the run.
    pub setting: BTreeMap<String, String>,
    /// (value, metric at the last evaluation; NaN for a run that diverged), in the earlier
    /// sweep's order.
    pub candidates: Vec<(String, f64)>,
    pub chosen: String,
}

impl Choice {
    /// One line: the setting, the winner and every candidate.
    pub fn line(&self) -> String {
        let setting: Vec<String> = self
            .setting
            .iter()
            .map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k)))
            .collect();
        let cands: Vec<String> = self
            .candidates
            .iter()
            .map(|(v, m)| format!("{v}: {m:.4}"))
            .collect();
        format!(
            "{} for {}: {} ({} {} of {} in {})",
            self.key,
            setting.join(" "),
            self.chosen,
            self.best,
            self.metric,
            cands.join(", "),
            self.from
        )
    }
}

/// The earlier sweep's runs: each one's setting, value of `key` and metric.
pub struct Candidates {
    spec: SelectSpec,
    from_name: String,
    runs: Vec<(BTreeMap<String, String>, String, f64)>,
}

/// A run's setting as selection compares it: the model shape and its axes, but the selected
/// key, the seed and what `s` ignores.
fn setting(
    s: &SelectSpec,
    shape: [u32; 3],
    axes: impl Iterator<Item = (String, String)>,
) -> BTreeMap<String, String> {
    let keep = |k: &str| k != s.key && k != "train.seed" && !s.ignore.iter().any(|i| i == k);
    ["model.n_layer", "model.n_embd", "model.n_head"]
        .iter()
        .map(|k| k.to_string())
        .zip(shape.iter().map(u32::to_string))
        .chain(axes)
        .filter(|(k, _)| keep(k))
        .collect()
}

/// A `tune/` figure that a run's metrics do not log (it was trained before the tuning split's
/// greedy evaluation was), from the tuning-split summary of its last evaluation that `lab eval
/// --split tune` wrote there; None when there is none.
fn tune_summary_figure(
    dir: &Path,
    lines: &[serde_json::Map<String, serde_json::Value>],
    metric: &str,
) -> Result<Option<f64>> {
    let last = lines
        .iter()
        .rev()
        .find(|l| l.contains_key(tags::VAL_LOSS))
        .and_then(|l| l.get("epoch")?.as_u64());
    let Some(epoch) = last.filter(|_| metric.starts_with("tune/")) else {
        return Ok(None);
    };
    Ok(eval::tune_figures_at(dir, epoch)?
        .and_then(|f| f.into_iter().find(|(k, _)| k == metric))
        .map(|(_, v)| v))
}

impl Candidates {
    /// Read the candidates of `s` from the exported runs of its `from` sweep; `spec` is the
    /// path of the spec that selects (for errors and the relative path).
    /// `from` is the earlier spec's path; `from_name`, `results` and `earlier` its name, results
    /// directory and planned runs.
    pub fn load(
        spec: &Path,
        s: &SelectSpec,
        from: &Path,
        from_name: &str,
        results: Option<&Path>,
        earlier: &[Planned],
    ) -> Result<Candidates> {
        let at = |reason: String| anyhow::anyhow!("{}: select {}: {reason}", spec.display(), s.key);
        if let Some(p) = EVAL_SET_METRICS.iter().find(|p| s.metric.contains(*p)) {
            return Err(at(format!(
                "metric {:?} is computed on the eval queries ({p}…); select on the tuning split (tune/loss, tune/creativity)",
                s.metric
            )));
        }
        let results =
            results.ok_or_else(|| at(format!("{}: has no results directory", from.display())))?;
        let exported = export::runs(results).unwrap_or_default();
        let mut runs = Vec::new();
        let mut missing = 0;
        for p in earlier {
            let Some((_, dir)) = exported.iter().find(|(m, _)| m.plan.run == p.name) else {
                missing += 1;
                continue;
            };
            let value = p
                .axes
                .iter()
                .find(|(k, _)| *k == s.key)
                .map(|(_, v)| v.to_string())
                .ok_or_else(|| at(format!("{} is not an axis of {}", s.key, from.display())))?;
            let lines = metrics::read_lines(dir)?;
            let logged = lines
                .iter()
                .rev()
                .find_map(|l| l.get(&s.metric).map(|v| v.as_f64().unwrap_or(f64::NAN)));
            let metric = logged
                .map(Ok)
                .or_else(|| tune_summary_figure(dir, &lines, &s.metric).transpose())
                .transpose()?
                .ok_or_else(|| {
                    at(format!(
                        "{}: logs no {:?} (a tuning split: data.tune_base_paths_per_hop)",
                        dir.display(),
                        s.metric
                    ))
                })?;
            let m = &p.config.model;
            let axes = p.axes.iter().map(|(k, v)| (k.clone(), v.to_string()));
            runs.push((
                setting(s, [m.n_layer, m.n_embd, m.n_head], axes),
                value,
                metric,
            ));
        }
        if missing > 0 {
            bail!(
                "{}: select {}: {missing} of {} runs of {} are not exported to {} yet; finish that sweep first",
                spec.display(),
                s.key,
                earlier.len(),
                from.display(),
                results.display()
            );
        }
        Ok(Candidates {
            spec: s.clone(),
            from_name: from_name.to_string(),
            runs,
        })
    }

    /// The choice for a run of shape (L, E, H) with the given axes: the candidate with the
    /// best metric among those that share every one of their axes with it (NaN never wins;
    /// a tie goes to the earlier candidate).
    pub fn choose(&self, shape: [u32; 3], axes: &[(String, Value)]) -> Result<(Value, Choice)> {
        let mine = setting(
            &self.spec,
            shape,
            axes.iter().map(|(k, v)| (k.clone(), v.to_string())),
        );
        let matching: Vec<&(BTreeMap<String, String>, String, f64)> = self
            .runs
            .iter()
            .filter(|(s, _, _)| s.iter().all(|(k, v)| mine.get(k) == Some(v)))
            .collect();
        let best = matching
            .iter()
            .filter(|r| !r.2.is_nan())
            .min_by(|a, b| match self.spec.best {
                Best::Lowest => a.2.total_cmp(&b.2),
                Best::Highest => b.2.total_cmp(&a.2),
            })
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "select {}: no run of {} with a finite {} matches {:?}",
                    self.spec.key,
                    self.from_name,
                    self.spec.metric,
                    mine
                )
            })?;
        let value: Value = toml::from_str::<toml::Table>(&format!("v = {}", best.1))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .with_context(|| format!("select {}: value {:?}", self.spec.key, best.1))?;
        let choice = Choice {
            key: self.spec.key.clone(),
            metric: self.spec.metric.clone(),
            best: self.spec.best.word(),
            from: self.from_name.clone(),
            setting: best.0.clone(),
            candidates: matching.iter().map(|r| (r.1.clone(), r.2)).collect(),
            chosen: best.1.clone(),
        };
        Ok((value, choice))
    }

    pub fn key(&self) -> &str {
        &self.spec.key
    }
}
