//! Sweeps through the real binary and a real one-node Slurm cluster started by
//! `scripts/slurm-up.sh` (no mock of sbatch): the smoke sweep as a job array with one task
//! cancelled mid-run and resumed by a re-submission, the same sweep through the local backend
//! giving the same results, the report's figures, and a clear error for each bad input.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{checkpoint_step, lab, metrics, root, run_expect, slurm_allowed};

/// A directory holding copies of configs/ and sweeps/, as a researcher's checkout would.
fn workspace() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for d in ["configs", "sweeps"] {
        std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        for e in std::fs::read_dir(root().join(d)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, tmp.path().join(d).join(p.file_name().unwrap())).unwrap();
        }
    }
    tmp
}

fn slurm_up() {
    let out = Command::new("bash")
        .arg(root().join("scripts/slurm-up.sh"))
        .args(["--gpus", "2"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "slurm-up.sh: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn squeue(job: &str) -> String {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-o", "%i %T", "-j", job])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_gone(job: &str, secs: u64) {
    let start = Instant::now();
    while !squeue(job).trim().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "job {job} still queued: {}",
            squeue(job)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `submitted N runs as job array J` / `collect job C` from `lab sweep run --backend slurm`.
fn job_ids(stdout: &str) -> (String, String) {
    let word_after = |key: &str| {
        stdout
            .split(key)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no `{key}` in {stdout}"))
            .to_string()
    };
    (word_after("job array "), word_after("collect job "))
}

fn runs_dir(ws: &Path) -> PathBuf {
    ws.join("checkpoints/smoke/runs")
}

#[test]
fn smoke_sweep_on_slurm_with_preemption_matches_local() {
    if !slurm_allowed() {
        return;
    }
    slurm_up();
    // The local backend first: the reference.
    let local = workspace();
    run_expect(
        lab(local.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "local",
            "--jobs",
            "2",
        ]),
        0,
    );
    run_expect(
        lab(local.path()).args(["sweep", "collect", "sweeps/smoke.toml"]),
        0,
    );

    // Slurm, with the GPU-shaped script a real cluster gets, and a results directory the
    // collect job exports the finished runs to.
    let ws = workspace();
    let spec_path = ws.path().join("sweeps/smoke.toml");
    let spec_text = std::fs::read_to_string(&spec_path).unwrap();
    std::fs::write(
        &spec_path,
        spec_text.replacen("base = ", "results = \"../results/smoke\"\nbase = ", 1),
    )
    .unwrap();
    let plan = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/smoke.toml"]),
        0,
    );
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.contains("4 runs") && plan.contains("est FLOPs"),
        "{plan}"
    );
    let t0 = Instant::now();
    // Two runs side by side per array task: 4 runs in 2 tasks.
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--gres",
            "gpu:1",
            "--runs-per-task",
            "2",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("submitted 4 runs as job array") && text.contains("of 2 tasks"),
        "{text}"
    );
    let (array, collect) = job_ids(&text);
    let script =
        std::fs::read_to_string(ws.path().join("checkpoints/smoke/slurm/001/train.sbatch"))
            .unwrap();
    assert!(script.contains("#SBATCH --array=0-1\n"), "{script}");
    // Preempt task 0, both of its runs, once each is past a mid-epoch checkpoint.
    let first =
        std::fs::read_to_string(ws.path().join("checkpoints/smoke/slurm/001/tasks.txt")).unwrap();
    let victims: Vec<PathBuf> = first
        .lines()
        .take(2)
        .map(|r| runs_dir(ws.path()).join(r))
        .collect();
    let start = Instant::now();
    for victim in &victims {
        loop {
            if checkpoint_step(victim) >= 20 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "{} never reached a checkpoint",
                victim.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // Freeze the trainer where it is, so that it cannot finish between this check and the
        // cancel (the micro run ends in about a second); Slurm's cancel sends SIGCONT before
        // SIGTERM, and the trainer then checkpoints and exits as on any cancel.
        let pid = lab::rundir::markers::read_running(victim)
            .expect("the running victim holds its RUNNING marker")
            .pid as libc::pid_t;
        // SAFETY: kill(2) with a pid read from the trainer's own marker and a valid signal.
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGSTOP) },
            0,
            "stop pid {pid}"
        );
        assert!(
            !victim.join("DONE").exists(),
            "cancel before it ends (the run is too short?)"
        );
    }
    run_expect(Command::new("scancel").arg(format!("{array}_0")), 0);
    wait_gone(&array, 600);
    wait_gone(&collect, 120);
    let status = run_expect(
        lab(ws.path()).args(["sweep", "status", "sweeps/smoke.toml"]),
        0,
    );
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("pending") && status.contains("2 done"),
        "the cancelled task's two runs wait to resume:\n{status}"
    );
    for victim in &victims {
        assert!(
            victim.join("latest").exists(),
            "{}: its checkpoint survived the cancel",
            victim.display()
        );
    }

    // Re-submit, one run per task: the DONE runs are skipped, both cancelled ones resume.
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--gres",
            "gpu:1",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("submitted 2 runs") && text.contains("of 2 tasks"),
        "{text}"
    );
    let (array, collect) = job_ids(&text);
    wait_gone(&array, 600);
    wait_gone(&collect, 120);
    eprintln!(
        "smoke sweep through Slurm, with a preemption and a re-submission: {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    for victim in &victims {
        let log = std::fs::read_to_string(victim.join("train.log")).unwrap();
        // Each attempt of the task appends to the run's log, starting with its `training …` line.
        assert!(
            log.lines().filter(|l| l.starts_with("training ")).count() >= 2,
            "the log shows both attempts:\n{log}"
        );
    }
    for run in std::fs::read_dir(runs_dir(ws.path())).unwrap() {
        let run = run.unwrap().path();
        assert!(run.join("DONE").exists(), "{} not done", run.display());
        let name = run.file_name().unwrap();
        assert_eq!(
            metrics(&run),
            metrics(&runs_dir(local.path()).join(name)),
            "{name:?}: Slurm (preempted or not) == local"
        );
    }

    // results.csv: written by the dependent collect job, the same figures as the local run.
    let csv = std::fs::read_to_string(ws.path().join("checkpoints/smoke/results.csv")).unwrap();
    let local_csv =
        std::fs::read_to_string(local.path().join("checkpoints/smoke/results.csv")).unwrap();
    assert_eq!(csv, local_csv, "Slurm and local results agree");
    let rows = lab::report::read_csv(&ws.path().join("checkpoints/smoke/results.csv")).unwrap();
    assert_eq!(rows.len(), 8, "4 runs x 2 evaluated epochs");
    // The collect jobs exported every run; collected from there alone, the same rows.
    let exported = ws.path().join("results/smoke");
    assert_eq!(
        std::fs::read_dir(exported.join("runs")).unwrap().count(),
        4,
        "every run exported"
    );
    run_expect(
        lab(ws.path()).args(["sweep", "collect", "results/smoke"]),
        0,
    );
    let sorted = |t: String| {
        let mut l: Vec<String> = t.lines().map(String::from).collect();
        l.sort();
        l
    };
    assert_eq!(
        sorted(std::fs::read_to_string(exported.join("results.csv")).unwrap()),
        sorted(csv),
        "results from the exported runs == results from the run directories"
    );
    for r in &rows {
        for col in [
            "n_layer",
            "n_embd",
            "n_head",
            "total_params",
            "non_embedding_params",
            "epoch",
            "flops",
            "val/loss",
            "eval/creativity",
            "eval/valid_rate",
            "eval/utility",
        ] {
            assert!(
                r.num(col).is_some(),
                "column {col} is a finite number in {}",
                r.get("run")
            );
        }
        for e in lab::eval::score::ErrorType::ALL {
            assert!(r.num(&format!("eval/err/{}", e.name())).is_some());
        }
    }

    // The report: every figure as SVG and PNG with its CSV, one series per bucket.
    run_expect(lab(ws.path()).args(["report", "checkpoints/smoke"]), 0);
    let report = ws.path().join("checkpoints/smoke/report");
    for stem in [
        "depth_smoke",
        "width_smoke",
        "tradeoff",
        "errors",
        "creativity_flops",
    ] {
        for ext in ["svg", "png"] {
            let p = report.join(format!("{stem}.{ext}"));
            assert!(
                std::fs::metadata(&p)
                    .map(|m| m.len() > 1000)
                    .unwrap_or(false),
                "{} written",
                p.display()
            );
        }
        let csv = std::fs::read_to_string(report.join(format!("{stem}.csv"))).unwrap();
        assert!(
            csv.lines().next().is_some_and(|h| h.contains(',')),
            "{stem}.csv has its header"
        );
    }
    let md = std::fs::read_to_string(report.join("report.md")).unwrap();
    assert!(md.contains("![") && md.contains("depth_smoke.png"));
    let fl = lab::report::read_csv(&report.join("creativity_flops.csv")).unwrap();
    assert_eq!(fl.len(), 8);
    let buckets: std::collections::BTreeSet<&str> = fl.iter().map(|r| r.get("bucket")).collect();
    assert_eq!(buckets.len(), 1, "one series per bucket: {buckets:?}");
    let depth = lab::report::read_csv(&report.join("depth_smoke.csv")).unwrap();
    let depths: std::collections::BTreeSet<&str> = depth.iter().map(|r| r.get("n_layer")).collect();
    assert_eq!(depths.len(), 2, "both depths in the heatmap");
}

