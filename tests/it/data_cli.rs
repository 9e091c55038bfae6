//! `lab data` and `lab inspect` through the real binary: byte determinism across runs and
//! thread counts, reuse and --force, and a clear one-line error for each kind of bad input.

use std::path::Path;

use crate::util::{dir_bytes, lab, root, run_expect, tiny_data, tiny_text, write_config};

/// `timing.json` holds wall times; every other file must be byte-identical.
const VOLATILE: &[&str] = &["timing.json"];

#[test]
fn same_config_same_bytes_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tiny_data(tmp.path(), "a");
    let b = tiny_data(tmp.path(), "b");
    let cfg = root().join("configs/tiny.toml");
    for (name, threads) in [("t1", "1"), ("t2", "2")] {
        run_expect(
            lab(tmp.path())
                .env("RAYON_NUM_THREADS", threads)
                .args(["data", "--config"])
                .arg(&cfg)
                .arg("--out")
                .arg(tmp.path().join(name)),
            0,
        );
    }
    let reference = dir_bytes(&a, VOLATILE);
    let names: Vec<&str> = reference.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "eval.jsonl",
            "graph.txt",
            "holdout.txt",
            "manifest.json",
            "tokenizer.json",
            "train.txt"
        ]
    );
    for other in [b, tmp.path().join("t1"), tmp.path().join("t2")] {
        assert!(
            dir_bytes(&other, VOLATILE) == reference,
            "{} differs",
            other.display()
        );
    }
}

#[test]
fn different_seed_different_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tiny_data(tmp.path(), "a");
    let text = tiny_text().replace("[graph]", "[graph]\nseed = 7");
    let cfg = write_config(tmp.path(), "seed7.toml", &text);
    let b = tmp.path().join("b");
    run_expect(
        lab(tmp.path())
            .args(["data", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(&b),
        0,
    );
    for f in ["graph.txt", "eval.jsonl", "train.txt"] {
        assert_ne!(
            std::fs::read(a.join(f)).unwrap(),
            std::fs::read(b.join(f)).unwrap(),
            "{f}"
        );
    }
}

#[test]
fn reuse_refuse_and_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny_data(tmp.path(), "d");
    let before = std::fs::metadata(dir.join("train.txt"))
        .unwrap()
        .modified()
        .unwrap();
    let out = run_expect(
        lab(tmp.path())
            .args(["data", "--config"])
            .arg(root().join("configs/tiny.toml"))
            .arg("--out")
            .arg(&dir),
        0,
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("reused"));
    let after = std::fs::metadata(dir.join("train.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "a reused directory is not rewritten");

    let other = write_config(
        tmp.path(),
        "other.toml",
        &tiny_text().replace("[graph]", "[graph]\nseed = 3"),
    );
    let out = run_expect(
        lab(tmp.path())
            .args(["data", "--config"])
            .arg(&other)
            .arg("--out")
            .arg(&dir),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("built from a different config") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let out = run_expect(
        lab(tmp.path())
            .args(["data", "--force", "--config"])
            .arg(&other)
            .arg("--out")
            .arg(&dir),
        0,
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("built"));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["seeds"]["world"], 3);
    assert_only(tmp.path(), &["d", "other.toml"]);
}

#[test]
fn default_out_dir_is_name_and_hash() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "tiny.toml", &tiny_text());
    run_expect(lab(tmp.path()).args(["data", "--config"]).arg(&cfg), 0);
    let entries: Vec<String> = std::fs::read_dir(tmp.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1);
    assert!(
        entries[0].starts_with("tiny-") && entries[0].len() == "tiny-".len() + 12,
        "{entries:?}"
    );
}

#[test]
fn inspect_summarises_and_checks_holdout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny_data(tmp.path(), "d");
    let out = run_expect(lab(tmp.path()).arg("inspect").arg(&dir), 0);
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "graph: 676 nodes, 2028 edges",
        "degree histogram",
        "labels (share of edges against w)",
        "eval: 400 queries over 80 pairs",
        "path length (hops, examples)",
        "rejections:",
        "holdout check: ok (0 training examples",
        "eval pairs are edges;",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
    }
}

