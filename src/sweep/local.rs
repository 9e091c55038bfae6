//! The local backend: every run that is not `DONE`, as `lab train` child processes, `--jobs`
//! at a time, each with its share of the cores; partial runs resume from their checkpoints.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::fsutil::write_atomic;
use crate::rundir::markers::{FAILED, Failed};
use crate::rundir::{DONE, Exit, checkpoint};
use crate::sweep::{PlanRow, last_line};

/// How the runs of one call ended.
#[derive(Debug, Default)]
pub struct Tally {
    pub done: Vec<String>,
    pub failed: Vec<String>,
    pub interrupted: Vec<String>,
}

/// The binary every run starts: this process's own. On Linux `/proc/self/exe` opens the file
/// this process started from even after its path is replaced (a rebuild moving a new binary
/// into place), so every run of a sweep trains on the binary the sweep started with.
fn own_binary() -> Result<PathBuf> {
    let proc = Path::new("/proc/self/exe");
    if proc.exists() {
        return Ok(proc.to_path_buf());
    }
    std::env::current_exe().context("finding the lab binary")
}

fn spawn(row: &PlanRow, threads: usize, device: &str) -> Result<Child> {
    std::fs::create_dir_all(&row.dir)
        .with_context(|| format!("{}: cannot create directory", row.dir.display()))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(row.dir.join("train.log"))
        .with_context(|| format!("{}: cannot open train.log", row.dir.display()))?;
    let mut c = Command::new(own_binary()?);
    c.arg("train")
        .arg("--config")
        .arg(&row.config)
        .arg("--out")
        .arg(&row.dir)
        .args(["--device", device]);
    if checkpoint::exists(&row.dir) {
        c.arg("--resume");
    }
    c.env("RAYON_NUM_THREADS", threads.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    c.spawn()
        .with_context(|| format!("starting the run {}", row.run))
}

/// Run every run of `plan` that is not done, `jobs` at a time; `on_done` sees each run that
/// finishes (to export it).
pub fn run(
    plan: &[&PlanRow],
    jobs: usize,
    threads: Option<usize>,
    device: &str,
    on_done: &dyn Fn(&PlanRow) -> Result<()>,
) -> Result<Tally> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = threads.unwrap_or(cores / jobs.max(1)).max(1);
    let mut queue: Vec<&PlanRow> = Vec::new();
    for r in plan.iter().rev() {
        if r.dir.join(DONE).exists() {
            on_done(r)?;
        } else {
            queue.push(r);
        }
    }
    let mut live: Vec<(&PlanRow, Child)> = Vec::new();
    let mut tally = Tally::default();
    loop {
        while live.len() < jobs.max(1)
            && let Some(row) = queue.pop()
        {
            eprintln!("start {}", row.run);
            live.push((row, spawn(row, threads, device)?));
        }
        if live.is_empty() {
            break;
        }
        let mut i = 0;
        while i < live.len() {
            match live[i].1.try_wait()? {
                None => i += 1,
                Some(status) => {
                    let (row, _) = live.swap_remove(i);
                    match status.code() {
                        Some(0) => {
                            on_done(row)?;
                            eprintln!("done  {}", row.run);
                            tally.done.push(row.run.clone());
                        }
                        Some(c) if c == Exit::Interrupted.code() => {
                            tally.interrupted.push(row.run.clone())
                        }
                        code => {
                            if !row.dir.join(FAILED).exists() {
                                let f = Failed {
                                    error: last_line(&row.dir.join("train.log"))
                                        .unwrap_or_default(),
                                    exit: code,
                                };
                                write_atomic(
                                    &row.dir.join(FAILED),
                                    (serde_json::to_string(&f)? + "\n").as_bytes(),
                                )?;
                            }
                            eprintln!(
                                "FAILED {} (see {})",
                                row.run,
                                row.dir.join("train.log").display()
                            );
                            tally.failed.push(row.run.clone());
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(tally)
}
