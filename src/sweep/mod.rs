//! Sweeps (SPEC §8): a spec resolved into runs under `checkpoints/<sweep>/`, run locally or as a
//! Slurm job array, each run's state read from its own directory, and `results.csv` collected.
//! Specs come from `spec`; backends from `local` and `slurm`; the table from `collect`.

pub mod collect;
pub mod export;
pub mod local;
pub mod planned;
pub mod refill;
pub mod rescore;
pub mod select;
pub mod slim;
pub mod slurm;
pub mod spec;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::dataset::{self, DataDir};
use crate::fsutil::write_atomic;
use crate::model::GptConfig;
use crate::rundir::checkpoint::{self, TrainerState};
use crate::rundir::{DONE, markers};
use spec::Spec;

/// The selections of a sweep with `[[select]]`, in its sweep directory and (prefixed with the
/// sweep's name) beside its exported runs.
pub const SELECTION: &str = "selection.json";

/// One row of the plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PlanRow {
    pub run: String,
    pub config: PathBuf,
    pub dir: PathBuf,
    pub n_layer: u32,
    pub n_embd: u32,
    pub n_head: u32,
    pub total_params: u64,
    pub non_embedding_params: u64,
    /// Training FLOPs of the whole run, estimated from the data's token counts (SPEC §5).
    pub est_flops: f64,
    /// The same with the LM head counted: 6·V·E per loss token, added exactly.
    #[serde(default)]
    pub est_flops_with_head: f64,
    pub axes: BTreeMap<String, String>,
}

/// A sweep and where it lives.
pub struct Sweep {
    pub spec: Spec,
    pub dir: PathBuf,
}

impl Sweep {
    pub fn load(spec: &Path, overrides: &[crate::config::Override]) -> Result<Sweep> {
        let spec = Spec::load(spec, overrides)?;
        let dir = spec.dir();
        Ok(Sweep { spec, dir })
    }

    pub fn run_dir(&self, run: &str) -> PathBuf {
        self.dir.join("runs").join(run)
    }

