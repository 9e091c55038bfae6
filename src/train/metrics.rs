//! Metric sinks: `metrics.jsonl` (the source of truth, one object per line with `step`,
//! `epoch`, `flops` and named figures) and TensorBoard event files under `tb/`, same tags.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value};
use tensorboard_rs::summary_writer::SummaryWriter;

use crate::fsutil::write_atomic;

pub const METRICS: &str = "metrics.jsonl";
pub const TB: &str = "tb";

pub struct Metrics {
    path: PathBuf,
    file: File,
    tb: SummaryWriter,
}

/// Read `metrics.jsonl` as JSON objects (an absent file is empty).
pub fn read_lines(run_dir: &Path) -> Result<Vec<Map<String, Value>>> {
    let path = run_dir.join(METRICS);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("{}: cannot read", path.display())),
    };
    // A crash can cut the last line short; it is dropped.
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Map<String, Value>>(l).ok())
        .collect())
}

impl Metrics {
    /// Open the sinks of a run directory. When resuming at `keep_until`, lines logged after
    /// that step (work lost with the crash) are dropped, and TensorBoard's files are rewritten
    /// from what remains, so that both sinks hold each step once.
    pub fn open(run_dir: &Path, keep_until: Option<u64>) -> Result<Metrics> {
        let path = run_dir.join(METRICS);
        let tb_dir = run_dir.join(TB);
        let kept: Vec<Map<String, Value>> = match keep_until {
            None => Vec::new(),
            Some(step) => read_lines(run_dir)?
                .into_iter()
                .filter(|l| {
                    l.get("step")
                        .and_then(Value::as_u64)
                        .is_some_and(|s| s <= step)
                })
                .collect(),
        };
        let mut text = String::new();
        for l in &kept {
            text.push_str(&serde_json::to_string(l)?);
            text.push('\n');
        }
        write_atomic(&path, text.as_bytes())?;
        if tb_dir.exists() {
            std::fs::remove_dir_all(&tb_dir)
                .with_context(|| format!("{}: cannot clear", tb_dir.display()))?;
        }
        std::fs::create_dir_all(&tb_dir)
            .with_context(|| format!("{}: cannot create", tb_dir.display()))?;
        let mut tb = SummaryWriter::new(&tb_dir);
        for l in &kept {
            write_tb(&mut tb, l);
        }
        tb.flush();
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("{}: cannot open", path.display()))?;
        Ok(Metrics { path, file, tb })
    }

    /// Log figures at `step`: one JSON line, and one TensorBoard scalar per figure. `flops` is
    /// the cumulative count without the LM head and the head's own, logged as `flops` and
    /// `flops_with_head` (SPEC §5).
    pub fn log(
        &mut self,
        step: u64,
        epoch: u64,
        flops: [f64; 2],
        figures: &[(String, f64)],
    ) -> Result<()> {
        let mut m = Map::new();
        m.insert("step".into(), step.into());
        m.insert("epoch".into(), epoch.into());
        m.insert("flops".into(), flops[0].into());
        m.insert("flops_with_head".into(), (flops[0] + flops[1]).into());
        for (k, v) in figures {
            m.insert(
                k.clone(),
                if v.is_finite() {
                    (*v).into()
                } else {
                    Value::Null
                },
            );
        }
        let line = serde_json::to_string(&m)? + "\n";
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .with_context(|| format!("{}: cannot write", self.path.display()))?;
        write_tb(&mut self.tb, &m);
        self.tb.flush();
        Ok(())
    }
}

fn write_tb(tb: &mut SummaryWriter, line: &Map<String, Value>) {
    let step = line.get("step").and_then(Value::as_u64).unwrap_or(0) as usize;
    for (k, v) in line {
        if k.contains('/')
            && let Some(x) = v.as_f64()
        {
            tb.add_scalar(k, x as f32, step);
        }
    }
}
