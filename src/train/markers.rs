//! The state markers of a run directory: `RUNNING` while a trainer works in it (who and
//! where), `FAILED` after an error (the error line). With `DONE` and the checkpoints, they make
//! the directory the truth about a run, for `lab sweep status` and `collect`.

use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::fsutil::write_atomic;

pub const RUNNING: &str = "RUNNING";
pub const FAILED: &str = "FAILED";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Running {
    pub pid: u32,
    pub host: String,
    /// `SLURM_ARRAY_JOB_ID_SLURM_ARRAY_TASK_ID` or `SLURM_JOB_ID` under Slurm.
    pub slurm_job: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Failed {
    pub error: String,
    /// The process exit code, when a launcher saw the process die without an error line.
    pub exit: Option<i32>,
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown".into()
    }
}

/// The Slurm job of this process, if any.
pub fn slurm_job() -> Option<String> {
    match (
        std::env::var("SLURM_ARRAY_JOB_ID"),
        std::env::var("SLURM_ARRAY_TASK_ID"),
    ) {
        (Ok(j), Ok(t)) => Some(format!("{j}_{t}")),
        _ => std::env::var("SLURM_JOB_ID").ok(),
    }
}

pub fn running(run_dir: &Path) -> Result<()> {
    let _ = std::fs::remove_file(run_dir.join(FAILED));
    let m = Running {
        pid: std::process::id(),
        host: hostname(),
        slurm_job: slurm_job(),
    };
    write_atomic(
        &run_dir.join(RUNNING),
        (serde_json::to_string(&m)? + "\n").as_bytes(),
    )
}

pub fn clear(run_dir: &Path) {
    let _ = std::fs::remove_file(run_dir.join(RUNNING));
}

pub fn failed(run_dir: &Path, error: &str) {
    let m = Failed {
        error: error.to_string(),
        exit: None,
    };
    let _ = write_atomic(
        &run_dir.join(FAILED),
        (serde_json::to_string(&m).unwrap_or_default() + "\n").as_bytes(),
    );
    clear(run_dir);
}

pub fn read_running(run_dir: &Path) -> Option<Running> {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join(RUNNING)).ok()?).ok()
}

pub fn read_failed(run_dir: &Path) -> Option<Failed> {
    let text = std::fs::read_to_string(run_dir.join(FAILED)).ok()?;
    Some(serde_json::from_str(&text).unwrap_or(Failed {
        error: text.trim().to_string(),
        exit: None,
    }))
}