    /// The runs of `plan` still to train (not exported to the spec's results directory),
    /// seed-major: every setting's first seed before any second seed, so that a sweep cut short
    /// still covers its grid.
    pub fn pending<'a>(&self, plan: &'a [PlanRow]) -> Vec<&'a PlanRow> {
        let mut todo: Vec<(u64, &PlanRow)> = plan
            .iter()
            .zip(&self.spec.runs)
            .filter(|(r, _)| {
                self.spec
                    .results
                    .as_ref()
                    .is_none_or(|res| !export::exported(res, &r.run))
            })
            .map(|(r, p)| (p.config.train.seed, r))
            .collect();
        todo.sort_by_key(|t| t.0);
        todo.into_iter().map(|t| t.1).collect()
    }

    /// The runs of `todo` as units of training (SPEC §8 Revision, packs): with `pack` N > 1,
    /// runs that may share a pack (`train::pack::key`) in packs of at most N, in the order of
    /// their first run, a run that cannot pack alone; otherwise each run alone.
    pub fn units<'a>(&self, todo: &[&'a PlanRow], pack: usize) -> Result<Vec<Vec<&'a PlanRow>>> {
        if pack <= 1 {
            return Ok(todo.iter().map(|&r| vec![r]).collect());
        }
        let mut groups: Vec<(String, Vec<&PlanRow>)> = Vec::new();
        for &r in todo {
            let cfg = &self
                .spec
                .runs
                .iter()
                .find(|p| p.name == r.run)
                .with_context(|| format!("{}: not a run of the spec", r.run))?
                .config;
            let key = match crate::train::pack::alone_reason(cfg) {
                Some(_) => format!("alone {}", r.run),
                None => crate::train::pack::key(cfg)?,
            };
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push(r),
                None => groups.push((key, vec![r])),
            }
        }
        Ok(groups
            .iter()
            .flat_map(|(_, rows)| rows.chunks(pack).map(<[&PlanRow]>::to_vec))
            .collect())
    }

    /// The spec's selections as JSON (`[[select]]`): what was chosen, from what, and why.
    fn selection_json(&self) -> Result<Vec<u8>> {
        Ok((serde_json::to_string_pretty(&self.spec.choices)? + "\n").into_bytes())
    }

    /// Export one finished run to the spec's results directory, with the spec and its base
    /// config beside the runs; does nothing without `results`.
    pub fn export(&self, row: &PlanRow) -> Result<()> {
        let Some(res) = &self.spec.results else {
            return Ok(());
        };
        let target = self
            .spec
            .runs
            .iter()
            .find(|p| p.name == row.run)
            .and_then(|p| p.target);
        if !self.spec.choices.is_empty() {
            std::fs::create_dir_all(res)
                .with_context(|| format!("{}: cannot create directory", res.display()))?;
            let name = format!("{}.{SELECTION}", self.spec.name);
            write_atomic(&res.join(name), &self.selection_json()?)?;
        }
        for f in [&self.spec.path, &self.spec.base] {
            let bytes = crate::shipped::read_base(f)
                .with_context(|| format!("{}: cannot read", f.display()))?
                .into_bytes();
            let name = f.file_name().context("a file name")?;
            std::fs::create_dir_all(res)
                .with_context(|| format!("{}: cannot create directory", res.display()))?;
            write_atomic(&res.join(name), &bytes)?;
        }
        export::export(
            res,
            &self.spec.keep,
            &export::Meta {
                sweep: self.spec.name.clone(),
                bucket: collect::bucket_label(&self.spec.name, target),
                plan: row.clone(),
                code: None,
            },
        )?;
        Ok(())
    }

    /// Export every `DONE` run not exported yet; returns how many.
    pub fn export_done(&self, plan: &[PlanRow]) -> Result<usize> {
        let mut n = 0;
        for r in self.pending(plan) {
            if r.dir.join(DONE).exists() {
                self.export(r)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// `lab sweep status`: one line per run (its state and what is known of it), then the
    /// counts. A run exported to the spec's results is done, even on a fresh clone that has
    /// no run directory.
    pub fn status(&self) -> String {
        let squeue = squeue_jobs();
        let mut counts = BTreeMap::new();
        let mut out = String::new();
        for p in &self.spec.runs {
            let dir = self.run_dir(&p.name);
            let exported = self
                .spec
                .results
                .as_ref()
                .filter(|r| export::exported(r, &p.name));
            let st = match (state(&dir, &squeue), exported) {
                (State::Pending { .. } | State::Failed { .. }, Some(_)) => State::Done,
                (st, _) => st,
            };
            *counts.entry(st.label()).or_insert(0) += 1;
            let detail = match &st {
                State::Done => exported
                    .map(|r| format!("exported to {}", r.display()))
                    .unwrap_or_default(),
                State::Running(who) => who.clone(),
                State::Pending { step } if *step > 0 => format!("checkpoint at step {step}"),
                State::Pending { .. } => String::new(),
                State::Failed { log, error } => format!("{}: {error}", log.display()),
            };
            let _ = writeln!(out, "{:8} {}  {detail}", st.label(), p.name);
        }
        let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let _ = writeln!(out, "{}: {}", self.spec.name, summary.join(", "));
        out
    }

    pub fn config_path(&self, run: &str) -> PathBuf {
        self.dir.join("configs").join(format!("{run}.toml"))
    }

    /// Resolve the runs, build their data (once per world), write `configs/<run>.toml`,
    /// `plan.json` and `plan.txt`, and return the plan.
    pub fn plan(&self) -> Result<Vec<PlanRow>> {
        std::fs::create_dir_all(self.dir.join("configs"))
            .with_context(|| format!("{}: cannot create directory", self.dir.display()))?;
        let mut stats: BTreeMap<String, (u32, f64, f64, f64)> = BTreeMap::new();
        let mut rows = Vec::new();
        for p in &self.spec.runs {
            let cfg = &p.config;
            let hash = cfg.data_hash();
            if !stats.contains_key(&hash) {
                let dir = dataset::default_dir(cfg);
                dataset::ensure(cfg, &dir, false)?;
                let data = DataDir::open(&dir)?;
                let cache = crate::train::tokens::load_or_build(&data)?;
                let n = cache.train.len() as f64;
                let tokens = (cache.train.tokens.len() - cache.train.len()) as f64;
                let prompts: f64 = cache.train.prompt_len.iter().map(|&p| p as f64).sum();
                stats.insert(
                    hash.clone(),
                    (
                        data.vocab().n_tokens(),
                        n,
                        tokens / n.max(1.0),
                        tokens + n - prompts,
                    ),
                );
            }
            let (n_tokens, n, mean_len, loss_tokens) = stats[&hash];
            let g = GptConfig::new(cfg, n_tokens);
            let epochs = cfg.train.epochs as f64;
            let (body, head) = epoch_flops(&g, &cfg.train, n, mean_len, loss_tokens);
            let path = self.config_path(&p.name);
            write_atomic(&path, cfg.to_toml().as_bytes())?;
            rows.push(PlanRow {
                run: p.name.clone(),
                config: path,
                dir: self.run_dir(&p.name),
                n_layer: cfg.model.n_layer,
                n_embd: cfg.model.n_embd,
                n_head: cfg.model.n_head,
                total_params: g.total_params(),
                non_embedding_params: g.non_embedding_params(),
                est_flops: epochs * body,
                est_flops_with_head: epochs * (body + head),
                axes: p
                    .axes
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect(),
            });
        }
        write_atomic(
            &self.dir.join("plan.json"),
            (serde_json::to_string_pretty(&rows)? + "\n").as_bytes(),
        )?;
        let table = plan_table(&rows);
        write_atomic(&self.dir.join("plan.txt"), table.as_bytes())?;
        if !self.spec.choices.is_empty() {
            write_atomic(&self.dir.join(SELECTION), &self.selection_json()?)?;
        }
        Ok(rows)
    }
}

/// One epoch's estimated FLOPs, without and of the head, for `n` examples of `mean_len` input
/// tokens with `loss_tokens` loss positions in all. Teacherless training adds a copy of the
/// expected fraction of examples (same length, same loss positions); a hash prefix adds its
/// tokens to every sequence but no loss. Batches pad to their longest sequence, about 1.5 ×
/// the mean here.
fn epoch_flops(
    g: &GptConfig,
    t: &crate::config::TrainConfig,
    n: f64,
    mean_len: f64,
    loss_tokens: f64,
) -> (f64, f64) {
    let copies = match t.objective {
        crate::config::Objective::Ntp => 1.0,
        crate::config::Objective::Teacherless => 1.0 + t.teacherless_fraction,
    };
    let len = mean_len + t.hash_prefix as f64;
    (
        copies * n * len * g.flops_per_token((1.5 * len) as usize),
        copies * loss_tokens * g.head_flops_per_loss_token(),
    )
}

/// The plan as a table: run, L, E, H, parameters, estimated FLOPs.
pub fn plan_table(rows: &[PlanRow]) -> String {
    let w = rows.iter().map(|r| r.run.len()).max().unwrap_or(3).max(3);
    let mut out = format!(
        "{:w$}  {:>3} {:>5} {:>3} {:>5} {:>12} {:>12} {:>10} {:>10}\n",
        "run", "L", "E", "H", "L×E", "params", "non-emb", "est FLOPs", "with head"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:w$}  {:>3} {:>5} {:>3} {:>5} {:>12} {:>12} {:>10.2e} {:>10.2e}",
            r.run,
            r.n_layer,
            r.n_embd,
            r.n_head,
            r.n_layer * r.n_embd,
            r.total_params,
            r.non_embedding_params,
            r.est_flops,
            r.est_flops_with_head
        );
    }
    out
}

