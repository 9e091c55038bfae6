//! A sweep's committed results (`results = DIR` in its spec): each finished run's small files
//! written to `DIR/runs/<run>/` in the committed layout (docs/RESULTS.md), so that a study lives
//! in git, is collected from there, and is never trained twice.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::code::Code;
use crate::fsutil::{StagingDir, read_text, write_atomic};
use crate::rundir::{self, CONFIG, DONE, EVAL};
use crate::sweep::PlanRow;
use crate::sweep::collect::{self, FIGURES};
use crate::tags;
use crate::train::metrics;

/// What `lab sweep export` writes of a finished run (docs/RESULTS.md): a study of a hundred
/// runs would add hundreds of MB to every clone with every answer and every step's metrics.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Keep {
    /// Greedy answers of every evaluated epoch (`all`), of the last one (`last`), or `none`;
    /// `lab sweep slim` later keeps only those a verdict or figure reads.
    pub answers: KeepAnswers,
    /// Keep one in N training lines of `metrics.jsonl` besides every evaluation's line (0:
    /// none; no figure plots them).
    pub metrics_every: u64,
    /// Keep the sampled answers of the epochs whose greedy answers are kept (a third of a MB
    /// a run; the set figures they give are in the metrics).
    pub samples: bool,
}

impl Default for Keep {
    fn default() -> Keep {
        Keep {
            answers: KeepAnswers::All,
            metrics_every: 0,
            samples: false,
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum KeepAnswers {
    All,
    Last,
    None,
}

/// Written last into an exported run: its presence means the export is complete.
pub const META: &str = "run.meta.json";

/// What collect needs of an exported run besides its files.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub sweep: String,
    /// The run's group in the figures: its bucket (`1M`) or the sweep's name.
    pub bucket: String,
    pub plan: PlanRow,
    /// The code that trained the run, from its `run.json` (absent in older exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
}

/// `DIR/runs/<run>/`.
pub fn run_dir(results: &Path, run: &str) -> PathBuf {
    results.join("runs").join(run)
}

/// Whether `run` is already exported to `results`.
pub fn exported(results: &Path, run: &str) -> bool {
    run_dir(results, run).join(META).exists()
}

/// gzip with a fixed header (no name, mtime 0), so the same answers give the same bytes.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut enc = GzEncoder::new(Vec::new(), Compression::best());
    enc.write_all(bytes)?;
    Ok(enc.finish()?)
}

/// Sampled answers (`{"id", "samples": [scored…], "set"}` a query) as the lines `lab score
/// --sets` reads, `{"id", "output"}` an answer in sample order: a sixth of the bytes, and the
/// scoring is re-derived from them.
fn answer_lines(text: &str) -> Result<Vec<u8>> {
    let mut out = String::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).context("sampled answers: a line is not JSON")?;
        let samples = v["samples"]
            .as_array()
            .map_or(std::slice::from_ref(&v), |s| s);
        for a in samples {
            let one = serde_json::json!({"id": v["id"], "output": a["output"]});
            out.push_str(&one.to_string());
            out.push('\n');
        }
    }
    Ok(out.into_bytes())
}

/// Every evaluation's line of `metrics.jsonl`, and the first of every `every` training lines
/// (none for 0).
fn thin_metrics(bytes: Vec<u8>, every: u64) -> Result<Vec<u8>> {
    if every == 1 {
        return Ok(bytes);
    }
    let text = String::from_utf8(bytes).context("metrics.jsonl: not UTF-8")?;
    let mut out = String::new();
    let mut train_lines = 0u64;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).context("metrics.jsonl: a line is not JSON")?;
        let eval = v.get(tags::VAL_LOSS).is_some();
        if eval || every > 0 && train_lines.is_multiple_of(every) {
            out.push_str(line);
            out.push('\n');
        }
        if !eval {
            train_lines += 1;
        }
    }
    Ok(out.into_bytes())
}

/// An evaluation's answers in a run directory (`eval/<stem>.jsonl`) or an exported run
/// (`eval/<stem>.jsonl.gz`); None where it kept none.
fn read_answers(dir: &Path, stem: &str) -> Result<Option<String>> {
    let plain = dir.join(EVAL).join(format!("{stem}.jsonl"));
    let gz = plain.with_extension("jsonl.gz");
    [plain, gz]
        .into_iter()
        .find(|p| p.exists())
        .map(|p| read_text(&p))
        .transpose()
}