/// `lab sweep plan --pack 2` shows the smoke sweep's packs (one per depth, its two seeds);
/// `lab sweep run --pack 2` trains them, locally and (where Slurm is allowed) as one array task
/// running both packs side by side (`--runs-per-task 2`), and gives the unpacked local sweep's
/// `results.csv`, row for row, and its models, byte for byte.
#[test]
fn a_packed_sweep_gives_the_unpacked_results() {
    let reference = workspace();
    let sweep = |ws: &Path, extra: &[&str]| {
        run_expect(
            lab(ws)
                .args(["sweep", "run", "sweeps/smoke.toml"])
                .args(extra),
            0,
        );
        run_expect(lab(ws).args(["sweep", "collect", "sweeps/smoke.toml"]), 0);
    };
    sweep(reference.path(), &["--backend", "local"]);
    let same = |ws: &Path, how: &str| {
        let csv =
            |w: &Path| std::fs::read_to_string(w.join("checkpoints/smoke/results.csv")).unwrap();
        assert_eq!(csv(ws), csv(reference.path()), "{how}: results.csv");
        for run in std::fs::read_dir(runs_dir(reference.path())).unwrap() {
            let name = run.unwrap().file_name();
            let model = |w: &Path| {
                std::fs::read(runs_dir(w).join(&name).join("model.safetensors")).unwrap()
            };
            assert!(
                model(ws) == model(reference.path()),
                "{how}: {name:?}'s model"
            );
            let log = std::fs::read_to_string(runs_dir(ws).join(&name).join("train.log")).unwrap();
            assert!(log.contains("trained in a pack of 2 runs"), "{how}: {log}");
        }
    };

    let ws = workspace();
    let plan = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/smoke.toml", "--pack", "2"]),
        0,
    );
    let plan = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan.contains("pack 1 (2 runs): smoke-L1")
            && plan.contains("pack 2 (2 runs): smoke-L2")
            && plan.contains("4 runs in 2 packs and 0 runs alone"),
        "{plan}"
    );
    let txt = std::fs::read_to_string(ws.path().join("checkpoints/smoke/plan.txt")).unwrap();
    assert!(txt.contains("pack 2 (2 runs)"), "{txt}");
    sweep(ws.path(), &["--backend", "local", "--pack", "2"]);
    same(ws.path(), "local");
    let status = run_expect(
        lab(ws.path()).args(["sweep", "status", "sweeps/smoke.toml"]),
        0,
    );
    assert!(String::from_utf8_lossy(&status.stdout).contains("smoke: 4 done"));
    // A pack on a GPU is refused before anything is written.
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "local",
            "--pack",
            "2",
            "--device",
            "cuda",
        ]),
        2,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--pack: a pack trains on the CPU"));
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--dry-run",
            "--pack",
            "2",
            "--gres",
            "gpu:1",
        ]),
        2,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("would leave --gres gpu:1 idle"));

    if !slurm_allowed() {
        return;
    }
    slurm_up();
    let ws = workspace();
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--pack",
            "2",
            "--runs-per-task",
            "2",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("submitted 4 runs as job array") && text.contains("of 1 tasks"),
        "{text}"
    );
    let tasks =
        std::fs::read_to_string(ws.path().join("checkpoints/smoke/slurm/001/tasks.txt")).unwrap();
    assert_eq!(tasks.lines().count(), 2, "one line a pack: {tasks}");
    let (array, collect) = job_ids(&text);
    wait_gone(&array, 600);
    wait_gone(&collect, 120);
    same(ws.path(), "Slurm");
}

