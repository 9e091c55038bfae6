//! The reproduction study regenerates from committed runs alone: on the committed fixture
//! (`tests/fixtures/study`, made by `scripts/make-study-fixture.sh`), `lab sweep collect` gives
//! the committed results.csv, `lab report` the committed findings, and every answer file
//! re-scores (`lab sweep rescore`) to its row of results.csv.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::util::{lab, root, run_expect};

/// A copy of the fixture's committed files (specs, base config, runs, results, findings).
fn fixture_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = root().join("tests/fixtures/study");
    let out = Command::new("cp")
        .arg("-r")
        .arg(src.join("."))
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    tmp
}

/// A findings.json, parsed.
fn findings(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn figures_and_findings_regenerate_from_the_committed_runs() {
    let tmp = fixture_copy();
    let dir = tmp.path();
    std::fs::remove_file(dir.join("results.csv")).unwrap();
    std::fs::remove_file(dir.join("findings.json")).unwrap();
    run_expect(lab(dir).args(["sweep", "collect", "."]), 0);
    let committed = root().join("tests/fixtures/study");
    assert_eq!(
        std::fs::read_to_string(dir.join("results.csv")).unwrap(),
        std::fs::read_to_string(committed.join("results.csv")).unwrap(),
        "results.csv differs from the committed one"
    );
    run_expect(lab(dir).args(["report", ".", "--out", "."]), 0);
    let (doc, committed_doc) = (
        findings(&dir.join("findings.json")),
        findings(&committed.join("findings.json")),
    );
    let got = &doc["claims"];
    assert_eq!(got, &committed_doc["claims"]);
    // Every claim has a verdict, a test and the numbers behind it.
    let got = got.as_array().unwrap();
    assert_eq!(got.len(), 5);
    for c in got {
        let v = c["verdict"].as_str().unwrap();
        assert!(
            ["reproduced", "not_reproduced", "inconclusive", "not_tested"].contains(&v),
            "{c}"
        );
        assert!(!c["test"].as_str().unwrap().is_empty());
        assert!(c["numbers"].is_array() || c["numbers"].is_object(), "{c}");
    }
    // The depth test is also given with the LM head counted, beside its verdict.
    for b in got[1]["numbers"].as_array().unwrap() {
        assert_eq!(b["compute_axis"], "flops", "{b}");
        assert_eq!(b["with_head"]["compute_axis"], "flops_with_head", "{b}");
        assert!(b["with_head"]["p_claimed"].is_number(), "{b}");
    }
    // The fixture's two depth buckets (20k, 200k) are below the paper's (1M, 10M, 100M): the
    // claims they test are not voted, their cells said beside; its width group votes.
    for c in got {
        let beside = c["statistic"].as_str().unwrap().contains("not voted");
        assert_eq!(c["claim"] != 3, c["verdict"] == "not_tested", "{c}");
        assert_eq!(c["claim"] != 3, beside, "{c}");
    }
    for fig in [
        "depth_curve.svg",
        "depth_curve.png",
        "depth_curve.csv",
        "width_curve.svg",
        "tradeoff.csv",
        "errors_rollup.csv",
        "depth_20k_best_head.csv",
        "report.md",
    ] {
        assert!(dir.join(fig).exists(), "{fig} missing");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("## The paper's claims"), "{md}");
    // The hop × depth breakdown regenerates too, with its figure per depth bucket.
    let hops = &doc["hop_depth"];
    assert_eq!(hops, &committed_doc["hop_depth"]);
    assert_eq!(hops["buckets"].as_array().unwrap().len(), 2, "{hops}");
    assert!(dir.join("hop_depth_20k.csv").exists());
}

/// With an `arms.toml`, each arm's verdicts read its own sweeps (and the runs it borrows), never
/// a sweep of no arm: the first arm's claims equal those of a results.csv holding only its rows.
#[test]
fn arms_give_each_its_own_verdicts_and_leave_the_rest_out() {
    let tmp = fixture_copy();
    let dir = tmp.path();
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    // The depth sweep's rows alone, in a directory without arms.
    let alone = dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    let depth_rows: String = csv
        .lines()
        .enumerate()
        .filter(|(i, l)| *i == 0 || l.starts_with("fixture-depth,"))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    std::fs::write(alone.join("results.csv"), depth_rows).unwrap();
    run_expect(lab(dir).args(["report", "alone", "--out", "alone"]), 0);
    let alone_claims = findings(&alone.join("findings.json"))["claims"].clone();

    std::fs::write(
        dir.join("arms.toml"),
        "[[arm]]\nname = \"depth\"\nsweeps = [\"fixture-depth\"]\n\n\
         [[arm]]\nname = \"later\"\nsweeps = [\"fixture-later\"]\n\
         borrow = [{ sweep = \"fixture-depth\", n_layer = [2] }]\n",
    )
    .unwrap();
    run_expect(lab(dir).args(["report", ".", "--out", "."]), 0);
    let doc = findings(&dir.join("findings.json"));
    assert_eq!(doc["claims"], alone_claims);
    assert_eq!(doc["arm"]["name"], "depth");
    assert_eq!(doc["left_out"], serde_json::json!({"fixture-width": 20}));
    // An arm with borrowed runs only has no verdicts of its own yet.
    assert_eq!(doc["other_arms"][0]["rows"], 0);
    assert_eq!(doc["other_arms"][0]["claims"], serde_json::json!([]));
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("left out (in no arm): `fixture-width`, 20 rows"),
        "{md}"
    );
    assert!(md.contains("Arm `later`: none of its own runs yet"), "{md}");

    // Its own runs plus the borrowed ones: the width sweep (20 rows) and depth L = 2 (16).
    std::fs::write(
        dir.join("arms.toml"),
        "[[arm]]\nname = \"depth\"\nsweeps = [\"fixture-depth\"]\n\n\
         [[arm]]\nname = \"width\"\nsweeps = [\"fixture-width\"]\n\
         borrow = [{ sweep = \"fixture-depth\", n_layer = [2] }]\n",
    )
    .unwrap();
    run_expect(lab(dir).args(["report", ".", "--out", "."]), 0);
    let doc = findings(&dir.join("findings.json"));
    assert_eq!(doc["other_arms"][0]["rows"], 36);
    assert_eq!(doc["other_arms"][0]["claims"].as_array().unwrap().len(), 5);
    assert_eq!(doc["left_out"], serde_json::json!({}));
}