/// The units of training as lines: each pack with its runs, and the counts.
pub fn units_table(units: &[Vec<&PlanRow>]) -> String {
    let mut out = String::new();
    let packs: Vec<&Vec<&PlanRow>> = units.iter().filter(|u| u.len() > 1).collect();
    for (i, u) in packs.iter().enumerate() {
        let names: Vec<&str> = u.iter().map(|r| r.run.as_str()).collect();
        let _ = writeln!(
            out,
            "pack {} ({} runs): {}",
            i + 1,
            u.len(),
            names.join(" ")
        );
    }
    let runs: usize = units.iter().map(Vec::len).sum();
    let _ = writeln!(
        out,
        "{runs} runs in {} packs and {} runs alone",
        packs.len(),
        units.len() - packs.len()
    );
    out
}

/// Where a run stands, read from its directory (squeue is only a hint).
#[derive(Clone, Debug, PartialEq)]
pub enum State {
    Done,
    Running(String),
    Failed { log: PathBuf, error: String },
    Pending { step: u64 },
}

impl State {
    pub fn label(&self) -> &'static str {
        match self {
            State::Done => "done",
            State::Running(_) => "running",
            State::Failed { .. } => "failed",
            State::Pending { .. } => "pending",
        }
    }
}

/// The last non-empty line of a file.
pub fn last_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// The state of one run directory. `squeue` lists the Slurm jobs the cluster still knows.
pub fn state(run_dir: &Path, squeue: &[String]) -> State {
    if run_dir.join(DONE).exists() {
        return State::Done;
    }
    if let Some(r) = markers::read_running(run_dir) {
        let here = r.host == markers::hostname();
        let live = if here {
            markers::alive(r.pid)
        } else {
            r.slurm_job.as_ref().is_some_and(|j| squeue.contains(j))
        };
        if live {
            return State::Running(
                r.slurm_job
                    .unwrap_or_else(|| format!("pid {} on {}", r.pid, r.host)),
            );
        }
    }
    if let Some(f) = markers::read_failed(run_dir) {
        let log = run_dir.join("train.log");
        let error = if f.error.is_empty() {
            last_line(&log).unwrap_or_default()
        } else {
            f.error
        };
        return State::Failed { log, error };
    }
    let step = checkpoint::latest(run_dir)
        .map(|(_, s): (PathBuf, TrainerState)| s.step)
        .unwrap_or(0);
    State::Pending { step }
}

