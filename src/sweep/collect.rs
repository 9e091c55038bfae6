//! `results.csv`: one row per run per evaluated epoch, with the run's config fields, parameter
//! counts, cumulative FLOPs and every evaluation figure, read from the run directories.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::code::Code;
use crate::config::Config;
use crate::eval::summary::{Cell, Summary};
use crate::fsutil::write_atomic;
use crate::rundir;
use crate::sweep::{PlanRow, State, Sweep, export, squeue_jobs, state};
use crate::tags;
use crate::train::metrics;

/// A parameter count as a short label, one significant digit: 786432 → "800k",
/// 9633792 → "10M", 100663296 → "100M", 12288 → "10k".
pub fn params_label(n: f64) -> String {
    let (v, unit) = if n >= 1e6 {
        (n / 1e6, "M")
    } else {
        (n / 1e3, "k")
    };
    if v < 1.0 {
        return format!("{v:.1}{unit}");
    }
    let digits = 10f64.powf(v.log10().floor());
    format!("{}{unit}", (v / digits).round() * digits)
}

/// What collect found.
pub struct Collected {
    pub path: PathBuf,
    pub rows: usize,
    /// Runs left out, with the reason.
    pub left_out: Vec<(String, String)>,
}

/// A figure per constraint count (level − 1), computed by `f` from that level's cells.
fn per_constraints(s: &Summary, f: impl Fn(&[&Cell]) -> Option<f64>) -> Vec<(u32, f64)> {
    let mut levels: Vec<u32> = s.by_hop_level.iter().map(|c| c.level).collect();
    levels.sort_unstable();
    levels.dedup();
    levels
        .into_iter()
        .filter_map(|l| {
            let cells: Vec<&Cell> = s.by_hop_level.iter().filter(|c| c.level == l).collect();
            f(&cells).map(|v| (l - 1, v))
        })
        .collect()
}

/// Mean `novelty_norm` per constraint count over hops (an unweighted mean of per-hop ratios).
fn novelty_norm_by_constraints(s: &Summary) -> Vec<(u32, f64)> {
    per_constraints(s, |cells| {
        let v: Vec<f64> = cells.iter().filter_map(|c| c.novelty_norm).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    })
}