/// Assert that `dir` holds exactly `names`: no staging directory or partial output is left.
fn assert_only(dir: &Path, names: &[&str]) {
    let mut got: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    let mut want: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
}

/// Run `lab data` on a config and check the error contract: exit 2, one line, naming the file
/// and the field, nothing written.
fn bad_config(text: &str, field: &str, reason: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "bad.toml", text);
    let out = run_expect(
        lab(tmp.path())
            .args(["data", "--config"])
            .arg(&cfg)
            .arg("--out")
            .arg(tmp.path().join("out")),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains("bad.toml"), "names the file: {err}");
    assert!(err.contains(field), "names `{field}`: {err}");
    assert!(err.contains(reason), "says `{reason}`: {err}");
    assert_only(tmp.path(), &["bad.toml"]);
}

#[test]
fn bad_malformed_toml() {
    bad_config("[graph\nnode_len = 2\n", "bad.toml:1:", "malformed TOML");
}

#[test]
fn bad_unknown_key() {
    bad_config(
        "[graph]\nnode_len = 2\nnode_length = 3\n",
        "graph.node_length",
        "unknown field",
    );
}

#[test]
fn bad_wrong_type() {
    bad_config("[data]\np_inc = \"half\"\n", "data.p_inc", "invalid type");
}

#[test]
fn bad_node_len() {
    bad_config(
        "[graph]\nnode_len = 5\n",
        "graph.node_len",
        "must be in 1..=4, got 5",
    );
    bad_config(
        "[graph]\nnode_len = 0\n",
        "graph.node_len",
        "must be in 1..=4, got 0",
    );
}

#[test]
fn bad_n_labels() {
    bad_config(
        "[graph]\nn_labels = 27\n",
        "graph.n_labels",
        "must be in 1..=26, got 27",
    );
    bad_config(
        "[graph]\nn_labels = 0\n",
        "graph.n_labels",
        "must be in 1..=26, got 0",
    );
}

#[test]
fn bad_avg_degree() {
    bad_config(
        "[graph]\nnode_len = 1\navg_degree = 30.0\n",
        "graph.avg_degree",
        "impossible for 26 nodes",
    );
    bad_config(
        "[graph]\navg_degree = -1.0\n",
        "graph.avg_degree",
        "must be a positive number",
    );
}

#[test]
fn bad_p_inc() {
    bad_config(
        "[data]\np_inc = 1.5\n",
        "data.p_inc",
        "must be in [0, 1], got 1.5",
    );
}

#[test]
fn bad_eval_hop_too_far_is_an_error_not_a_hang() {
    bad_config(
        "[graph]\nnode_len = 2\n[data]\neval_hops = [1, 40]\nbase_paths_per_hop = 5\n[model]\nn_positions = 128\n",
        "data.eval_hops",
        "hop 40: only 0 node pairs lie at distance 40, need 5",
    );
}

#[test]
fn bad_unwritable_out_dir() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("file"), "not a directory").unwrap();
    let out = run_expect(
        lab(tmp.path())
            .args(["data", "--config"])
            .arg(root().join("configs/tiny.toml"))
            .arg("--out")
            .arg(tmp.path().join("file/out")),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("file") && err.contains("cannot create directory"),
        "{err}"
    );
    assert_only(tmp.path(), &["file"]);
}

#[test]
fn bad_missing_config_file() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_expect(lab(tmp.path()).args(["data", "--config", "nope.toml"]), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope.toml: cannot read"), "{err}");
}

#[test]
fn bad_n_nodes() {
    bad_config(
        "[graph]\nnode_len = 2\nn_nodes = 677\n",
        "graph.n_nodes",
        "must be in 2..=676",
    );
    bad_config(
        "[graph]\nn_nodes = 1\n",
        "graph.n_nodes",
        "must be in 2..=17576",
    );
    bad_config(
        "[graph]\nedge_labels = \"zipf\"\n",
        "graph.edge_labels",
        "unknown variant",
    );
}

#[test]
fn bad_eval_every() {
    bad_config("[eval]\nevery = 0\n", "eval.every", "must be at least 1");
}