fn spec(ws: &Path, text: &str) -> PathBuf {
    let p = ws.join("sweeps/bad.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn bad_spec(text: &str, needles: &[&str]) {
    let ws = workspace();
    let p = spec(ws.path(), text);
    let out = run_expect(lab(ws.path()).args(["sweep", "plan"]).arg(&p), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    for n in needles {
        assert!(err.contains(n), "`{n}` missing from {err}");
    }
}

#[test]
fn bad_sweep_specs() {
    let head = "name = \"bad\"\nbase = \"../configs/tiny.toml\"\n";
    bad_spec(
        &format!("{head}[grid.model]\nn_layer = [1]\n[grdi]\n"),
        &["bad.toml", "unknown field `grdi`"],
    );
    bad_spec(
        &format!("{head}[grid.model]\nn_layers = [1, 2]\n"),
        &["bad.toml", "model.n_layers", "unknown field"],
    );
    bad_spec(
        &format!("{head}[grid.model]\nn_layer = []\n"),
        &["bad.toml", "grid.model.n_layer", "empty list"],
    );
    bad_spec(head, &["bad.toml", "grid", "empty"]);
    bad_spec(
        &format!("{head}[bucket]\ntarget = 1000000\nn_layer = [4]\nn_head = [3, 7]\n"),
        &[
            "bad.toml",
            "bucket.n_head",
            "no head count in [3, 7] divides E = 160",
        ],
    );
    bad_spec(
        &format!("{head}[zip.model]\nn_embd = [32, 64]\n[zip.train]\nepochs = [1]\n"),
        &[
            "bad.toml",
            "zip.train.epochs",
            "has 1 values",
            "same length (2)",
        ],
    );
    bad_spec(
        &format!("{head}[bucket]\ntarget = [1000000]\nn_layer = [4]\nn_head = [4]\nround = 0\n"),
        &["bad.toml", "bucket.round", "at least 1"],
    );
    bad_spec(
        &format!("{head}[bucket]\ntarget = 100000\nn_layer = [2, 64]\nn_head = [4]\n"),
        &[
            "bad.toml",
            "bucket.n_layer",
            "L = 64 gives E = 0",
            "smaller than every head count",
        ],
    );
    bad_spec(
        &format!(
            "{head}[grid.model]\nn_layer = [1]\n[[select]]\nkey = \"train.lr\"\n\
             from = \"tune.toml\"\nmetric = \"tune/creativity\"\nbest = \"max\"\n"
        ),
        &["bad.toml", "unknown variant `max`", "lowest", "highest"],
    );
}

#[test]
fn slurm_backend_without_sbatch_suggests_local() {
    let ws = workspace();
    let empty = tempfile::tempdir().unwrap();
    let out = run_expect(
        lab(ws.path()).env("PATH", empty.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
        ]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sbatch not found") && err.contains("--backend local"),
        "{err}"
    );
}

#[test]
fn a_failed_run_is_shown_with_its_log_and_left_out_of_results() {
    let ws = workspace();
    let text = std::fs::read_to_string(ws.path().join("sweeps/smoke.toml"))
        .unwrap()
        .replace("name = \"smoke\"", "name = \"faulty\"")
        .replace(
            "[grid.model]\nn_layer = [1, 2]\n\n[grid.train]\nseed = [0, 1]",
            "[grid.train]\nlr = [3e-3, 1e30]",
        );
    let p = ws.path().join("sweeps/faulty.toml");
    std::fs::write(&p, text).unwrap();
    run_expect(
        lab(ws.path())
            .args(["sweep", "run"])
            .arg(&p)
            .args(["--backend", "local"]),
        1,
    );
    let out = run_expect(lab(ws.path()).args(["sweep", "status"]).arg(&p), 0);
    let status = String::from_utf8_lossy(&out.stdout);
    let failed = status
        .lines()
        .find(|l| l.starts_with("failed"))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(
        failed.contains("train.log") && failed.contains("the training loss is"),
        "{failed}"
    );
    assert!(status.contains("1 done, 1 failed"), "{status}");
    let out = run_expect(lab(ws.path()).args(["sweep", "collect"]).arg(&p), 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("left out") && err.contains("failed"), "{err}");
    let rows = lab::report::read_csv(&ws.path().join("checkpoints/faulty/results.csv")).unwrap();
    assert_eq!(rows.len(), 2, "only the good run's 2 epochs");
}

#[test]
fn every_run_of_a_local_sweep_trains_on_the_binary_the_sweep_started_with() {
    // A rebuild that moves a new binary over the sweep's path mid-sweep (as `cargo build` and
    // scripts/study.sh do) must not change the binary of the runs still to start.
    let ws = workspace();
    let bin = ws.path().join("lab");
    std::fs::copy(env!("CARGO_BIN_EXE_lab"), &bin).unwrap();
    let text = std::fs::read_to_string(ws.path().join("sweeps/smoke.toml"))
        .unwrap()
        .replace("[grid.model]\nn_layer = [1, 2]\n\n", "");
    let p = ws.path().join("sweeps/two.toml");
    std::fs::write(&p, text).unwrap();
    let mut sweep = Command::new(&bin)
        .current_dir(ws.path())
        .args(["sweep", "run"])
        .arg(&p)
        .args(["--backend", "local", "--jobs", "1"])
        .spawn()
        .unwrap();
    let first = Instant::now();
    let started = || {
        std::fs::read_dir(runs_dir(ws.path()))
            .map(|d| d.flatten().any(|e| e.path().join("train.log").exists()))
            .unwrap_or(false)
    };
    while !started() {
        assert!(first.elapsed() < Duration::from_secs(120), "no run started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first run is training: a binary that cannot train replaces the sweep's path.
    let broken = ws.path().join("lab.new");
    std::fs::write(&broken, "#!/bin/sh\nexit 7\n").unwrap();
    std::fs::set_permissions(&broken, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&broken, &bin).unwrap();
    assert!(sweep.wait().unwrap().success(), "the sweep failed");
    let runs: Vec<PathBuf> = std::fs::read_dir(runs_dir(ws.path()))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for r in runs {
        assert!(r.join("DONE").exists(), "{} is not done", r.display());
    }
}

/// `lab sweep run sweeps/smoke.toml --backend slurm --dry-run` with `extra`, in `ws`,
/// expecting exit `code`.
fn slurm_dry_run(ws: &Path, extra: &[&str], code: i32) -> std::process::Output {
    run_expect(
        lab(ws)
            .args([
                "sweep",
                "run",
                "sweeps/smoke.toml",
                "--backend",
                "slurm",
                "--dry-run",
            ])
            .args(extra),
        code,
    )
}

/// A value bound for an `#SBATCH` line with a control character in it (a newline would start a
/// shell line of the job script) is refused before anything is written.
#[test]
fn sbatch_values_with_control_characters_are_refused() {
    for (flag, value) in [
        ("--partition", "debug\nrm -rf ~"),
        ("--account", "lab\r"),
        ("--gres", "gpu:1\u{1b}[2J"),
        ("--time", "1:00:00\necho hi"),
        ("--sbatch-arg", "--mem=4G\n#!/bin/sh"),
        ("--setup", "module load cuda\nrm -rf /"),
    ] {
        let ws = workspace();
        let out = slurm_dry_run(ws.path(), &[flag, value], 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(flag) && err.contains("control character"),
            "{flag}: {err}"
        );
        assert!(
            !ws.path().join("checkpoints/smoke").exists(),
            "{flag}: nothing written"
        );
    }
}

/// GPU tasks on Slurm: each task asks for `--cpus-per-task` (default one per run it trains, or
/// the spec's `[slurm] cpus_per_task`) and shares them among its trainers as threads; `--mps`
/// starts a control daemon of the task's own and stops it at the end, and is refused without
/// several trainers to share the GPU. On the real cluster, a node without MPS fails the task's
/// runs with one line naming the node, and a task's two trainers train on one thread each.
#[test]
fn gpu_tasks_ask_for_their_cpus_and_may_start_mps() {
    let script = |ws: &Path| {
        std::fs::read_to_string(ws.join("checkpoints/smoke/slurm/001/train.sbatch")).unwrap()
    };
    let ws = workspace();
    slurm_dry_run(ws.path(), &["--gres", "gpu:1", "--runs-per-task", "2"], 0);
    let s = script(ws.path());
    assert!(s.contains("#SBATCH --cpus-per-task=2\n"), "{s}");
    assert!(!s.contains("nvidia-cuda-mps-control -d"), "{s}");
    let ws = workspace();
    slurm_dry_run(
        ws.path(),
        &["--runs-per-task", "2", "--cpus-per-task", "6", "--mps"],
        0,
    );
    let s = script(ws.path());
    assert!(s.contains("#SBATCH --cpus-per-task=6\n"), "{s}");
    assert!(
        s.contains("nvidia-cuda-mps-control -d")
            && s.contains("trap 'echo quit | nvidia-cuda-mps-control' EXIT"),
        "{s}"
    );
    // The spec's [slurm] table gives the same, a flag overriding it.
    let ws = workspace();
    let spec_path = ws.path().join("sweeps/smoke.toml");
    let text = std::fs::read_to_string(&spec_path).unwrap();
    std::fs::write(&spec_path, format!("{text}\n[slurm]\ncpus_per_task = 3\n")).unwrap();
    slurm_dry_run(ws.path(), &[], 0);
    assert!(script(ws.path()).contains("#SBATCH --cpus-per-task=3\n"));
    for (extra, needle) in [
        (
            &["--mps"][..],
            "--mps: MPS shares a task's GPU among its trainers",
        ),
        (
            &["--cpus-per-task", "0"][..],
            "--cpus-per-task: must be at least 1",
        ),
    ] {
        let ws = workspace();
        let out = slurm_dry_run(ws.path(), extra, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{err}");
        assert!(
            !ws.path().join("checkpoints/smoke").exists(),
            "nothing written"
        );
    }

    if !slurm_allowed() {
        return;
    }
    slurm_up();
    let ws = workspace();
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--runs-per-task",
            "2",
            "--mps",
        ]),
        0,
    );
    let (array, collect) = job_ids(&String::from_utf8_lossy(&out.stdout));
    wait_gone(&array, 300);
    wait_gone(&collect, 120);
    let status = run_expect(
        lab(ws.path()).args(["sweep", "status", "sweeps/smoke.toml"]),
        0,
    );
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("smoke: 4 failed")
            && status.contains("--mps: nvidia-cuda-mps-control is not on PATH on"),
        "{status}"
    );
    let ws = workspace();
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--runs-per-task",
            "2",
        ]),
        0,
    );
    let (array, collect) = job_ids(&String::from_utf8_lossy(&out.stdout));
    wait_gone(&array, 600);
    wait_gone(&collect, 120);
    for run in std::fs::read_dir(runs_dir(ws.path())).unwrap() {
        let log = std::fs::read_to_string(run.unwrap().path().join("train.log")).unwrap();
        assert!(log.contains("on cpu (1 threads)"), "{log}");
    }
}