/// A value as `results.csv` writes it: null empty, a string quoted where it must be.
pub fn csv_field(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if s.contains(',') || s.contains('"') => {
            format!("\"{}\"", s.replace('"', "\"\""))
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A run's group in the figures: its bucket's target, or the sweep for a grid.
pub fn bucket_label(sweep: &str, target: Option<u64>) -> String {
    match target {
        Some(t) => params_label(t as f64),
        None => sweep.to_string(),
    }
}

/// A row of `results.csv` as (column, value) pairs.
pub type Record = Vec<(String, Value)>;

/// Normalised novelty per constraint count (level − 1), pooled over hops: the mean novelty of
/// every valid answer at that count over the mean of its valid 1-hop answers (SPEC §9).
fn novelty_pooled_by_constraints(s: &Summary) -> Vec<(u32, f64)> {
    per_constraints(s, |cells| {
        let (mut sum, mut valid, mut base) = (0.0, 0.0, None);
        for c in cells {
            let f = &c.figures;
            if let Some(nv) = f.novelty_valid {
                let k = f.valid_rate * f.n as f64;
                sum += nv * k;
                valid += k;
                if c.hop == 1 {
                    base = Some(nv);
                }
            }
        }
        base.filter(|_| valid > 0.0).map(|b| sum / valid / b)
    })
}

/// Creativity per hop count, every constraint level's queries pooled (each cell weighted by
/// its query count): the hop axis of the hop × depth test.
fn creativity_by_hop(s: &Summary) -> Vec<(u32, f64)> {
    let mut by: BTreeMap<u32, (f64, f64)> = BTreeMap::new();
    for c in &s.by_hop_level {
        let e = by.entry(c.hop).or_default();
        e.0 += c.figures.creativity * c.figures.n as f64;
        e.1 += c.figures.n as f64;
    }
    by.into_iter()
        .filter(|(_, (_, n))| *n > 0.0)
        .map(|(h, (sum, n))| (h, sum / n))
        .collect()
}

/// `eval/figures.jsonl` of an exported run: one line an evaluation, its `epoch` and the figures
/// collect derives from its summary, so that a study commits them without the summaries.
pub const FIGURES: &str = "figures.jsonl";

/// The figures collect derives from an evaluation's summary: the error rollup, normalised
/// novelty per constraint count (per hop and pooled), and C per hop.
pub fn derived(s: &Summary) -> Record {
    let mut r: Record = Vec::new();
    for (k, v) in &s.figures.rollup {
        r.push((tags::rollup(k), (*v).into()));
    }
    for (c, v) in novelty_norm_by_constraints(s) {
        r.push((tags::novelty_norm(c), v.into()));
    }
    for (c, v) in novelty_pooled_by_constraints(s) {
        r.push((tags::novelty_pooled(c), v.into()));
    }
    for (h, v) in creativity_by_hop(s) {
        r.push((tags::creativity_by_hop(h), v.into()));
    }
    r
}

/// `eval/figures.jsonl`'s text for these evaluations.
pub fn figures_jsonl(by_epoch: &BTreeMap<u64, Record>) -> String {
    let mut text = String::new();
    for (epoch, figures) in by_epoch {
        let mut line = serde_json::Map::new();
        line.insert("epoch".into(), (*epoch).into());
        line.extend(figures.iter().cloned());
        text += &Value::Object(line).to_string();
        text.push('\n');
    }
    text
}

/// A run's derived figures by epoch: from `eval/figures.jsonl` where an export wrote it, else
/// from each evaluated epoch's summary.
pub fn derived_by_epoch(dir: &Path) -> Result<BTreeMap<u64, Record>> {
    let eval = dir.join(rundir::EVAL);
    let figures = eval.join(FIGURES);
    let mut out = BTreeMap::new();
    if figures.exists() {
        let text = std::fs::read_to_string(&figures)
            .with_context(|| format!("{}: cannot read", figures.display()))?;
        for (i, line) in text.lines().enumerate() {
            let bad = || {
                format!(
                    "{}: line {}: not an evaluation's figures",
                    figures.display(),
                    i + 1
                )
            };
            let mut m: serde_json::Map<String, Value> =
                serde_json::from_str(line).with_context(bad)?;
            let epoch = m
                .shift_remove("epoch")
                .and_then(|e| e.as_u64())
                .with_context(bad)?;
            out.insert(epoch, m.into_iter().collect());
        }
        return Ok(out);
    }
    for line in metrics::read_lines(dir)? {
        if !line.contains_key(tags::VAL_LOSS) {
            continue;
        }
        let Some(epoch) = line.get("epoch").and_then(Value::as_u64) else {
            continue;
        };
        let path = rundir::summary_path(dir, epoch);
        if let Ok(text) = std::fs::read_to_string(&path)
            && let Ok(s) = serde_json::from_str::<Summary>(&text)
        {
            out.insert(epoch, derived(&s));
        }
    }
    Ok(out)
}

/// The rows of one run: one per evaluated epoch, read from its directory `row.dir`.
/// `code` is the code that trained it, where the run recorded it.
fn records(
    sweep: &str,
    bucket: &str,
    row: &PlanRow,
    cfg: &Config,
    code: Option<&Code>,
) -> Result<Vec<Record>> {
    let lines = metrics::read_lines(&row.dir)?;
    let derived = derived_by_epoch(&row.dir)?;
    let mut out = Vec::new();
    for line in lines.into_iter().filter(|l| l.contains_key(tags::VAL_LOSS)) {
        let epoch = line.get("epoch").and_then(Value::as_u64).unwrap_or(0);
        let mut r: Record = vec![
            ("sweep".into(), sweep.into()),
            ("run".into(), row.run.clone().into()),
            ("bucket".into(), bucket.into()),
            ("n_layer".into(), row.n_layer.into()),
            ("n_embd".into(), row.n_embd.into()),
            ("n_head".into(), row.n_head.into()),
            (
                "e_over_l".into(),
                (row.n_embd as f64 / row.n_layer as f64).into(),
            ),
            ("seed".into(), cfg.train.seed.into()),
            ("world_seed".into(), cfg.graph.seed.into()),
            ("lr".into(), cfg.peak_lr().into()),
            ("batch_size".into(), cfg.train.batch_size.into()),
            ("epochs".into(), cfg.train.epochs.into()),
            (
                "objective".into(),
                serde_json::to_value(cfg.train.objective)?,
            ),
            ("hash_prefix".into(), cfg.train.hash_prefix.into()),
        ];
        // Only where it is not the default, so that no other study's table changes.
        if cfg.train.hash_draw == crate::config::HashDraw::Once {
            r.push(("hash_draw".into(), "once".into()));
        }
        if let Some(c) = code {
            r.push(("commit".into(), c.label().into()));
        }
        for (k, v) in &row.axes {
            r.push((
                format!("axis:{k}"),
                Value::String(v.trim_matches('"').to_string()),
            ));
        }
        r.push(("total_params".into(), row.total_params.into()));
        r.push((
            "non_embedding_params".into(),
            row.non_embedding_params.into(),
        ));
        for (k, v) in &line {
            r.push((k.clone(), v.clone()));
        }
        if let Some(figures) = derived.get(&epoch) {
            r.extend(figures.iter().cloned());
        }
        if !line.contains_key(tags::CUT_OFF)
            && let Some(share) = cut_off_from_answers(&row.dir, epoch, cfg.decode_budget())
        {
            r.push((tags::CUT_OFF.into(), share.into()));
        }
        out.push(r);
    }
    Ok(out)
}

/// The share of an evaluation's greedy answers that the decode budget cut off (`budget` words
/// or more, no `<eos>` within it), read from its answers file where the run kept it: the share
/// of a run trained before evaluations logged it (`eval/cut_off`).
fn cut_off_from_answers(dir: &Path, epoch: u64, budget: usize) -> Option<f64> {
    let stem = rundir::eval_stem(dir, epoch);
    let path = [
        stem.with_extension("jsonl"),
        stem.with_extension("jsonl.gz"),
    ]
    .into_iter()
    .find(|p| p.exists())?;
    let outputs = crate::eval::answers::outputs(&path).ok()?;
    let cut = outputs
        .iter()
        .filter(|(_, o)| crate::eval::answers::cut_off(o, budget))
        .count();
    (!outputs.is_empty()).then(|| cut as f64 / outputs.len() as f64)
}

/// Write the records as CSV: the fixed columns in order, then every other key sorted.
fn write_csv(records: &[Record], path: &Path) -> Result<()> {
    let mut fixed: Vec<String> = Vec::new();
    let mut rest = BTreeSet::new();
    for r in records {
        for (k, _) in r {
            if k.contains('/') || k.starts_with("axis:") {
                rest.insert(k.clone());
            } else if !fixed.contains(k) {
                fixed.push(k.clone());
            }
        }
    }
    let columns: Vec<String> = fixed.into_iter().chain(rest).collect();
    let mut text = columns.join(",") + "\n";
    for r in records {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| {
                r.iter()
                    .find(|(k, _)| k == c)
                    .map(|(_, v)| csv_field(v))
                    .unwrap_or_default()
            })
            .collect();
        text.push_str(&cells.join(","));
        text.push('\n');
    }
    write_atomic(path, text.as_bytes())
}

pub fn collect(sweep: &Sweep, plan: &[PlanRow]) -> Result<Collected> {
    let squeue = squeue_jobs();
    let mut all = Vec::new();
    let mut left_out = Vec::new();
    for (row, planned) in plan.iter().zip(&sweep.spec.runs) {
        if let State::Failed { log, error } = state(&row.dir, &squeue) {
            left_out.push((
                row.run.clone(),
                format!("failed: {error} (log: {})", log.display()),
            ));
            continue;
        }
        let bucket = bucket_label(&sweep.spec.name, planned.target);
        let code = rundir::read_run_info(&row.dir).ok().and_then(|i| i.code);
        let rs = records(
            &sweep.spec.name,
            &bucket,
            row,
            &planned.config,
            code.as_ref(),
        )?;
        if rs.is_empty() {
            left_out.push((row.run.clone(), "no evaluated epoch yet".into()));
        }
        all.extend(rs);
    }
    let path = sweep.dir.join("results.csv");
    write_csv(&all, &path)?;
    Ok(Collected {
        path,
        rows: all.len(),
        left_out,
    })
}

/// `results.csv` of a results directory (`export`), from its exported runs alone.
pub fn collect_results(results: &Path) -> Result<Collected> {
    let mut all = Vec::new();
    let mut left_out = Vec::new();
    for (meta, dir) in export::runs(results)? {
        let cfg = Config::load(&dir.join(rundir::CONFIG))?;
        let rs = records(
            &meta.sweep,
            &meta.bucket,
            &meta.plan,
            &cfg,
            meta.code.as_ref(),
        )?;
        if rs.is_empty() {
            left_out.push((meta.plan.run.clone(), "no evaluated epoch".into()));
        }
        all.extend(rs);
    }
    let path = results.join("results.csv");
    write_csv(&all, &path)?;
    Ok(Collected {
        path,
        rows: all.len(),
        left_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(params_label(786_432.0), "800k");
        assert_eq!(params_label(12_288.0), "10k");
        assert_eq!(params_label(9_633_792.0), "10M");
        assert_eq!(params_label(100_663_296.0), "100M");
        assert_eq!(params_label(1_000_000.0), "1M");
        assert_eq!(params_label(3_500_000.0), "4M");
    }
}
