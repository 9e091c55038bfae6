//! The Slurm backend: a readable sbatch job array (N runs side by side per task, `--requeue`, a
//! USR1 before the time limit that makes the trainers checkpoint and the task requeue itself),
//! submitted with `sbatch --parsable`, followed by a dependent `lab sweep collect` job.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::fsutil::write_atomic;
use crate::rundir::{DONE, Exit};
use crate::sweep::{PlanRow, Sweep};

/// What `--backend slurm` was asked for.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub partition: Option<String>,
    pub gres: Option<String>,
    pub time: Option<String>,
    pub array_parallelism: Option<usize>,
    pub account: Option<String>,
    pub sbatch_args: Vec<String>,
    /// Units (runs alone or packs) each array task trains side by side (at least 1).
    pub runs_per_task: usize,
    /// Runs a pack holds at most (SPEC §8 Revision, packs); 1: every run alone.
    pub pack: usize,
    /// CPUs of each array task (`--cpus-per-task`); None: one per unit the task trains. Each
    /// trainer gets an equal share as its threads.
    pub cpus_per_task: Option<u32>,
    /// Start an MPS control daemon in each task (`--mps`), so that its trainers share the
    /// task's GPU's SMs instead of time-slicing it.
    pub mps: bool,
    /// Seconds before the time limit at which Slurm sends USR1.
    pub signal_secs: u32,
    pub device: String,
    /// Write the script and task list, submit nothing.
    pub dry_run: bool,
    /// The sweep's `--set` overrides, passed on to the collect job.
    pub overrides: Vec<String>,
    /// The lab the tasks and the collect job run (`--lab-binary`); None: this binary.
    pub lab_binary: Option<PathBuf>,
    /// Shell lines run first in every task and in the collect job (`--setup`), in order.
    pub setup: Vec<String>,
}

impl Options {
    /// The spec's `[slurm]` under the command line's: the flag's binary wins, and the spec's
    /// setup lines run before the flags'.
    pub fn with_spec(mut self, spec: &crate::sweep::spec::Spec) -> Options {
        if self.lab_binary.is_none() {
            self.lab_binary = spec.slurm.lab_binary.clone();
        }
        self.setup = spec.slurm.setup.iter().cloned().chain(self.setup).collect();
        self.cpus_per_task = self.cpus_per_task.or(spec.slurm.cpus_per_task);
        self.mps |= spec.slurm.mps;
        self
    }

    /// The CPUs each array task asks for: the flag's or spec's, else one per unit it trains.
    fn cpus(&self) -> u32 {
        self.cpus_per_task
            .unwrap_or(self.runs_per_task.max(1) as u32)
    }

    /// The lab binary the jobs run, as an absolute path.
    fn lab(&self) -> Result<PathBuf> {
        match &self.lab_binary {
            Some(p) => abs(p),
            None => std::env::current_exe().context("finding the lab binary"),
        }
    }

    /// Every value that reaches the job script is one line of printable text: a newline would
    /// end its `#SBATCH` line and start a shell line. A `--lab-binary` must be an executable
    /// file (it is not run here: a CUDA build need not start on a login node).
    pub fn validate(&self) -> Result<()> {
        if self.mps && self.runs_per_task < 2 {
            bail!(
                "--mps: MPS shares a task's GPU among its trainers; give --runs-per-task 2 or more"
            );
        }
        if self.cpus_per_task == Some(0) {
            bail!("--cpus-per-task: must be at least 1");
        }
        if let Some(p) = &self.lab_binary {
            use std::os::unix::fs::PermissionsExt as _;
            match std::fs::metadata(p) {
                Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
                Ok(_) => bail!("--lab-binary: {}: not an executable file", p.display()),
                Err(e) => bail!("--lab-binary: {}: {e}", p.display()),
            }
        }
        let one = |flag: &str, v: &str| -> Result<()> {
            if let Some(c) = v.chars().find(|c| c.is_control()) {
                bail!(
                    "--{flag}: {v:?} contains the control character U+{:04X}; a value for sbatch \
                     must be one line of text",
                    c as u32
                );
            }
            Ok(())
        };
        for (flag, v) in [
            ("partition", &self.partition),
            ("gres", &self.gres),
            ("time", &self.time),
            ("account", &self.account),
        ] {
            if let Some(v) = v {
                one(flag, v)?;
            }
        }
        one("device", &self.device)?;
        for a in &self.sbatch_args {
            one("sbatch-arg", a)?;
        }
        for a in &self.overrides {
            one("set", a)?;
        }
        for a in &self.setup {
            one("setup", a)?;
        }
        Ok(())
    }
}

