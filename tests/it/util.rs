//! Helpers shared by the integration tests: running the real `lab` binary in a temporary
//! directory, and reading what it wrote.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root, where `configs/` lives.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A `lab` command run from `dir`.
pub fn lab(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lab"));
    c.current_dir(dir);
    c
}

/// Run and return the output; panics with both streams if the exit code is not `code`.
pub fn run_expect(cmd: &mut Command, code: i32) -> Output {
    let out = cmd.output().expect("run lab");
    if out.status.code() != Some(code) {
        panic!(
            "expected exit {code}, got {:?}\nstdout:\n{}\nstderr:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out
}

/// Every file of a directory (recursively) with its bytes, sorted by relative path.
pub fn dir_bytes(dir: &Path, skip: &[&str]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                if !skip.contains(&rel.as_str()) {
                    out.push((rel, std::fs::read(&p).unwrap()));
                }
            }
        }
    }
    out.sort();
    out
}

/// Every line of a run's metrics.jsonl, without the figures that depend on wall-clock time
/// (`train/tokens_per_s`, `train/flops_per_s`, `train/mfu`).
pub fn metrics(run: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for k in ["train/tokens_per_s", "train/flops_per_s", "train/mfu"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v
        })
        .collect()
}

/// A config file written into `dir` from TOML text.
pub fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The tiny config's text.
pub fn tiny_text() -> String {
    std::fs::read_to_string(root().join("configs/tiny.toml")).unwrap()
}

/// Build the tiny dataset with the real binary into `dir/name` and return its path.
pub fn tiny_data(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    run_expect(
        lab(dir)
            .arg("data")
            .arg("--config")
            .arg(root().join("configs/tiny.toml"))
            .arg("--out")
            .arg(&out),
        0,
    );
    out
}

/// The upper tail P(X ≥ x) of a chi-square distribution with `k` degrees of freedom:
/// the regularized upper incomplete gamma Q(k/2, x/2) (Numerical Recipes, gammq).
pub fn chi_square_p(x: f64, k: f64) -> f64 {
    let (a, x) = (k / 2.0, x / 2.0);
    let ln_gamma_a = lab::report::stats::ln_gamma(a);
    if x < a + 1.0 {
        // Series for P, then Q = 1 − P.
        let (mut sum, mut del, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * (-x + a * x.ln() - ln_gamma_a).exp()
    } else {
        // Continued fraction for Q (Lentz).
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + a * x.ln() - ln_gamma_a).exp() * h
    }
}

#[test]
fn chi_square_tail_matches_tables() {
    // Tabulated critical values: P(X ≥ 3.841 | k=1) = 0.05, P(X ≥ 23.209 | k=10) = 0.01,
    // P(X ≥ 149.449 | k=100) = 0.001.
    assert!((chi_square_p(3.841, 1.0) - 0.05).abs() < 1e-4);
    assert!((chi_square_p(23.209, 10.0) - 0.01).abs() < 1e-4);
    assert!((chi_square_p(149.449, 100.0) - 0.001).abs() < 1e-5);
    assert!((chi_square_p(10.0, 10.0) - 0.440_493_7).abs() < 1e-6);
}

/// The Python of the cross-checks: `LAB_PYTHON` (scripts/test's venv), else `python3`. None,
/// with a note on stderr, when scripts/test found no Python at all (`LAB_SKIP_PYTHON`), so that
/// the run's last line can name what was not run.
pub fn python() -> Option<Command> {
    if let Ok(why) = std::env::var("LAB_SKIP_PYTHON") {
        eprintln!("NOT RUN: a Python cross-check: {why}");
        return None;
    }
    Some(Command::new(
        std::env::var("LAB_PYTHON").unwrap_or_else(|_| "python3".into()),
    ))
}

/// Whether the Slurm tests may run: false, with a note on stderr, when scripts/test found the
/// machine cannot host a cluster (`LAB_SKIP_SLURM`). Plain `cargo test` always tries.
pub fn slurm_allowed() -> bool {
    match std::env::var("LAB_SKIP_SLURM") {
        Ok(why) => {
            eprintln!("NOT RUN: a Slurm test: {why}");
            false
        }
        Err(_) => true,
    }
}

/// The step of a run directory's latest checkpoint (`trainer_state.json`), 0 without one.
pub fn checkpoint_step(run: &Path) -> u64 {
    std::fs::read_to_string(run.join("trainer_state.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["step"].as_u64())
        .unwrap_or(0)
}
