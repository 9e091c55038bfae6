//! `scripts/reproduce.sh`: a committed run trained again for its first steps gives its
//! committed training lines bit for bit; a changed figure is named with its step and counted
//! in the exit status; bad arguments are one line and exit 2.

use std::path::Path;
use std::process::{Command, Output};

use crate::util::{lab, root, run_expect};

fn reproduce(results: &Path, steps: &str, prefixes: &[&str]) -> Output {
    Command::new("bash")
        .arg(root().join("scripts/reproduce.sh"))
        .arg(results)
        .args(prefixes)
        .env("LAB", env!("CARGO_BIN_EXE_lab"))
        .env("REPRODUCE_STEPS", steps)
        .output()
        .unwrap()
}

#[test]
fn a_run_trained_again_matches_its_committed_lines_and_a_changed_one_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let results = tmp.path().join("study");
    // Two "committed" runs: tiny, 30 steps, a training line every 10.
    for name in ["a", "b"] {
        run_expect(
            lab(tmp.path())
                .args(["train", "--config"])
                .arg(root().join("configs/tiny.toml"))
                .arg("--out")
                .arg(results.join("runs").join(name))
                .args(["--max-steps", "30", "--set", "train.log_every=10"]),
            0,
        );
    }
    let out = reproduce(&results, "20", &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("a (trained at ?): same at steps 10 20"),
        "{text}"
    );
    assert_eq!(text.lines().count(), 2, "{text}");

    // One figure of run b moved by one unit in the last place: b differs at step 20.
    let metrics = results.join("runs/b/metrics.jsonl");
    let changed: Vec<String> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            if v["step"] == 20 && v.get("train/loss").is_some() {
                let x = v["train/loss"].as_f64().unwrap();
                v["train/loss"] = f64::from_bits(x.to_bits() + 1).into();
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&metrics, changed.join("\n") + "\n").unwrap();
    let out = reproduce(&results, "20", &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("b (trained at ?): differs at step 20: train/loss"),
        "{text}"
    );
    // A prefix picks the runs.
    let out = reproduce(&results, "20", &["a"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);

    for (dir, steps, why) in [
        (tmp.path().join("none"), "20", "no such directory"),
        (results.clone(), "x", "is not a positive integer"),
    ] {
        let out = reproduce(&dir, steps, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(why), "{err}");
    }
}