/// What was submitted.
pub struct Submitted {
    pub dir: PathBuf,
    pub script: PathBuf,
    /// Runs submitted, and the array tasks they fill (`runs_per_task` units each, the last
    /// fewer).
    pub tasks: usize,
    pub array_tasks: usize,
    pub array_job: String,
    pub collect_job: String,
}

/// Whether `prog` is an executable on PATH.
fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

fn quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn abs(p: &Path) -> Result<PathBuf> {
    Ok(std::path::absolute(p)?)
}

/// The task script's MPS block (`--mps`): a control daemon of the task's own, its pipes under
/// /tmp, stopped when the task ends; a node without MPS fails the task's runs with one line.
const MPS: &str = r#"# MPS (--mps): one control daemon for this task, so that its trainers share the GPU's SMs
# instead of time-slicing it; stopped when the task ends.
if ! command -v nvidia-cuda-mps-control >/dev/null; then
  msg="--mps: nvidia-cuda-mps-control is not on PATH on $(hostname)"
  echo "$msg" >&2
  for run in "${runs[@]}"; do
    printf '{"error":"%s","exit":2}\n' "$msg" > "$sweep_dir/runs/$run/FAILED"
  done
  exit 2
fi
export CUDA_MPS_PIPE_DIRECTORY=/tmp/lab-mps-$SLURM_JOB_ID/pipe
export CUDA_MPS_LOG_DIRECTORY=/tmp/lab-mps-$SLURM_JOB_ID/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
trap 'echo quit | nvidia-cuda-mps-control' EXIT
echo "MPS: control daemon started ($CUDA_MPS_PIPE_DIRECTORY)"
"#;

