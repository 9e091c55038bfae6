//! A sweep's committed results (`results = DIR` in its spec): each finished run's small files
//! (config, metrics, eval summaries, gzipped answers) copied to `DIR/runs/<run>/`, so that a
//! study lives in git, is collected from there, and is never trained twice.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flate2::Compression;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::fsutil::{StagingDir, write_atomic};
use crate::rundir::{CONFIG, DONE};
use crate::sweep::PlanRow;
use crate::sweep::spec::{Keep, KeepAnswers};
use crate::tags;

/// Written last into an exported run: its presence means the export is complete.
pub const META: &str = "run.meta.json";

/// What collect needs of an exported run besides its files.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub sweep: String,
    /// The run's group in the figures: its bucket (`1M`) or the sweep's name.
    pub bucket: String,
    pub plan: PlanRow,
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
fn answer_lines(bytes: Vec<u8>) -> Result<Vec<u8>> {
    let text = String::from_utf8(bytes).context("sampled answers: not UTF-8")?;
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

/// Every evaluation's line of `metrics.jsonl`, and the first of every `every` training lines.
fn thin_metrics(bytes: Vec<u8>, every: u64) -> Result<Vec<u8>> {
    if every <= 1 {
        return Ok(bytes);
    }
    let text = String::from_utf8(bytes).context("metrics.jsonl: not UTF-8")?;
    let mut out = String::new();
    let mut train_lines = 0u64;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).context("metrics.jsonl: a line is not JSON")?;
        let eval = v.get(tags::VAL_LOSS).is_some();
        if eval || train_lines.is_multiple_of(every) {
            out.push_str(line);
            out.push('\n');
        }
        if !eval {
            train_lines += 1;
        }
    }
    Ok(out.into_bytes())
}

/// Copy a finished run's small files from `meta.plan.dir` into `results`, replacing an older
/// export of it: `config.toml`, `metrics.jsonl` (thinned as `keep` says), every
/// `eval/epoch-NN[.tune].summary.json`, the scored answers `eval/epoch-NN.jsonl.gz` that `keep`
/// keeps, and the final `trainer_state.json`.
pub fn export(results: &Path, keep: &Keep, meta: &Meta) -> Result<PathBuf> {
    let src = &meta.plan.dir;
    let stage = StagingDir::new(&run_dir(results, &meta.plan.run))?;
    // One file of the run, transformed, to its place in the export.
    let put = |from: &str, to: &str, f: &dyn Fn(Vec<u8>) -> Result<Vec<u8>>| -> Result<()> {
        let from = src.join(from);
        let bytes =
            std::fs::read(&from).with_context(|| format!("{}: cannot read", from.display()))?;
        write_atomic(&stage.path().join(to), &f(bytes)?)
    };
    let same = |b: Vec<u8>| Ok(b);
    put(CONFIG, CONFIG, &same)?;
    put("metrics.jsonl", "metrics.jsonl", &|b| {
        thin_metrics(b, keep.metrics_every)
    })?;
    // The final trainer state (steps, tokens, FLOPs, training seconds): what the run cost.
    if src.join(DONE).exists() {
        put(DONE, "trainer_state.json", &same)?;
    }
    let eval = src.join("eval");
    std::fs::create_dir_all(stage.path().join("eval"))?;
    let mut names: Vec<String> = std::fs::read_dir(&eval)
        .with_context(|| format!("{}: cannot read", eval.display()))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| {
            let answers = n.starts_with("epoch-") && n.ends_with(".jsonl");
            // The tuning split's answers stay behind: only selection reads it, from the summary.
            answers && !n.contains(".tune.") || n.ends_with(".summary.json")
        })
        .collect();
    names.sort();
    // `epoch-NN` of a file name: the last evaluated epoch keeps its greedy and sampled answers.
    let epoch_of = |n: &str| n.split('.').next().unwrap_or_default().to_string();
    let last_epoch = names
        .iter()
        .filter(|n| n.ends_with(".jsonl"))
        .map(|n| epoch_of(n))
        .max();
    for n in names {
        let from = format!("eval/{n}");
        let keep_answers = match keep.answers {
            KeepAnswers::All => true,
            KeepAnswers::Last => last_epoch == Some(epoch_of(&n)),
            KeepAnswers::None => false,
        };
        if n.ends_with(".summary.json") {
            put(&from, &from, &same)?;
        } else if n.ends_with(".samples.jsonl") && keep_answers {
            put(&from, &format!("{from}.gz"), &|b| gzip(&answer_lines(b)?))?;
        } else if keep_answers {
            put(&from, &format!("{from}.gz"), &|b| gzip(&b))?;
        }
    }
    let mut m = meta.clone();
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
