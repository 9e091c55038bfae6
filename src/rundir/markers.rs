//! The state markers of a run directory: `RUNNING` while a trainer works in it (who and
//! where), `FAILED` after an error (the error line). With `DONE` and the checkpoints, they make
//! the directory the truth about a run, for `lab sweep status` and `collect`.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
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

/// Whether process `pid` is alive on this host (a zombie counts as dead).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(false)
}

/// Whether `pid` is alive here and is a trainer (`train` among its arguments), so that a pid
/// reused by another program does not hold a run forever.
fn trainer_alive(pid: u32) -> bool {
    alive(pid)
        && std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| c.split(|&b| b == 0).any(|a| a == b"train"))
            .unwrap_or(false)
}

impl Running {
    fn me() -> Running {
        Running {
            pid: std::process::id(),
            host: hostname(),
            slurm_job: slurm_job(),
        }
    }

    fn describe(&self) -> String {
        match &self.slurm_job {
            Some(j) => format!("pid {} on {} (Slurm job {j})", self.pid, self.host),
            None => format!("pid {} on {}", self.pid, self.host),
        }
    }
}

/// Refuse a run directory that another trainer holds. A marker left by a trainer that is gone
/// does not hold it: on this host a dead pid is stale; the same Slurm job (a requeue) takes
/// over; from another host the holder cannot be checked, so only `takeover` overrides it.
/// Returns whether a stale marker was found.
pub fn check_free(run_dir: &Path, takeover: bool) -> Result<bool> {
    let path = run_dir.join(RUNNING);
    if !path.exists() {
        return Ok(false);
    }
    let Some(h) = read_running(run_dir) else {
        // Unreadable: a trainer between creating and writing it, or a torn write; the
        // creator writes within microseconds, so give it a moment.
        std::thread::sleep(std::time::Duration::from_millis(200));
        return match read_running(run_dir) {
            Some(_) => check_free(run_dir, takeover),
            None => Ok(true),
        };
    };
    let me = Running::me();
    if h.pid == me.pid && h.host == me.host {
        return Ok(true);
    }
    if h.host == me.host {
        if trainer_alive(h.pid) {
            bail!(
                "{}: a trainer is running in this run directory ({}); wait for it, or stop it \
                 (it checkpoints on SIGTERM) and --resume",
                run_dir.display(),
                h.describe()
            );
        }
        return Ok(true);
    }
    if takeover || (h.slurm_job.is_some() && h.slurm_job == me.slurm_job) {
        return Ok(true);
    }
    bail!(
        "{}: held by a trainer on another host ({}); if it is gone (its node died), take the \
         run over with --takeover",
        run_dir.display(),
        h.describe()
    )
}

/// Take the run directory for this trainer: `RUNNING` is created exclusively, so of two
/// trainers starting together one wins and the other is refused, naming the winner.
pub fn acquire(run_dir: &Path, takeover: bool) -> Result<()> {
    let path = run_dir.join(RUNNING);
    for _ in 0..3 {
        if check_free(run_dir, takeover)? {
            eprintln!(
                "{}: taking over from a trainer that is gone",
                run_dir.display()
            );
            let _ = std::fs::remove_file(&path);
        }
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut f) => {
                let _ = std::fs::remove_file(run_dir.join(FAILED));
                f.write_all((serde_json::to_string(&Running::me())? + "\n").as_bytes())
                    .and_then(|_| f.sync_all())
                    .with_context(|| format!("{}: cannot write", path.display()))?;
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("{}: cannot create", path.display()));
            }
        }
    }
    bail!(
        "{}: another trainer keeps taking this run directory",
        run_dir.display()
    )
}

/// Release the run directory, if this process holds it.
pub fn clear(run_dir: &Path) {
    if read_running(run_dir).is_none_or(|h| h.pid == std::process::id() && h.host == hostname()) {
        let _ = std::fs::remove_file(run_dir.join(RUNNING));
    }
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
