//! The local backend: every run that is not `DONE`, as `lab train` child processes (a run
//! alone, or a pack of runs), `--jobs` at a time, each with its share of the cores; partial
//! runs resume from their checkpoints.

use std::fs::OpenOptions;
use std::io::Write as _;
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

/// Start one unit: a run alone as `lab train`, or a pack of runs as `lab train --pack-with`
/// (SPEC §8 Revision, packs), whose log is `<sweep>/packs/<first run>.log`, named in each of
/// its runs' `train.log`. Returns the child and its log.
fn spawn(unit: &[&PlanRow], threads: usize, device: &str) -> Result<(Child, PathBuf)> {
    for row in unit {
        std::fs::create_dir_all(&row.dir)
            .with_context(|| format!("{}: cannot create directory", row.dir.display()))?;
    }
    let first = unit[0];
    let runs = first.dir.parent().context("a run directory's parent")?;
    let log_path = match unit {
        [_] => first.dir.join("train.log"),
        _ => {
            let packs = runs.parent().context("a sweep directory")?.join("packs");
            std::fs::create_dir_all(&packs)
                .with_context(|| format!("{}: cannot create directory", packs.display()))?;
            packs.join(format!("{}.log", first.run))
        }
    };
    let append = |p: &Path| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .with_context(|| format!("{}: cannot open", p.display()))
    };
    let mut c = Command::new(own_binary()?);
    c.arg("train").arg("--config").arg(&first.config);
    if unit.len() > 1 {
        let names: Vec<&str> = unit.iter().map(|r| r.run.as_str()).collect();
        for row in unit {
            writeln!(
                append(&row.dir.join("train.log"))?,
                "trained in a pack of {} runs ({}); its log: {}",
                unit.len(),
                names.join(" "),
                log_path.display()
            )?;
        }
        for row in &unit[1..] {
            c.arg("--pack-with").arg(&row.config);
        }
        // Each run continues from its checkpoint where it has one.
        c.arg("--out").arg(runs).arg("--resume");
    } else {
        c.arg("--out").arg(&first.dir);
        if checkpoint::exists(&first.dir) {
            c.arg("--resume");
        }
    }
    let log = append(&log_path)?;
    c.args(["--device", device])
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    let child = c
        .spawn()
        .with_context(|| format!("starting the run {}", first.run))?;
    Ok((child, log_path))
}

/// Run every unit of `units` (a run alone, or a pack of runs) that is not done, `jobs` at a
/// time; `on_done` sees each run that finishes (to export it).
pub fn run(
    units: &[Vec<&PlanRow>],
    jobs: usize,
    threads: Option<usize>,
    device: &str,
    on_done: &dyn Fn(&PlanRow) -> Result<()>,
) -> Result<Tally> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let threads = threads.unwrap_or(cores / jobs.max(1)).max(1);
    let mut queue: Vec<Vec<&PlanRow>> = Vec::new();
    for unit in units.iter().rev() {
        let mut todo = Vec::new();
        for &r in unit {
            if r.dir.join(DONE).exists() {
                on_done(r)?;
            } else {
                todo.push(r);
            }
        }
        if !todo.is_empty() {
            queue.push(todo);
        }
    }
    let mut live: Vec<(Vec<&PlanRow>, Child, PathBuf)> = Vec::new();
    let mut tally = Tally::default();
    loop {
        while live.len() < jobs.max(1)
            && let Some(unit) = queue.pop()
        {
            for r in &unit {
                eprintln!("start {}", r.run);
            }
            let (child, log) = spawn(&unit, threads, device)?;
            live.push((unit, child, log));
        }
        if live.is_empty() {
            break;
        }
        let mut i = 0;
        while i < live.len() {
            match live[i].1.try_wait()? {
                None => i += 1,
                Some(status) => {
                    let (unit, _, log) = live.swap_remove(i);
                    for row in unit {
                        ended(row, status.code(), &log, &mut tally, on_done)?;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(tally)
}

/// Count one run of a unit that exited with `code`: done (exported), interrupted, or failed
/// with a `FAILED` marker (the trainer's own, else the last line of the unit's log).
fn ended(
    row: &PlanRow,
    code: Option<i32>,
    log: &Path,
    tally: &mut Tally,
    on_done: &dyn Fn(&PlanRow) -> Result<()>,
) -> Result<()> {
    let failed = row.dir.join(FAILED);
    if row.dir.join(DONE).exists() {
        on_done(row)?;
        eprintln!("done  {}", row.run);
        tally.done.push(row.run.clone());
    } else if code == Some(Exit::Interrupted.code()) && !failed.exists() {
        tally.interrupted.push(row.run.clone());
    } else {
        if !failed.exists() {
            let f = Failed {
                error: last_line(log).unwrap_or_default(),
                exit: code,
            };
            write_atomic(&failed, (serde_json::to_string(&f)? + "\n").as_bytes())?;
        }
        eprintln!("FAILED {} (see {})", row.run, log.display());
        tally.failed.push(row.run.clone());
    }
    Ok(())
}
