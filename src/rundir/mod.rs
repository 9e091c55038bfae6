//! The run directory, the contract between train, eval, sweep and the CLI: its file names and
//! markers, `run.json`, the epoch files of evaluation, checkpoints, and the exit statuses.

pub mod checkpoint;
pub mod markers;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::code::Code;
use crate::model::GptConfig;

/// Written when every epoch is trained and evaluated: the trainer state at the end.
pub const DONE: &str = "DONE";
/// How to find the run's data, and its sizes (`RunInfo`).
pub const RUN: &str = "run.json";
/// The resolved config the run was started with; its hash names the run.
pub const CONFIG: &str = "config.toml";
/// Where evaluations write their answers and summaries.
pub const EVAL: &str = "eval";

/// How `lab` exits: 0 done; 1 some runs of a local sweep failed (each has its `FAILED`);
/// 2 bad input or another error (one line on stderr); 75 (EX_TEMPFAIL) a trainer stopped by
/// SIGUSR1/SIGTERM after its checkpoint, to be resumed (the Slurm script requeues on it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    RunsFailed = 1,
    BadInput = 2,
    Interrupted = 75,
}

impl Exit {
    pub fn code(self) -> i32 {
        self as i32
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e as u8)
    }
}

/// `run.json`: how to find the run's data, and its sizes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_hash: String,
    pub data_dir: PathBuf,
    pub model: GptConfig,
    pub total_params: u64,
    pub non_embedding_params: u64,
    pub steps_per_epoch: u64,
    pub total_steps: u64,
    /// The code that started the run (absent in runs from before it was recorded).
    #[serde(default)]
    pub code: Option<Code>,
    /// Each other code that resumed it, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_by: Vec<Code>,
}

pub fn read_run_info(run_dir: &Path) -> Result<RunInfo> {
    let p = run_dir.join(RUN);
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("{}: cannot read (not a run directory?)", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a run description", p.display()))
}

/// `epoch-NN`: the name of the checkpoint at the end of an epoch, and the stem of that epoch's
/// evaluation files under `eval/`.
pub fn epoch_name(epoch: u64) -> String {
    format!("epoch-{epoch:02}")
}

/// `eval/epoch-NN`: the stem of an epoch's greedy answers (`.jsonl`) and summary.
pub fn eval_stem(run_dir: &Path, epoch: u64) -> PathBuf {
    run_dir.join(EVAL).join(epoch_name(epoch))
}

/// `eval/epoch-NN.summary.json`.
pub fn summary_path(run_dir: &Path, epoch: u64) -> PathBuf {
    run_dir
        .join(EVAL)
        .join(format!("{}.summary.json", epoch_name(epoch)))
}