/// The sbatch script of one submission: `n` units (lines of `tasks_file`: a run alone, or a
/// pack's runs separated by spaces), `o.runs_per_task` to an array task.
pub fn script(
    sweep: &Sweep,
    tasks_file: &Path,
    n: usize,
    o: &Options,
    logs: &Path,
) -> Result<String> {
    let lab = o.lab()?;
    let cwd = std::env::current_dir()?;
    let sweep_dir = abs(&sweep.dir)?;
    let per = o.runs_per_task.max(1);
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# lab sweep {}: {per} training unit(s) (a run, or a pack of runs) side by side per array task, written by",
        sweep.spec.name
    );
    let _ = writeln!(
        s,
        "# `lab sweep run {} --backend slurm`.",
        sweep.spec.path.display()
    );
    let _ = writeln!(
        s,
        "# Re-submitting the sweep skips DONE runs and resumes partial ones from their checkpoints."
    );
    let _ = writeln!(s, "#SBATCH --job-name=lab-{}", sweep.spec.name);
    let par = o
        .array_parallelism
        .map(|p| format!("%{p}"))
        .unwrap_or_default();
    let _ = writeln!(s, "#SBATCH --array=0-{}{par}", n.div_ceil(per) - 1);
    let _ = writeln!(s, "#SBATCH --requeue");
    let _ = writeln!(s, "#SBATCH --cpus-per-task={}", o.cpus());
    let _ = writeln!(s, "#SBATCH --signal=B:USR1@{}", o.signal_secs);
    let _ = writeln!(s, "#SBATCH --output={}/%A_%a.out", logs.display());
    for (flag, v) in [
        ("partition", &o.partition),
        ("gres", &o.gres),
        ("time", &o.time),
        ("account", &o.account),
    ] {
        if let Some(v) = v {
            let _ = writeln!(s, "#SBATCH --{flag}={v}");
        }
    }
    for a in &o.sbatch_args {
        let _ = writeln!(s, "#SBATCH {a}");
    }
    let _ = write!(
        s,
        r#"
set -uo pipefail
cd {cwd}
lab={lab}
sweep_dir={sweep_dir}
# This task's units: lines {per}*ID+1 .. {per}*ID+{per} of the task list, each a run alone or
# the runs of one pack, separated by spaces.
first=$((SLURM_ARRAY_TASK_ID * {per} + 1))
mapfile -t units < <(sed -n "${{first}},$((first + {per} - 1))p" {tasks})
read -ra runs <<< "${{units[*]}}"
for run in "${{runs[@]}}"; do mkdir -p {sweep_dir}/runs/"$run"; done
# The setup lines (--setup, [slurm] setup), in order, in this shell: a failing one fails the
# task, with its message here and in each of its runs' FAILED markers.
setup() {{
  echo "setup: $1"
  eval "$1" || {{
    rc=$?
    echo "setup failed (exit $rc): $1" >&2
    for run in "${{runs[@]}}"; do
      printf '{{"error":"setup failed (exit %d)","exit":%d}}\n' "$rc" "$rc" > {sweep_dir}/runs/"$run"/FAILED
    done
    exit "$rc"
  }}
}}
{setup}{mps}echo "task $SLURM_ARRAY_TASK_ID: runs ${{runs[*]}} on $(hostname), GPUs ${{CUDA_VISIBLE_DEVICES:-none}}"
# The task's CPUs shared equally among its trainers, as their threads.
cpus=${{SLURM_CPUS_PER_TASK:-{cpus}}}
threads=$(( cpus / ${{#units[@]}} > 0 ? cpus / ${{#units[@]}} : 1 ))
export RAYON_NUM_THREADS=$threads

# Before the time limit Slurm sends USR1 to this script: pass it on to every trainer, each of
# which checkpoints at its next step and exits with {interrupted}, then requeue this task so
# that they resume.
pids=()
requeue() {{
  echo "USR1: checkpointing and requeueing"
  kill -USR1 "${{pids[@]}}" 2>/dev/null
  wait "${{pids[@]}}"
  scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}"
  exit 0
}}
trap requeue USR1

# Each unit's runs that are not DONE start (or resume from their checkpoints) in the
# background: one run as `lab train`, several as one pack.
started=()
for unit in "${{units[@]}}"; do
  read -ra members <<< "$unit"
  todo=()
  for run in "${{members[@]}}"; do
    if [ -e {sweep_dir}/runs/"$run"/DONE ]; then
      echo "run $run: DONE, skipped"
    else
      todo+=("$run")
    fi
  done
  [ "${{#todo[@]}}" -gt 0 ] || continue
  if [ "${{#todo[@]}}" -eq 1 ]; then
    run=${{todo[0]}}
    dir={sweep_dir}/runs/$run
    resume=""
    [ -e "$dir/latest" ] && resume=--resume
    echo "run $run: starting $resume"
    "$lab" train --config {sweep_dir}/configs/"$run".toml --out "$dir" $resume --device {device} >> "$dir/train.log" 2>&1 &
  else
    # A pack: one trainer for its runs, each from its checkpoint where it has one.
    args=(--config {sweep_dir}/configs/"${{todo[0]}}".toml)
    for run in "${{todo[@]:1}}"; do args+=(--pack-with {sweep_dir}/configs/"$run".toml); done
    mkdir -p {sweep_dir}/packs
    log={sweep_dir}/packs/"${{todo[0]}}".log
    for run in "${{todo[@]}}"; do
      echo "trained in a pack of ${{#todo[@]}} runs (${{todo[*]}}); its log: $log" >> {sweep_dir}/runs/"$run"/train.log
    done
    echo "pack ${{todo[*]}}: starting"
    "$lab" train "${{args[@]}}" --out {sweep_dir}/runs --resume --device {device} >> "$log" 2>&1 &
  fi
  pids+=($!)
  started+=("${{todo[*]}}")
done
# 0: done or stopped at --max-steps; {interrupted}: stopped by a signal after its checkpoint.
# The task exits with the first failure's code, else {interrupted} if any run was interrupted.
status=0
for i in "${{!pids[@]}}"; do
  wait "${{pids[$i]}}"
  rc=$?
  echo "run ${{started[$i]}}: exit $rc"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne {interrupted} ]; then
    for run in ${{started[$i]}}; do
      dir={sweep_dir}/runs/$run
      [ -e "$dir/DONE" ] || [ -e "$dir/FAILED" ] || printf '{{"error":"","exit":%d}}\n' "$rc" > "$dir/FAILED"
    done
    [ "$status" -eq 0 ] || [ "$status" -eq {interrupted} ] && status=$rc
  elif [ "$rc" -eq {interrupted} ] && [ "$status" -eq 0 ]; then
    status=$rc
  fi
done
exit "$status"
"#,
        cwd = quote(&cwd.to_string_lossy()),
        lab = quote(&lab.to_string_lossy()),
        tasks = quote(&tasks_file.to_string_lossy()),
        sweep_dir = quote(&sweep_dir.to_string_lossy()),
        device = quote(&o.device),
        interrupted = Exit::Interrupted.code(),
        cpus = o.cpus(),
        mps = if o.mps { MPS } else { "" },
        setup = o
            .setup
            .iter()
            .map(|l| format!("setup {}\n", quote(l)))
            .collect::<String>(),
    );
    Ok(s)
}

fn sbatch(args: &[String]) -> Result<String> {
    let out = Command::new("sbatch")
        .args(args)
        .output()
        .context("running sbatch")?;
    if !out.status.success() {
        bail!(
            "sbatch failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    // --parsable prints `jobid[;cluster]`.
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.trim().split(';').next().unwrap_or("").to_string())
}

/// Write this submission's task list and script, submit the array and the collect job.
pub fn submit(sweep: &Sweep, plan: &[PlanRow], o: &Options) -> Result<Option<Submitted>> {
    o.validate()?;
    if !o.dry_run && !on_path("sbatch") {
        bail!(
            "sbatch not found on PATH: this machine is not a Slurm client; run the sweep here with --backend local"
        );
    }
    // Neither the runs exported to the spec's results (a fresh clone has no run directory for
    // them) nor those DONE here, seed-major as the local backend runs them.
    let pending: Vec<&PlanRow> = sweep
        .pending(plan)
        .into_iter()
        .filter(|r| !r.dir.join(DONE).exists())
        .collect();
    if pending.is_empty() {
        return Ok(None);
    }
    let root = abs(&sweep.dir.join("slurm"))?;
    let n_sub = std::fs::read_dir(&root).map(|d| d.count()).unwrap_or(0) + 1;
    let dir = root.join(format!("{n_sub:03}"));
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)
        .with_context(|| format!("{}: cannot create directory", logs.display()))?;
    let tasks = dir.join("tasks.txt");
    let units = sweep.units(&pending, o.pack)?;
    let list: String = units
        .iter()
        .map(|u| {
            let names: Vec<&str> = u.iter().map(|r| r.run.as_str()).collect();
            names.join(" ") + "\n"
        })
        .collect();
    write_atomic(&tasks, list.as_bytes())?;
    let array_tasks = units.len().div_ceil(o.runs_per_task.max(1));
    let path = dir.join("train.sbatch");
    write_atomic(
        &path,
        script(sweep, &tasks, units.len(), o, &logs)?.as_bytes(),
    )?;
    if o.dry_run {
        return Ok(Some(Submitted {
            dir,
            script: path,
            tasks: pending.len(),
            array_tasks,
            array_job: String::new(),
            collect_job: String::new(),
        }));
    }
    let array_job = sbatch(&["--parsable".into(), path.to_string_lossy().into_owned()])?;
    let lab = o.lab()?;
    let spec = abs(&sweep.spec.path)?;
    let mut args = vec![
        "--parsable".to_string(),
        format!("--dependency=afterany:{array_job}"),
        "--kill-on-invalid-dep=yes".into(),
        format!("--job-name=lab-{}-collect", sweep.spec.name),
        format!("--output={}/collect.out", dir.display()),
    ];
    for (flag, v) in [("partition", &o.partition), ("account", &o.account)] {
        if let Some(v) = v {
            args.push(format!("--{flag}={v}"));
        }
    }
    let sets: String = o
        .overrides
        .iter()
        .map(|s| format!(" --set {}", quote(s)))
        .collect();
    let (lab, spec) = (
        quote(&lab.to_string_lossy()),
        quote(&spec.to_string_lossy()),
    );
    // With a results directory, the finished runs are exported there first.
    let export = if sweep.spec.results.is_some() {
        format!("{lab} sweep export {spec}{sets} && ")
    } else {
        String::new()
    };
    let setup: String = o
        .setup
        .iter()
        .map(|l| format!("eval {} && ", quote(l)))
        .collect();
    args.push(format!(
        "--wrap=cd {} && {setup}{export}{lab} sweep collect {spec}{sets}",
        quote(&std::env::current_dir()?.to_string_lossy()),
    ));
    let collect_job = sbatch(&args)?;
    Ok(Some(Submitted {
        dir,
        script: path,
        tasks: pending.len(),
        array_tasks,
        array_job,
        collect_job,
    }))
}