/// Write a run's committed files from `src` (a run directory, or an exported run) into `dst`:
/// `config.toml`, `trainer_state.json`, `metrics.jsonl` thinned as `keep` says,
/// `eval/figures.jsonl`, the last evaluation's tuning-split summary without its per-hop × level
/// table (selection can read it),
/// and the answers (`{"id", "output"}` lines, gzipped) of the epochs in `answers` and the last
/// epoch, or of those `keep.answers` names where `answers` is None.
pub fn write_layout(
    src: &Path,
    dst: &Path,
    keep: &Keep,
    answers: Option<&BTreeSet<u64>>,
) -> Result<()> {
    let put = |to: &str, bytes: &[u8]| write_atomic(&dst.join(to), bytes);
    let read = |from: &Path| {
        std::fs::read(from).with_context(|| format!("{}: cannot read", from.display()))
    };
    put(CONFIG, &read(&src.join(CONFIG))?)?;
    // The final trainer state (steps, tokens, FLOPs, training seconds): what the run cost.
    for state in [DONE, "trainer_state.json"] {
        if src.join(state).exists() {
            put("trainer_state.json", &read(&src.join(state))?)?;
            break;
        }
    }
    let epochs: Vec<u64> = metrics::read_lines(src)?
        .iter()
        .filter(|l| l.contains_key(tags::VAL_LOSS))
        .filter_map(|l| l.get("epoch")?.as_u64())
        .collect();
    let last = epochs.iter().max().copied();
    put(
        "metrics.jsonl",
        &thin_metrics(read(&src.join(metrics::METRICS))?, keep.metrics_every)?,
    )?;
    std::fs::create_dir_all(dst.join(EVAL))?;
    let figures = collect::derived_by_epoch(src)?;
    put(
        &format!("{EVAL}/{FIGURES}"),
        collect::figures_jsonl(&figures).as_bytes(),
    )?;
    if let Some(l) = last {
        let tune = format!("{}.tune.summary.json", rundir::epoch_name(l));
        let from = src.join(EVAL).join(&tune);
        if from.exists() {
            // Without its per-hop × level table: selection reads the headline figures.
            let mut v: serde_json::Value = serde_json::from_slice(&read(&from)?)
                .with_context(|| format!("{}: not a summary", from.display()))?;
            if let Some(m) = v.as_object_mut() {
                m.remove("by_hop_level");
            }
            put(
                &format!("{EVAL}/{tune}"),
                (serde_json::to_string_pretty(&v)? + "\n").as_bytes(),
            )?;
        }
    }
    let kept = |e: u64| match (answers, keep.answers) {
        (Some(set), _) => set.contains(&e) || Some(e) == last,
        (None, KeepAnswers::All) => true,
        (None, KeepAnswers::Last) => Some(e) == last,
        (None, KeepAnswers::None) => false,
    };
    for &e in epochs.iter().filter(|&&e| kept(e)) {
        let stem = rundir::epoch_name(e);
        let mut stems = vec![stem.clone()];
        if keep.samples {
            stems.push(format!("{stem}.samples"));
        }
        if Some(e) == last {
            stems.extend(budget_stems(src, &stem)?);
        }
        for st in stems {
            if let Some(text) = read_answers(src, &st)? {
                put(
                    &format!("{EVAL}/{st}.jsonl.gz"),
                    &gzip(&answer_lines(&text)?)?,
                )?;
            }
        }
    }
    Ok(())
}

/// The stems of the answers decoded under `eval.final_budgets` at epoch `stem`
/// (`<stem>.budget<B>`), sorted.
fn budget_stems(dir: &Path, stem: &str) -> Result<Vec<String>> {
    let eval = dir.join(EVAL);
    let mut out = Vec::new();
    let prefix = format!("{stem}.budget");
    for entry in
        std::fs::read_dir(&eval).with_context(|| format!("{}: cannot read", eval.display()))?
    {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let base = name
            .strip_suffix(".jsonl.gz")
            .or_else(|| name.strip_suffix(".jsonl"));
        if let Some(b) = base.filter(|b| b.starts_with(&prefix)) {
            out.push(b.to_string());
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Copy a finished run from `meta.plan.dir` into `results` in the committed layout, replacing
/// an older export of it.
pub fn export(results: &Path, keep: &Keep, meta: &Meta) -> Result<PathBuf> {
    let src = &meta.plan.dir;
    let stage = StagingDir::new(&run_dir(results, &meta.plan.run))?;
    write_layout(src, stage.path(), keep, None)?;
    let mut m = meta.clone();
    m.code = crate::rundir::read_run_info(src).ok().and_then(|i| i.code);
    m.plan.dir = PathBuf::from(".");
    m.plan.config = PathBuf::from(CONFIG);
    write_atomic(
        &stage.path().join(META),
        (serde_json::to_string_pretty(&m)? + "\n").as_bytes(),
    )?;
    stage.commit()
}

/// The exported runs of a results directory, sorted by name, with their directories.
pub fn runs(results: &Path) -> Result<Vec<(Meta, PathBuf)>> {
    let dir = results.join("runs");
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(&dir).with_context(|| format!("{}: cannot read", dir.display()))?;
    for e in entries {
        let d = e?.path();
        let path = d.join(META);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let mut m: Meta = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not run metadata: {e}", path.display()))?;
        m.plan.dir = d.clone();
        m.plan.config = d.join(CONFIG);
        out.push((m, d));
    }
    out.sort_by(|a, b| a.0.plan.run.cmp(&b.0.plan.run));
    Ok(out)
}