/// Two-stage tuning from files: a tuning sweep on the tuning split, then a seeds sweep whose
/// `[[select]]` takes each depth's lr from the tuning runs as exported, the lowest `tune/loss`
/// winning, or the highest `tune/creativity` (logged, or read from the last evaluation's
/// tuning-split summary); a selection before the tuning runs exist, on an eval-set metric, or
/// on a figure a run has neither logged nor summarised, is refused.
#[test]
fn a_seeds_sweep_selects_each_depths_lr_from_the_tuning_runs() {
    let ws = workspace();
    let smoke = std::fs::read_to_string(ws.path().join("sweeps/smoke.toml")).unwrap();
    let common = smoke
        .replace("epochs = 2", "epochs = 1")
        .replace(
            "base_paths_per_hop = 5    # 100 eval queries",
            "base_paths_per_hop = 5\ntune_base_paths_per_hop = 2",
        )
        .replace(
            "[grid.model]\nn_layer = [1, 2]\n\n[grid.train]\nseed = [0, 1]",
            "",
        );
    let tune = common.replace(
        "name = \"smoke\"",
        "name = \"tune\"\nresults = \"../results/t\"",
    ) + "[grid.model]\nn_layer = [1, 2]\n[grid.train]\nlr = [1e-4, 3e-3]\nseed = [0]\n\
           [export]\nanswers = \"none\"\nmetrics_every = 5\n";
    let seeds = common.replace(
        "name = \"smoke\"",
        "name = \"seeds\"\nresults = \"../results/t\"",
    ) + "[grid.model]\nn_layer = [1, 2]\n[grid.train]\nseed = [1, 2]\n\
           [[select]]\nkey = \"train.lr\"\nfrom = \"tune.toml\"\nmetric = \"tune/loss\"\n";
    std::fs::write(ws.path().join("sweeps/tune.toml"), &tune).unwrap();
    std::fs::write(ws.path().join("sweeps/seeds.toml"), &seeds).unwrap();
    let early = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/seeds.toml"]),
        2,
    );
    let err = String::from_utf8_lossy(&early.stderr);
    assert!(
        err.contains("4 of 4 runs") && err.contains("not exported"),
        "{err}"
    );

    run_expect(
        lab(ws.path()).args(["sweep", "run", "sweeps/tune.toml", "--backend", "local"]),
        0,
    );
    // The expected choice, from the exported files themselves.
    let mut best: std::collections::BTreeMap<String, (f64, String)> = Default::default();
    let runs = ws.path().join("results/t/runs");
    for e in std::fs::read_dir(&runs).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let lines = metrics(&dir);
        let tune_loss = lines
            .iter()
            .rev()
            .find_map(|l| l["tune/loss"].as_f64())
            .unwrap_or_else(|| panic!("{name}: no tune/loss"));
        let train_lines = |ls: &[Value]| ls.iter().filter(|l| l.get("val/loss").is_none()).count();
        let all = metrics(&ws.path().join("checkpoints/tune/runs").join(&name));
        assert!(
            train_lines(&all) >= 6,
            "{name}: {} training lines",
            train_lines(&all)
        );
        assert_eq!(
            train_lines(&lines),
            train_lines(&all).div_ceil(5),
            "{name}: one training line in 5 kept"
        );
        assert_eq!(
            lines.len() - train_lines(&lines),
            all.len() - train_lines(&all),
            "{name}: every evaluation kept"
        );
        let answers = std::fs::read_dir(dir.join("eval"))
            .unwrap()
            .filter(|f| {
                f.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".gz")
            })
            .count();
        assert_eq!(answers, 0, "{name}: answers = \"none\"");
        let depth = name.split('-').nth(1).unwrap().to_string();
        let lr = name.split("-lr").nth(1).unwrap().split('-').next().unwrap();
        let e = best.entry(depth).or_insert((f64::INFINITY, String::new()));
        if tune_loss < e.0 {
            *e = (tune_loss, lr.to_string());
        }
    }
    assert_eq!(best.len(), 2, "{best:?}");
    let out = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/seeds.toml"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for (depth, (_, lr)) in &best {
        let l = &depth[1..];
        let line = text
            .lines()
            .find(|x| {
                x.starts_with(&format!(
                    "selected train.lr for n_embd=32 n_head=2 n_layer={l}:"
                ))
            })
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            line.contains(&format!(": {lr} (lowest tune/loss")),
            "{line}"
        );
        for seed in [1, 2] {
            let run = format!("seeds-{depth}-E32-H2-seed{seed}-lr{lr}-");
            assert!(text.contains(&run), "{run} in\n{text}");
        }
    }
    let sel: Value = serde_json::from_slice(
        &std::fs::read(ws.path().join("checkpoints/seeds/selection.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(sel.as_array().unwrap().len(), 2, "{sel}");

    // The second reading: the highest greedy creativity on the tuning split, which every
    // evaluation logs (`tune/creativity`) and writes (`eval/epoch-NN.tune.summary.json`).
    let mut by_c: std::collections::BTreeMap<String, Vec<(f64, String, f64)>> = Default::default();
    for e in std::fs::read_dir(&runs).unwrap() {
        let dir = e.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let c = metrics(&dir)
            .iter()
            .rev()
            .find_map(|l| l.get("tune/creativity").and_then(Value::as_f64))
            .unwrap_or_else(|| panic!("{name}: no tune/creativity"));
        let summary: Value = serde_json::from_slice(
            &std::fs::read(dir.join("eval/epoch-01.tune.summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(summary["creativity"].as_f64(), Some(c), "{name}");
        let depth = name.split('-').nth(1).unwrap().to_string();
        let lr = name.split("-lr").nth(1).unwrap().split('-').next().unwrap();
        let lr_value: f64 = lr.parse().unwrap();
        by_c.entry(depth)
            .or_default()
            .push((lr_value, lr.to_string(), c));
    }
    let by_c: std::collections::BTreeMap<String, String> = by_c
        .into_iter()
        .map(|(depth, mut cands)| {
            // The grid's order (ascending lr); the first of equals wins.
            cands.sort_by(|a, b| a.0.total_cmp(&b.0));
            let top = cands.iter().map(|c| c.2).fold(f64::NEG_INFINITY, f64::max);
            let lr = cands.iter().find(|c| c.2 == top).unwrap().1.clone();
            (depth, lr)
        })
        .collect();
    let by_creativity = seeds.replace(
        "metric = \"tune/loss\"",
        "metric = \"tune/creativity\"\nbest = \"highest\"",
    );
    std::fs::write(ws.path().join("sweeps/seeds.toml"), &by_creativity).unwrap();
    let plan_lines = |ws: &Path| {
        let out = run_expect(lab(ws).args(["sweep", "plan", "sweeps/seeds.toml"]), 0);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("selected "))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let chosen = plan_lines(ws.path());
    assert_eq!(chosen.len(), 2, "{chosen:?}");
    for (depth, lr) in &by_c {
        let prefix = format!(
            "selected train.lr for n_embd=32 n_head=2 n_layer={}:",
            &depth[1..]
        );
        let line = chosen.iter().find(|l| l.starts_with(&prefix)).unwrap();
        assert!(
            line.contains(&format!(": {lr} (highest tune/creativity")),
            "{line}"
        );
    }
    // Runs trained before the tuning split's greedy evaluation: the figure comes from the
    // tuning-split summary that `lab eval --split tune` wrote for the last evaluation.
    for e in std::fs::read_dir(&runs).unwrap() {
        let path = e.unwrap().path().join("metrics.jsonl");
        let text: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| {
                let mut v: serde_json::Map<String, Value> = serde_json::from_str(l).unwrap();
                v.retain(|k, _| !k.starts_with("tune/") || k == "tune/loss");
                Value::Object(v).to_string() + "\n"
            })
            .collect();
        std::fs::write(&path, text).unwrap();
    }
    assert_eq!(plan_lines(ws.path()), chosen);
    let first = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(first.join("eval/epoch-01.tune.summary.json")).unwrap();
    let out = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/seeds.toml"]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("logs no \"tune/creativity\""), "{err}");

    let bad = seeds.replace("metric = \"tune/loss\"", "metric = \"val/loss\"");
    std::fs::write(ws.path().join("sweeps/seeds.toml"), bad).unwrap();
    let out = run_expect(
        lab(ws.path()).args(["sweep", "plan", "sweeps/seeds.toml"]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("computed on the eval queries"), "{err}");
}

/// `--lab-binary` and `--setup` on the real cluster: every task and the collect job run the
/// given executable (a wrapper that records its calls, then runs the lab) after the setup line
/// that exports a marker, and the sweep finishes as usual.
#[test]
fn slurm_tasks_and_collect_run_the_given_binary_after_the_setup_lines() {
    if !slurm_allowed() {
        return;
    }
    slurm_up();
    let ws = workspace();
    let calls = ws.path().join("calls.txt");
    let wrapper = ws.path().join("lab-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/bash\necho \"${{LAB_TEST_MARKER:-unset}} $1 $2\" >> {}\nexec {} \"$@\"\n",
            calls.display(),
            env!("CARGO_BIN_EXE_lab")
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run_expect(
        lab(ws.path()).args([
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--set",
            "train.epochs=1",
            "--backend",
            "slurm",
            "--gres",
            "gpu:1",
            "--device",
            "cpu",
            "--lab-binary",
            wrapper.to_str().unwrap(),
            "--setup",
            "export LAB_TEST_MARKER=from-setup",
        ]),
        0,
    );
    let (array, collect) = job_ids(&String::from_utf8_lossy(&out.stdout));
    wait_gone(&array, 600);
    wait_gone(&collect, 120);
    let script =
        std::fs::read_to_string(ws.path().join("checkpoints/smoke/slurm/001/train.sbatch"))
            .unwrap();
    assert!(
        script.contains("setup 'export LAB_TEST_MARKER=from-setup'"),
        "{script}"
    );
    let calls = std::fs::read_to_string(&calls).unwrap();
    let lines: Vec<&str> = calls.lines().collect();
    assert_eq!(
        lines
            .iter()
            .filter(|l| **l == "from-setup train --config")
            .count(),
        4,
        "every task through the wrapper, after the setup line:\n{calls}"
    );
    assert!(
        lines.contains(&"from-setup sweep collect"),
        "the collect job too:\n{calls}"
    );
    assert!(
        lines.iter().all(|l| l.starts_with("from-setup ")),
        "{calls}"
    );
    let rows = lab::report::read_csv(&ws.path().join("checkpoints/smoke/results.csv")).unwrap();
    assert_eq!(rows.len(), 4, "4 runs x 1 evaluated epoch");
}

/// A `--lab-binary` that is not an executable file is refused before anything is written (a
/// `--setup` line with a control character is among the sbatch values above).
#[test]
fn a_bad_lab_binary_is_refused_with_nothing_written() {
    let ws = workspace();
    let not_exec = ws.path().join("not-executable");
    std::fs::write(&not_exec, "#!/bin/bash\n").unwrap();
    for (extra, needle) in [
        (
            vec!["--lab-binary", "/nonexistent/lab-cuda"],
            "--lab-binary",
        ),
        (
            vec!["--lab-binary", not_exec.to_str().unwrap()],
            "not an executable",
        ),
    ] {
        let out = slurm_dry_run(ws.path(), &extra, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && err.lines().count() == 1, "{err}");
        assert!(
            !ws.path().join("checkpoints").exists(),
            "{extra:?}: nothing written"
        );
    }
}

/// `answers = "last"` with `samples = true` keeps the last epoch's greedy and sampled answers,
/// each as one `{"id", "output"}` line per answer; `lab sweep rescore` re-scores both (the
/// samples as sets) to their rows of results.csv.
#[test]
fn an_export_keeps_the_last_samples_as_lines_that_rescore() {
    let ws = workspace();
    let smoke = std::fs::read_to_string(ws.path().join("sweeps/smoke.toml")).unwrap();
    let spec = smoke
        .replace(
            "name = \"smoke\"",
            "name = \"s\"\nresults = \"../results/s\"",
        )
        .replace("n_layer = [1, 2]", "n_layer = [1]")
        .replace("seed = [0, 1]", "seed = [0]")
        + "[set.eval]\nsamples = 3\nsamples_at = \"last\"\n[export]\nanswers = \"last\"\nsamples = true\n";
    std::fs::write(ws.path().join("sweeps/s.toml"), &spec).unwrap();
    run_expect(
        lab(ws.path()).args(["sweep", "run", "sweeps/s.toml", "--backend", "local"]),
        0,
    );
    let run = std::fs::read_dir(ws.path().join("results/s/runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut names: Vec<String> = std::fs::read_dir(run.join("eval"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".gz"))
        .collect();
    names.sort();
    assert_eq!(names, ["epoch-02.jsonl.gz", "epoch-02.samples.jsonl.gz"]);
    let text = lab::fsutil::read_text(&run.join("eval/epoch-02.samples.jsonl.gz")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3 * 100, "3 answers to each of 100 queries");
    for l in &lines {
        let keys: Vec<&String> = l.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "output"], "{l}");
    }
    run_expect(lab(ws.path()).args(["sweep", "collect", "results/s"]), 0);
    // The exported run names its code, and collect carries the commit into results.csv.
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("run.meta.json")).unwrap()).unwrap();
    let commit = meta["code"]["commit"].as_str().unwrap().to_string();
    let csv = std::fs::read_to_string(ws.path().join("results/s/results.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|c| *c == "commit")
        .expect("a commit column");
    for row in csv.lines().skip(1) {
        assert!(
            row.split(',').nth(col).unwrap().starts_with(&commit[..12]),
            "{row}"
        );
    }
    let out = lab(ws.path())
        .args(["sweep", "rescore", "results/s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains("2 answer files re-scored")
            && stdout.contains(" 0 within 1e-12 relative, 0 mismatches"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