/// `lab sweep rescore DIR`.
fn rescore(dir: &Path) -> std::process::Output {
    lab(dir).args(["sweep", "rescore", "."]).output().unwrap()
}

#[test]
fn every_committed_answer_file_rescores_to_its_row_of_results_csv() {
    let tmp = fixture_copy();
    let out = rescore(tmp.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers: Vec<std::path::PathBuf> = std::fs::read_dir(tmp.path().join("runs"))
        .unwrap()
        .flat_map(|r| std::fs::read_dir(r.unwrap().path().join("eval")).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
        .collect();
    assert!(answers.len() > 20, "{}", answers.len());
    assert!(
        stdout.contains(&format!("{} answer files re-scored", answers.len()))
            && stdout.contains(" 0 within 1e-12 relative, 0 mismatches"),
        "{stdout}"
    );
    // And a changed answer is caught: the first answer of one file made empty.
    let text = lab::fsutil::read_text(&answers[0]).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    let mut line: Value = serde_json::from_str(first).unwrap();
    line["output"] = Value::String(String::new());
    let changed = format!("{line}\n{rest}");
    std::fs::write(
        &answers[0],
        lab::sweep::export::gzip(changed.as_bytes()).unwrap(),
    )
    .unwrap();
    let out = rescore(tmp.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("MISMATCH") && !stdout.contains(" 0 mismatches"),
        "{stdout}"
    );
}

/// On a fresh clone the committed runs have no run directory; `lab sweep status` still counts
/// them as done, and `lab sweep run` would skip them.
#[test]
fn exported_runs_are_done_without_their_run_directories() {
    let tmp = fixture_copy();
    for (spec, n) in [("depth.toml", 12), ("width.toml", 6)] {
        let out = run_expect(lab(tmp.path()).args(["sweep", "status", spec]), 0);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.trim_end().ends_with(&format!(": {n} done")), "{text}");
        assert!(text.contains("exported to"), "{text}");
    }
}

/// Every figure the report and collect read (`lab::tags`) is one a real run writes: the greedy
/// figures and collect's derived columns in the fixture's results.csv (made from real runs, and
/// regenerated above), the set figures and the training figures in a fresh run's metrics.
#[test]
fn every_tag_the_report_reads_is_one_a_run_writes() {
    use lab::tags;
    let csv = std::fs::read_to_string(root().join("tests/fixtures/study/results.csv")).unwrap();
    let columns: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for tag in [
        tags::CREATIVITY,
        tags::UTILITY,
        tags::NOVELTY_VALID,
        tags::VALID_RATE,
        tags::VAL_LOSS,
        tags::ROLLUP_HALLUCINATION,
        tags::ROLLUP_INVALID_PATH,
        &tags::rollup("format"),
        &tags::err("hallucinated_node"),
        &tags::err("wrong_end"),
        &tags::novelty_norm(1),
        &tags::novelty_pooled(1),
    ] {
        assert!(columns.contains(&tag), "{tag} is not a results.csv column");
    }
    let tmp = tempfile::tempdir().unwrap();
    let text =
        crate::train_cli::MICRO.replace("epochs = 2", "epochs = 1") + "[eval]\nsamples = 2\n";
    let cfg = crate::util::write_config(tmp.path(), "micro.toml", &text);
    run_expect(
        lab(tmp.path()).args(["train", "--config", cfg.to_str().unwrap(), "--out", "run"]),
        0,
    );
    let text = std::fs::read_to_string(tmp.path().join("run/metrics.jsonl")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let written = |tag: &str| lines.iter().any(|m| m.get(tag).is_some());
    for tag in [
        tags::TRAIN_LOSS,
        tags::TRAIN_LR,
        tags::TRAIN_GRAD_NORM,
        tags::TRAIN_TOKENS_PER_S,
        tags::TRAIN_FLOPS_PER_S,
        tags::TRAIN_MFU,
        tags::VAL_LOSS,
        tags::CREATIVITY,
        tags::SET_SCORE,
        tags::SET_COVERAGE,
        tags::SET_DISTINCT_VALID,
        tags::SET_REPEATS,
        tags::SET_MEAN_DISTANCE,
        tags::SET_NOVELTY_VALID,
        tags::SET_VALID_RATE,
        tags::SET_CREATIVITY,
        &tags::set_patience("0.9"),
    ] {
        assert!(written(tag), "{tag} is in no line of metrics.jsonl");
    }
}

/// On a fresh clone a Slurm submission skips the runs already exported to the results: with
/// one exported run removed, the job array holds that run alone; with none removed, nothing is
/// submitted.
#[test]
fn slurm_submits_only_runs_not_exported() {
    let tmp = fixture_copy();
    let args = [
        "sweep",
        "run",
        "depth.toml",
        "--backend",
        "slurm",
        "--dry-run",
    ];
    let out = run_expect(lab(tmp.path()).args(args), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("every run is DONE or exported"), "{text}");
    let runs = tmp.path().join("runs");
    let gone = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("fixture-depth-"))
        .min()
        .unwrap();
    std::fs::remove_dir_all(runs.join(&gone)).unwrap();
    let out = run_expect(lab(tmp.path()).args(args), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("for 1 runs in 1 array tasks (not submitted)"),
        "{text}"
    );
    let tasks = std::fs::read_to_string(
        tmp.path()
            .join("checkpoints/fixture-depth/slurm/001/tasks.txt"),
    )
    .unwrap();
    assert_eq!(tasks, format!("{gone}\n"));
}

/// `lab sweep slim` on the committed (slim) fixture changes no byte, and a results.csv the
/// runs do not give is refused, with the first differing line named and nothing changed.
#[test]
fn slim_keeps_a_slim_study_as_it_is_and_refuses_a_results_csv_the_runs_do_not_give() {
    let tmp = fixture_copy();
    let dir = tmp.path();
    let before = crate::util::dir_bytes(dir, &[]);
    let out = run_expect(lab(dir).args(["sweep", "slim", "."]), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("18 runs in the committed layout"), "{text}");
    assert_eq!(crate::util::dir_bytes(dir, &[]), before);
    let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let mut lines: Vec<String> = csv.lines().map(String::from).collect();
    lines[1] = lines[1].replacen(",138,", ",139,", 1);
    assert_ne!(lines[1], csv.lines().nth(1).unwrap());
    std::fs::write(dir.join("results.csv"), lines.join("\n") + "\n").unwrap();
    let changed = crate::util::dir_bytes(dir, &[]);
    let out = run_expect(lab(dir).args(["sweep", "slim", "."]), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("first at line 2") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(crate::util::dir_bytes(dir, &[]), changed);
}