/// Jobs `squeue` lists as running or pending (`JOBID_TASK` for array tasks); empty without
/// Slurm.
pub fn squeue_jobs() -> Vec<String> {
    let out = std::process::Command::new("squeue")
        .args(["-h", "-r", "-o", "%i"])
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Objective, TrainConfig};

    /// Teacherless copies scale both parts by 1 + fraction; a hash prefix lengthens every
    /// sequence (more body FLOPs per token and more tokens) and leaves the head alone.
    #[test]
    fn epoch_flops_count_teacherless_copies_and_hash_prefixes() {
        let g = GptConfig {
            vocab_size: 100,
            n_positions: 64,
            n_embd: 16,
            n_layer: 2,
            n_head: 2,
        };
        let (n, len, loss) = (1000.0, 12.0, 5000.0);
        let mut t = TrainConfig::default();
        let (body, head) = epoch_flops(&g, &t, n, len, loss);
        assert_eq!(body, n * len * g.flops_per_token(18));
        assert_eq!(head, loss * g.head_flops_per_loss_token());
        t.objective = Objective::Teacherless;
        t.teacherless_fraction = 0.5;
        assert_eq!(epoch_flops(&g, &t, n, len, loss), (1.5 * body, 1.5 * head));
        t.objective = Objective::Ntp;
        t.hash_prefix = 4;
        let (hb, hh) = epoch_flops(&g, &t, n, len, loss);
        assert_eq!(hb, n * 16.0 * g.flops_per_token(24));
        assert_eq!(hh, head);
    }
}
