//! Checkpoints that survive `kill -9`: each is a complete directory under `ckpt/`, staged and
//! renamed, and `latest` is a symlink swapped atomically. The run directory's
//! `model.safetensors`, `optimizer.safetensors` and `trainer_state.json` link through it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::fsutil::write_atomic;

pub const MODEL: &str = "model.safetensors";
pub const OPTIMIZER: &str = "optimizer.safetensors";
pub const STATE: &str = "trainer_state.json";
const CKPT: &str = "ckpt";
const LATEST: &str = "latest";

/// Where training stands: enough to continue exactly (model and optimizer aside).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    pub lab_version: String,
    /// The code that wrote this checkpoint (absent in checkpoints from before it was recorded).
    #[serde(default)]
    pub code: Option<crate::code::Code>,
    /// `Config::run_hash` of the run; a different config cannot resume it.
    pub run_hash: String,
    /// Optimizer steps taken.
    pub step: u64,
    /// Epochs completed.
    pub epoch: u64,
    /// The data cursor: batches of the current epoch already trained on.
    pub batch: u64,
    /// Cumulative training FLOPs (SPEC §5), the LM head left out.
    pub flops: f64,
    /// Cumulative FLOPs of the LM head alone: 6·V·E per loss token (SPEC §5 revision).
    #[serde(default)]
    pub flops_head: f64,
    /// Non-padding tokens trained on.
    pub tokens: u64,
    /// Wall seconds spent training so far.
    pub seconds: f64,
    /// Training losses summed since the last `train/loss` log line, and their count.
    #[serde(default)]
    pub window_loss: f64,
    #[serde(default)]
    pub window_steps: u64,
    /// The random state: every stream is derived from the seed, the purpose and the epoch
    /// (init, batch order), so the seed and the cursor above restore it exactly.
    pub rng: String,
}

/// A checkpoint directory's name: `epoch-NN` at an epoch end, else `step-NNNNNNNN`.
pub fn tag(state: &TrainerState) -> String {
    if state.batch == 0 {
        super::epoch_name(state.epoch)
    } else {
        format!("step-{:08}", state.step)
    }
}

/// The model of the checkpoint at the end of epoch `epoch`.
pub fn epoch_model(run_dir: &Path, epoch: u64) -> PathBuf {
    run_dir
        .join(CKPT)
        .join(super::epoch_name(epoch))
        .join(MODEL)
}

/// Writes one checkpoint file at the path it is given.
pub type Writer<'a> = &'a dyn Fn(&Path) -> Result<()>;

/// Write a complete checkpoint and make it the latest. `files` are (name, writer) pairs; the
/// trainer state is written last.
pub fn save(run_dir: &Path, state: &TrainerState, files: &[(&str, Writer)]) -> Result<()> {
    let ckpt = run_dir.join(CKPT);
    std::fs::create_dir_all(&ckpt).with_context(|| format!("{}: cannot create", ckpt.display()))?;
    let name = tag(state);
    let stage = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .tempdir_in(&ckpt)
        .with_context(|| format!("{}: cannot write", ckpt.display()))?;
    for (file, write) in files {
        write(&stage.path().join(file))?;
    }
    write_atomic(
        &stage.path().join(STATE),
        (serde_json::to_string_pretty(state)? + "\n").as_bytes(),
    )?;
    let dest = ckpt.join(&name);
    if dest.exists() {
        std::fs::remove_dir_all(&dest)
            .with_context(|| format!("{}: cannot replace", dest.display()))?;
    }
    std::fs::rename(stage.keep(), &dest)
        .with_context(|| format!("{}: cannot write", dest.display()))?;
    swap_symlink(&run_dir.join(LATEST), &Path::new(CKPT).join(&name))?;
    for f in [MODEL, OPTIMIZER, STATE] {
        let link = run_dir.join(f);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(LATEST).join(f), &link)
                .with_context(|| format!("{}: cannot link", link.display()))?;
        }
    }
    prune(&ckpt, &name)
}

/// Point `link` at `target` atomically: a new link under a temporary name, renamed over it.
fn swap_symlink(link: &Path, target: &Path) -> Result<()> {
    let tmp = link.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("{}: cannot link", tmp.display()))?;
    std::fs::rename(&tmp, link).with_context(|| format!("{}: cannot link", link.display()))
}

/// Drop superseded checkpoints: mid-epoch ones entirely, and the optimizer state of older
/// epoch ends (their models stay for `lab eval --epoch N`). Stale staging directories go too.
fn prune(ckpt: &Path, keep: &str) -> Result<()> {
    for e in std::fs::read_dir(ckpt)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name == keep {
            continue;
        }
        if name.starts_with("step-") || name.starts_with('.') {
            std::fs::remove_dir_all(e.path()).ok();
        } else if name.starts_with("epoch-") {
            std::fs::remove_file(e.path().join(OPTIMIZER)).ok();
        }
    }
    Ok(())
}

/// The latest checkpoint's directory and state, or a clear error when there is none.
pub fn latest(run_dir: &Path) -> Result<(PathBuf, TrainerState)> {
    let dir = run_dir.join(LATEST);
    let path = dir.join(STATE);
    if !path.exists() {
        bail!(
            "{}: no checkpoint to resume (no {LATEST}/{STATE})",
            run_dir.display()
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let state: TrainerState = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a trainer state", run_dir.join(STATE).display()))?;
    Ok((dir, state))
}

/// Whether the run directory holds any checkpoint.
pub fn exists(run_dir: &Path) -> bool {
    run_dir.join(LATEST).exists()
}
