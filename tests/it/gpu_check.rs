//! `scripts/gpu-check.sh`, the one-shot check for the first GPU, runs its CPU dry run (the same
//! steps, tiny shapes, `--device cpu`, the backward comparing composed with fused kernels) to
//! the end with every step passing, reports a failing step without stopping, and never builds;
//! and `scripts/bench/study_cost.py`, which prices the GPU study at the rates the bench measures.

use std::path::Path;
use std::process::Command;

use crate::util::{python, root};

/// The dry run with `--lab LAB`, and `$OUT` set to `out` when given.
fn gpu_check(lab: &str, out: Option<&Path>) -> (i32, String, String) {
    let mut c = Command::new("bash");
    c.arg(root().join("scripts/gpu-check.sh"))
        .args(["--dry-run", "--lab", lab])
        .env_remove("OUT");
    if let Some(o) = out {
        c.env("OUT", o);
    }
    let out = c.output().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap(),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn the_dry_run_passes_every_step() {
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = gpu_check(env!("CARGO_BIN_EXE_lab"), Some(out.path()));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .collect();
    // The header; libraries, binary, kernel-check, two first-step losses, the backward's
    // loss, gradient norm and updates, three throughputs (two bf16, one fp32), resume, decode,
    // the launches of each kernel set (none on the CPU), and K = 1 and 2 packed runs.
    let steps = [
        "0", "1", "1", "2", "2", "3", "3", "3", "4", "4", "4", "5", "6", "7", "7", "8", "8",
    ];
    assert_eq!(rows.len(), 1 + steps.len(), "{stdout}");
    for (row, step) in rows[1..].iter().zip(steps) {
        assert!(row.starts_with(&format!("| {step} ")), "{row}");
        assert!(row.contains("| ok |"), "{row}");
    }
    for needle in [
        "ldd: nothing missing",
        "| 1 kernel-check | ok | 38 of 38 comparisons within tolerance on cpu",
        "3 backward, composed kernels, train/loss, 5 steps",
        "3 backward, composed kernels, train/grad_norm, 5 steps",
        "worst update",
        "tokens/s, MFU",
        "| 4 20 steps tiny, fp32, composed | ok |",
        "generated tokens/s",
        "| 8 2 × tiny at once",
        "| 7 launches, tiny, fused | ok | 0 a step at L = 1 (0 kernels, 0 cuBLAS products)",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
    // With $OUT set, the table and every step's log come back under it.
    let dir = out.path().join("gpu-check");
    let table = std::fs::read_to_string(dir.join("table.md")).unwrap();
    assert!(
        table.contains("| 3 backward, composed kernels, updates after 5 steps | ok |"),
        "{table}"
    );
    for log in [
        "ldd.log",
        "kernel-check.md",
        "s2-cpu.log",
        "s3-dev-composed.log",
        "s8-tiny-k2-2.log",
        "s7-composed-L2-s4.txt",
        "launches-fused.md",
    ] {
        assert!(dir.join(log).exists(), "{log}");
    }
}

#[test]
fn a_missing_binary_is_one_line_and_nothing_is_built() {
    let (code, stdout, stderr) = gpu_check("/nonexistent/lab-cuda", None);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("| 1 binary | FAILED |"), "{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("step 1 FAILED"))
        .unwrap();
    assert!(
        line.contains("scripts/build-cuda.sh") && line.contains("carry dist/"),
        "{line}"
    );
}

#[test]
fn failing_steps_are_reported_counted_and_passed_over() {
    // No binary that runs: the one step that everything needs fails, and the script stops.
    let (code, stdout, stderr) = gpu_check("/bin/false", None);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("| 1 binary | FAILED |"), "{stdout}");
    assert!(stderr.contains("step 1 FAILED"), "{stderr}");
    // A binary that cannot train in bf16: steps 2 (bf16) and 4's bf16 runs fail with their
    // errors, then 4's fp32 run and steps 3, 5, 7 and 8 still run and pass, and step 6 fails for
    // want of step 4's bf16 model.
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("lab");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = train.precision=bf16 ] && \
             {{ echo 'error: no bf16 here' >&2; exit 2; }}; done\nexec '{}' \"$@\"\n",
            env!("CARGO_BIN_EXE_lab")
        ),
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&fake).status().unwrap();
    let (code, stdout, stderr) = gpu_check(fake.to_str().unwrap(), None);
    assert_eq!(code, 4, "{stdout}\n{stderr}");
    for (step, result) in [
        ("| 1 binary |", "ok"),
        ("| 1 kernel-check |", "ok"),
        ("| 2 first-step loss, fp32 |", "ok"),
        ("| 2 first-step loss, bf16 |", "FAILED"),
        (
            "| 3 backward, composed kernels, updates after 5 steps |",
            "ok",
        ),
        ("| 4 20 steps tiny, fp32, composed |", "ok"),
        ("| 5 cpu checkpoint resumed on cpu |", "ok"),
        ("| 6 greedy decode", "FAILED"),
        ("| 7 launches, tiny, composed |", "ok"),
        ("| 8 2 × tiny at once", "ok"),
    ] {
        let row = stdout.lines().find(|l| l.starts_with(step)).unwrap();
        assert!(row.contains(&format!("| {result} |")), "{row}");
    }
    assert_eq!(stdout.matches("| FAILED |").count(), 4, "{stdout}");
    assert!(
        stderr.contains("step 4 FAILED") && stderr.contains("no bf16 here"),
        "{stderr}"
    );
}

/// study_cost.py at the rates of results/gpu/2026-12-04.md gives that record's hand-made
/// figures (44, 67 and 143 GPU-hours, about 250 in all); a bucket not measured gets no total;
/// a rate that is not a positive number is refused with one line.
#[test]
fn the_study_cost_prices_each_bucket_at_its_configs_rate() {
    let run = |rates: &[&str]| {
        let mut py = python()?;
        let out = py
            .arg(root().join("scripts/bench/study_cost.py"))
            .arg(root().join("results/gpu/study-flops.csv"))
            .args(rates)
            .output()
            .unwrap();
        Some((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        ))
    };
    let Some((ok, text, err)) = run(&["1m-L4=8.7e11", "10m-L6=3.0e12", "100m-L8=1.09e13"]) else {
        return;
    };
    assert!(ok, "{err}");
    for line in [
        "| 1M | 1.39e+17 | 1m-L4 | 8.7e+11 | 44.4 |",
        "| 10M | 7.19e+17 | 10m-L6 | 3e+12 | 66.6 |",
        "| 100M | 5.59e+18 | 100m-L8 | 1.09e+13 | 142.5 |",
        "the study: 253.4 GPU-hours, one run a GPU",
    ] {
        assert!(text.lines().any(|l| l == line), "{line}:\n{text}");
    }
    let (ok, text, _) = run(&["1m-L4=8.7e11"]).unwrap();
    assert!(ok);
    assert!(
        text.contains("| 10M | 7.19e+17 | 10m-L6 | not measured | |"),
        "{text}"
    );
    assert!(text.contains("the study: no total"), "{text}");
    for bad in ["1m-L4=fast", "1m-L4=0", "1m-L4"] {
        let (ok, _, err) = run(&[bad]).unwrap();
        assert!(!ok, "{bad} accepted");
        assert_eq!(err.trim().lines().count(), 1, "{bad}: {err}");
    }
}
