//! The shipped configs and sweep specs, built into the binary: a user's own command
//! (`lab train --config 100m-L8.toml`) from an empty directory outside the repository, the
//! listing, writing one out, a file winning over a shipped name, and a bad name.

use crate::util::{lab, root, run_expect};

/// The `name = …` and `n_embd = …` lines of a run's saved config.
fn saved(dir: &std::path::Path, run: &str) -> String {
    std::fs::read_to_string(dir.join("checkpoints").join(run).join("config.toml")).unwrap()
}

#[test]
fn an_installed_lab_trains_shipped_configs_by_name_from_anywhere() {
    let tmp = tempfile::tempdir().unwrap();
    run_expect(
        lab(tmp.path()).args(["train", "--config", "tiny", "--max-steps", "1"]),
        0,
    );
    let cfg = saved(tmp.path(), "tiny");
    let shipped = std::fs::read_to_string(root().join("configs/tiny.toml")).unwrap();
    let want: lab::config::Config =
        lab::config::Config::from_toml(&shipped, "tiny.toml".as_ref(), "tiny").unwrap();
    assert_eq!(cfg, want.to_toml(), "the run keeps the resolved config");
    run_expect(
        lab(tmp.path()).args(["train", "--config", "100m-L8.toml", "--max-steps", "1"]),
        0,
    );
    assert!(saved(tmp.path(), "100m-L8").contains("n_embd = 1024"));
}

#[test]
fn a_file_wins_over_a_shipped_name() {
    let tmp = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("configs/tiny.toml"))
        .unwrap()
        .replace("[model]", "[model]\nn_embd = 32\nn_head = 2")
        .replace("n_embd = 128", "")
        .replace("n_head = 4", "");
    std::fs::write(tmp.path().join("tiny.toml"), text).unwrap();
    run_expect(
        lab(tmp.path()).args(["train", "--config", "tiny.toml", "--max-steps", "1"]),
        0,
    );
    assert!(
        saved(tmp.path(), "tiny").contains("n_embd = 32"),
        "{}",
        saved(tmp.path(), "tiny")
    );
}

#[test]
fn configs_lists_prints_and_writes_out_every_shipped_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_expect(lab(tmp.path()).arg("configs"), 0);
    let listing = String::from_utf8_lossy(&out.stdout).to_string();
    for (dir, kind) in [("configs", "config"), ("sweeps", "sweep")] {
        for e in std::fs::read_dir(root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            let first = std::fs::read_to_string(&p)
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix('#').map(|c| c.trim().to_string()))
                .unwrap_or_default();
            assert!(
                listing.lines().any(|l| l.starts_with(kind)
                    && l.contains(&format!(" {name} "))
                    && l.ends_with(&first)),
                "{kind} {name} in\n{listing}"
            );
        }
    }
    let out = run_expect(lab(tmp.path()).args(["configs", "100m-L8"]), 0);
    assert_eq!(
        out.stdout,
        std::fs::read(root().join("configs/100m-L8.toml")).unwrap()
    );
    // A spec written out works in any directory: its base resolves by name.
    run_expect(lab(tmp.path()).args(["configs", "smoke", "--out", "."]), 0);
    let again = run_expect(lab(tmp.path()).args(["configs", "smoke", "--out", "."]), 2);
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    run_expect(
        lab(tmp.path()).args(["configs", "smoke", "--out", ".", "--force"]),
        0,
    );
    let plan = run_expect(lab(tmp.path()).args(["sweep", "plan", "smoke.toml"]), 0);
    assert!(String::from_utf8_lossy(&plan.stdout).contains("4 runs"));
}

#[test]
fn a_bad_name_exits_2_with_the_shipped_names() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        &["train", "--config", "100m-L9.toml", "--max-steps", "1"][..],
        &["configs", "100m-L9"][..],
    ] {
        let out = run_expect(lab(tmp.path()).args(args), 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("100m-L9") && err.contains("100m-L8") && err.contains("tiny"),
            "{err}"
        );
    }
    assert!(!tmp.path().join("checkpoints").exists(), "nothing written");
}
