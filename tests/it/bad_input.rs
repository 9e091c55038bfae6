//! Bad input, counted: one table of broken inputs across every command (configs, data
//! directories, checkpoints, answer files, unknown runs, impossible sweep specs, overrides,
//! unwritable outputs). Each must exit 2 with one line naming the file or flag, the field and
//! the reason, and leave the workspace as it found it (no partial output). The scorer and the
//! parsers are property-tested on arbitrary bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use lab::config::Config;
use lab::dataset::example::{Example, parse_query};
use lab::eval::score::{Alphas, score};
use lab::graph::Graph;
use proptest::prelude::*;

use crate::train_cli::MICRO;
use crate::util::{lab, root, run_expect, write_config};

/// A workspace with the tiny config and sweep specs, a micro config, its data in `data/micro`
/// and a trained micro run in `run/`; made once, copied for every case.
fn template() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        for d in ["configs", "sweeps"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
            for f in ["configs/tiny.toml", "sweeps/smoke.toml"] {
                if f.starts_with(d) {
                    std::fs::copy(root().join(f), dir.join(f)).unwrap();
                }
            }
        }
        let cfg = write_config(&dir, "micro.toml", MICRO);
        run_expect(
            lab(&dir)
                .args(["data", "--config"])
                .arg(&cfg)
                .args(["--out", "data/micro"]),
            0,
        );
        run_expect(
            lab(&dir)
                .args(["train", "--device", "cpu", "--max-steps", "12", "--config"])
                .arg(&cfg)
                .args(["--out", "run"]),
            0,
        );
        std::fs::write(
            dir.join("answers.jsonl"),
            "{\"id\": 0, \"output\": \"AA a AB\"}\n",
        )
        .unwrap();
        std::fs::write(dir.join("file"), "not a directory\n").unwrap();
        dir
    })
}

/// Every file under `dir` with its bytes, except the data directories `lab train` may build
/// (`data/`, outside the template's own) and the `FAILED` marker a failed trainer leaves.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            if (rel.starts_with("data/") && !rel.starts_with("data/micro"))
                || rel.ends_with("/FAILED")
            {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// One bad input: a change to the workspace, the command, and what its one line must say.
struct Case {
    name: &'static str,
    setup: fn(&Path),
    args: &'static [&'static str],
    needles: &'static [&'static str],
}

fn nothing(_: &Path) {}

fn config(dir: &Path, text: &str) {
    std::fs::write(dir.join("bad.toml"), text).unwrap();
}

fn spec(dir: &Path, body: &str) {
    std::fs::write(
        dir.join("sweeps/bad.toml"),
        format!("name = \"bad\"\nbase = \"../configs/tiny.toml\"\n{body}"),
    )
    .unwrap();
}

fn edit(dir: &Path, file: &str, f: impl Fn(Vec<u8>) -> Vec<u8>) {
    let p = std::fs::canonicalize(dir.join(file)).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, f(bytes)).unwrap();
}

const CASES: &[Case] = &[
    // Configs.
    Case {
        name: "malformed TOML",
        setup: |d| config(d, "[graph\nnode_len = 2\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml:1:", "malformed TOML"],
    },
    Case {
        name: "unknown section",
        setup: |d| config(d, "[grahp]\nnode_len = 2\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "grahp", "unknown field"],
    },
    Case {
        name: "unknown key",
        setup: |d| config(d, "[graph]\nnode_length = 2\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.node_length", "unknown field"],
    },
    Case {
        name: "wrong type",
        setup: |d| config(d, "[data]\np_inc = \"half\"\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "data.p_inc", "invalid type"],
    },
    Case {
        name: "node_len out of range",
        setup: |d| config(d, "[graph]\nnode_len = 5\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.node_len", "1..=4"],
    },
    Case {
        name: "no labels",
        setup: |d| config(d, "[graph]\nn_labels = 0\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.n_labels", "1..=26"],
    },
    Case {
        name: "impossible degree",
        setup: |d| config(d, "[graph]\nnode_len = 1\navg_degree = 30.0\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.avg_degree", "impossible"],
    },
    Case {
        name: "too few nodes",
        setup: |d| config(d, "[graph]\nnode_len = 2\nn_nodes = 1\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.n_nodes", "2..=676"],
    },
    Case {
        name: "unknown edge label draw",
        setup: |d| config(d, "[graph]\nedge_labels = \"zipf\"\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "graph.edge_labels", "unknown variant"],
    },
    Case {
        name: "eval never",
        setup: |d| config(d, "[eval]\nevery = 0\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "eval.every", "at least 1"],
    },
    Case {
        name: "a zero decode budget",
        setup: |d| config(d, "[eval]\nmax_new_tokens = 0\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &["bad.toml", "eval.max_new_tokens", "at least 1"],
    },
    Case {
        name: "a final budget past the model's positions",
        setup: |d| config(d, "[eval]\nfinal_budgets = [44, 200]\n"),
        args: &["data", "--config", "bad.toml"],
        needles: &[
            "bad.toml",
            "eval.final_budgets",
            "200 tokens",
            "model.n_positions = 64",
        ],
    },
    Case {
        name: "zero learning rate",
        setup: |d| config(d, "[train]\nlr = 0.0\n"),
        args: &["train", "--config", "bad.toml"],
        needles: &["bad.toml", "train.lr", "positive"],
    },
    Case {
        name: "heads do not divide width",
        setup: |d| config(d, "[model]\nn_embd = 100\nn_head = 3\n"),
        args: &["train", "--config", "bad.toml"],
        needles: &["bad.toml", "model.n_embd", "multiple of model.n_head"],
    },
    Case {
        name: "hash draw that is not epoch or once",
        setup: |d| config(d, "[train]\nhash_prefix = 4\nhash_draw = \"sometimes\"\n"),
        args: &["train", "--config", "bad.toml"],
        needles: &["bad.toml", "hash_draw", "sometimes"],
    },
    Case {
        name: "hash draw without a hash prefix",
        setup: |d| config(d, "[train]\nhash_draw = \"once\"\n"),
        args: &["train", "--config", "bad.toml"],
        needles: &["bad.toml", "train.hash_draw", "train.hash_prefix is 0"],
    },
    Case {
        name: "zero epochs",
        setup: |d| config(d, "[train]\nepochs = 0\n"),
        args: &["train", "--config", "bad.toml"],
        needles: &["bad.toml", "train.epochs", "at least 1"],
    },
    Case {
        name: "missing config",
        setup: nothing,
        args: &["data", "--config", "missing.toml"],
        needles: &["missing.toml", "cannot read"],
    },
    Case {
        name: "config is a directory",
        setup: nothing,
        args: &["train", "--config", "configs"],
        needles: &["configs", "cannot read"],
    },
    // Overrides.
    Case {
        name: "override of an unknown key",
        setup: nothing,
        args: &["train", "--config", "micro.toml", "--set", "train.lrr=1"],
        needles: &["--set train.lrr=1", "train.lrr", "unknown field"],
    },
    Case {
        name: "fused kernels in bf16",
        setup: nothing,
        args: &[
            "train",
            "--device",
            "cpu",
            "--config",
            "micro.toml",
            "--kernels",
            "fused",
            "--set",
            "train.precision=bf16",
        ],
        needles: &["--kernels fused", "fp32 only", "train.precision = bf16"],
    },
    Case {
        name: "override without a value",
        setup: nothing,
        args: &["data", "--config", "micro.toml", "--set", "train.lr"],
        needles: &["--set train.lr", "expected KEY=VALUE"],
    },
    Case {
        name: "override of the wrong type",
        setup: nothing,
        args: &["data", "--config", "micro.toml", "--set", "graph.seed=-1"],
        needles: &["graph.seed", "invalid value"],
    },
    Case {
        name: "override of a sweep axis",
        setup: nothing,
        args: &[
            "sweep",
            "plan",
            "sweeps/smoke.toml",
            "--set",
            "model.n_layer=3",
        ],
        needles: &["--set model.n_layer=3", "axis", "smoke.toml"],
    },
    // Data directories.
    Case {
        name: "missing data directory",
        setup: nothing,
        args: &["inspect", "nowhere"],
        needles: &["nowhere/manifest.json", "cannot read"],
    },
    Case {
        name: "corrupt manifest",
        setup: |d| edit(d, "data/micro/manifest.json", |_| b"{\"lab".to_vec()),
        args: &["inspect", "data/micro"],
        needles: &["data/micro/manifest.json", "not a lab manifest"],
    },
    Case {
        name: "corrupt graph line",
        setup: |d| {
            edit(d, "data/micro/graph.txt", |b| {
                [b"AA?AB\n".to_vec(), b].concat()
            })
        },
        args: &["inspect", "data/micro"],
        needles: &["graph.txt:1", "not an edge line"],
    },
    Case {
        name: "corrupt eval line",
        setup: |d| {
            edit(d, "data/micro/eval.jsonl", |b| {
                [b"{\"id\": \n".to_vec(), b].concat()
            })
        },
        args: &[
            "score",
            "--data",
            "data/micro",
            "--answers",
            "answers.jsonl",
        ],
        needles: &["eval.jsonl:1", "bad eval line"],
    },
    // Checkpoints and runs.
    Case {
        name: "unknown run",
        setup: nothing,
        args: &["eval", "--device", "cpu", "--run", "nosuchrun"],
        needles: &["nosuchrun", "cannot read"],
    },
    Case {
        name: "truncated model",
        setup: |d| edit(d, "run/model.safetensors", |b| b[..b.len() / 2].to_vec()),
        args: &["eval", "--device", "cpu", "--run", "run"],
        needles: &["model.safetensors", "not a readable safetensors file"],
    },
    Case {
        name: "corrupt run.json",
        setup: |d| edit(d, "run/run.json", |_| b"[]".to_vec()),
        args: &["eval", "--device", "cpu", "--run", "run"],
        needles: &["run/run.json", "not a run description"],
    },
    Case {
        name: "corrupt run config",
        setup: |d| edit(d, "run/config.toml", |_| b"[model\n".to_vec()),
        args: &["eval", "--device", "cpu", "--run", "run"],
        needles: &["run/config.toml", "malformed TOML"],
    },
    Case {
        name: "a decode budget past the model's positions",
        setup: nothing,
        args: &[
            "eval",
            "--device",
            "cpu",
            "--run",
            "run",
            "--max-new-tokens",
            "500",
        ],
        needles: &["--max-new-tokens", "500", "model.n_positions"],
    },
    Case {
        name: "epoch never evaluated",
        setup: nothing,
        args: &["eval", "--device", "cpu", "--run", "run", "--epoch", "99"],
        needles: &["run", "epoch-99"],
    },
    Case {
        name: "corrupt trainer state",
        setup: |d| {
            edit(d, "run/trainer_state.json", |_| {
                b"{\"step\": \"x\"}".to_vec()
            })
        },
        args: &[
            "train",
            "--device",
            "cpu",
            "--config",
            "micro.toml",
            "--out",
            "run",
            "--resume",
        ],
        needles: &["trainer_state.json"],
    },
    Case {
        name: "truncated optimizer state",
        setup: |d| {
            edit(d, "run/optimizer.safetensors", |b| {
                b[..b.len() / 3].to_vec()
            })
        },
        args: &[
            "train",
            "--device",
            "cpu",
            "--config",
            "micro.toml",
            "--out",
            "run",
            "--resume",
        ],
        needles: &["optimizer.safetensors", "not a readable safetensors file"],
    },
    Case {
        name: "resume without a checkpoint",
        setup: nothing,
        args: &[
            "train",
            "--device",
            "cpu",
            "--config",
            "micro.toml",
            "--out",
            "fresh",
            "--resume",
        ],
        needles: &["fresh", "no checkpoint to resume"],
    },
    Case {
        name: "query of an unknown node",
        setup: nothing,
        args: &["query", "--device", "cpu", "--run", "run", "AA QQQ [ ] [ ]"],
        needles: &["query", "QQQ"],
    },
    Case {
        name: "malformed query",
        setup: nothing,
        args: &["query", "--device", "cpu", "--run", "run", "AA AB [ a"],
        needles: &["query", "expected form"],
    },
    Case {
        name: "unknown device",
        setup: nothing,
        args: &["train", "--config", "micro.toml", "--device", "tpu"],
        needles: &["--device", "tpu"],
    },
    // Answer files.
    Case {
        name: "missing answers",
        setup: nothing,
        args: &["score", "--data", "data/micro", "--answers", "none.jsonl"],
        needles: &["none.jsonl", "cannot read"],
    },
    Case {
        name: "answers that are not gzip",
        setup: |d| std::fs::write(d.join("a.jsonl.gz"), "{}\n").unwrap(),
        args: &["score", "--data", "data/micro", "--answers", "a.jsonl.gz"],
        needles: &["a.jsonl.gz", "not gzipped UTF-8 text"],
    },
    Case {
        name: "answers that are not text",
        setup: |d| std::fs::write(d.join("a.jsonl"), [0xff, 0xfe, 0x00, 0x9f]).unwrap(),
        args: &["score", "--data", "data/micro", "--answers", "a.jsonl"],
        needles: &["a.jsonl", "not UTF-8 text"],
    },
    Case {
        name: "score weights of an unknown run",
        setup: nothing,
        args: &["score", "--run", "nosuchrun", "--answers", "answers.jsonl"],
        needles: &["nosuchrun", "cannot read"],
    },
    // Sweep specs.
    Case {
        name: "spec with an unknown section",
        setup: |d| spec(d, "[grid.model]\nn_layer = [1]\n[grdi]\n"),
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "unknown field `grdi`"],
    },
    Case {
        name: "spec with an empty axis",
        setup: |d| spec(d, "[grid.model]\nn_layer = []\n"),
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "grid.model.n_layer", "empty list"],
    },
    Case {
        name: "spec with no axis",
        setup: |d| spec(d, ""),
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "grid", "empty"],
    },
    Case {
        name: "spec with unequal zip lists",
        setup: |d| {
            spec(
                d,
                "[zip.model]\nn_embd = [32, 64]\n[zip.train]\nepochs = [1]\n",
            )
        },
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "zip.train.epochs", "same length"],
    },
    Case {
        name: "bucket rounding to zero",
        setup: |d| {
            spec(
                d,
                "[bucket]\ntarget = 1000000\nn_layer = [4]\nn_head = [4]\nround = 0\n",
            )
        },
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "bucket.round", "at least 1"],
    },
    Case {
        name: "bucket heads that divide nothing",
        setup: |d| {
            spec(
                d,
                "[bucket]\ntarget = 1000000\nn_layer = [4]\nn_head = [3, 7]\n",
            )
        },
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "bucket.n_head", "divides"],
    },
    Case {
        name: "bucket too deep for its budget",
        setup: |d| {
            spec(
                d,
                "[bucket]\ntarget = 100000\nn_layer = [64]\nn_head = [4]\n",
            )
        },
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &[
            "bad.toml",
            "bucket.n_layer",
            "smaller than every head count",
        ],
    },
    Case {
        name: "spec whose base is missing",
        setup: |d| {
            std::fs::write(
                d.join("sweeps/bad.toml"),
                "name = \"bad\"\nbase = \"../configs/none.toml\"\n[grid.train]\nseed = [1]\n",
            )
            .unwrap()
        },
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "base", "cannot read"],
    },
    Case {
        name: "spec with a bad run value",
        setup: |d| spec(d, "[grid.train]\nlr = [-1.0]\n"),
        args: &["sweep", "plan", "sweeps/bad.toml"],
        needles: &["bad.toml", "train.lr", "positive"],
    },
    Case {
        name: "export without results",
        setup: nothing,
        args: &["sweep", "export", "sweeps/smoke.toml"],
        needles: &["smoke.toml", "results", "not set"],
    },
    Case {
        name: "collect of a directory without runs",
        setup: |d| std::fs::create_dir_all(d.join("empty")).unwrap(),
        args: &["sweep", "collect", "empty"],
        needles: &["empty/runs", "cannot read"],
    },
    Case {
        name: "report without results",
        setup: |d| std::fs::create_dir_all(d.join("empty")).unwrap(),
        args: &["report", "empty"],
        needles: &["empty/results.csv", "no results.csv"],
    },
    Case {
        name: "report of an empty results.csv",
        setup: |d| std::fs::write(d.join("results.csv"), "sweep,run\n").unwrap(),
        args: &["report", "results.csv"],
        needles: &["results.csv", "no rows"],
    },
    Case {
        name: "arms.toml with an unknown field",
        setup: |d| {
            std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap();
            std::fs::write(
                d.join("arms.toml"),
                "[[arm]]\nname = \"a\"\nsweep = [\"s\"]\n",
            )
            .unwrap()
        },
        args: &["report", "results.csv"],
        needles: &["arms.toml", "unknown field", "sweep"],
    },
    Case {
        name: "arms.toml with two arms of one name",
        setup: |d| {
            std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap();
            let arm = "[[arm]]\nname = \"a\"\nsweeps = [\"s\"]\n";
            std::fs::write(d.join("arms.toml"), format!("{arm}{arm}")).unwrap()
        },
        args: &["report", "results.csv"],
        needles: &["arms.toml", "arm[1].name", "already arm[0]"],
    },
    Case {
        name: "arms.toml with an arm of no sweep",
        setup: |d| {
            std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap();
            std::fs::write(d.join("arms.toml"), "[[arm]]\nname = \"a\"\nsweeps = []\n").unwrap()
        },
        args: &["report", "results.csv"],
        needles: &["arms.toml", "arm[0].sweeps", "names no sweep"],
    },
    Case {
        name: "twins table without a second study",
        setup: |d| std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap(),
        args: &["report", "results.csv", "--table", "twins"],
        needles: &["--table twins", "needs --with"],
    },
    Case {
        name: "a second study for a table that reads one",
        setup: |d| std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap(),
        args: &[
            "report",
            "results.csv",
            "--table",
            "grid",
            "--with",
            "results.csv",
        ],
        needles: &["--with", "only --table twins"],
    },
    Case {
        name: "twins table with a second study without results",
        setup: |d| {
            std::fs::write(d.join("results.csv"), "sweep,run\ns,r\n").unwrap();
            std::fs::create_dir_all(d.join("empty")).unwrap()
        },
        args: &[
            "report",
            "results.csv",
            "--table",
            "twins",
            "--with",
            "empty",
        ],
        needles: &["empty/results.csv", "no results.csv"],
    },
    Case {
        name: "sbatch value with a newline",
        setup: nothing,
        args: &[
            "sweep",
            "run",
            "sweeps/smoke.toml",
            "--backend",
            "slurm",
            "--dry-run",
            "--partition",
            "a\nb",
        ],
        needles: &["--partition", "control character"],
    },
    // Unwritable outputs.
    Case {
        name: "data into a file",
        setup: nothing,
        args: &["data", "--config", "micro.toml", "--out", "file/data"],
        needles: &["file/data", "cannot"],
    },
    Case {
        name: "train into a file",
        setup: nothing,
        args: &[
            "train",
            "--device",
            "cpu",
            "--config",
            "micro.toml",
            "--out",
            "file/run",
        ],
        needles: &["file/run", "cannot create directory"],
    },
    Case {
        name: "scores into a file",
        setup: nothing,
        args: &[
            "score",
            "--data",
            "data/micro",
            "--answers",
            "answers.jsonl",
            "--out",
            "file/s.jsonl",
        ],
        needles: &["file", "cannot"],
    },
    Case {
        name: "report into a file",
        setup: |d| {
            std::fs::write(
                d.join("results.csv"),
                "sweep,run,bucket,epoch,flops,eval/creativity\ns,r,b,1,1e9,1.0\n",
            )
            .unwrap()
        },
        args: &["report", "results.csv", "--out", "file/report"],
        needles: &["file/report", "cannot create directory"],
    },
];

#[test]
fn every_bad_input_is_one_line_exit_2_and_leaves_nothing() {
    assert!(CASES.len() >= 40, "{} cases", CASES.len());
    let mut failures = Vec::new();
    for case in CASES {
        let tmp = tempfile::tempdir().unwrap();
        let ok = Command::new("cp")
            .arg("-a")
            .arg(template().join("."))
            .arg(tmp.path())
            .status()
            .unwrap();
        assert!(ok.success());
        (case.setup)(tmp.path());
        let before = snapshot(tmp.path());
        let out = lab(tmp.path()).args(case.args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.starts_with("training ") && !l.trim().is_empty())
            .collect();
        let mut why = Vec::new();
        if out.status.code() != Some(2) {
            why.push(format!("exit {:?}", out.status.code()));
        }
        if lines.len() != 1 {
            why.push(format!("{} lines", lines.len()));
        }
        for n in case.needles {
            if !err.contains(n) {
                why.push(format!("no `{n}`"));
            }
        }
        let after = snapshot(tmp.path());
        if after != before {
            let changed: Vec<&String> = after
                .keys()
                .chain(before.keys())
                .filter(|k| after.get(*k) != before.get(*k))
                .collect();
            why.push(format!("the workspace changed: {changed:?}"));
        }
        if !why.is_empty() {
            failures.push(format!("{}: {}: {err}", case.name, why.join(", ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn a_misspelt_lab_denormals_is_one_line_exit_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_expect(
        lab(dir.path())
            .env("LAB_DENORMALS", "kep")
            .args(["data", "--config"])
            .arg(root().join("configs/tiny.toml"))
            .args(["--out", "data"]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("LAB_DENORMALS") && err.contains("kep") && err.contains("keep"),
        "{err}"
    );
    assert!(!dir.path().join("data").exists());
    for good in ["keep", "flush"] {
        let out = run_expect(
            lab(dir.path())
                .env("LAB_DENORMALS", good)
                .args(["data", "--config"])
                .arg(root().join("configs/tiny.toml"))
                .args(["--out", good]),
            0,
        );
        assert!(dir.path().join(good).join("train.txt").exists(), "{out:?}");
    }
}

fn micro_graph() -> Graph {
    let cfg = Config::from_toml(MICRO, Path::new("micro.toml"), "micro").unwrap();
    Graph::generate(&cfg.graph, cfg.n_edges())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Arbitrary bytes, read as text the way the lab reads a file, never make the scorer or
    /// the query and example parsers panic: an answer gets exactly one classification.
    #[test]
    fn arbitrary_bytes_never_panic_the_scorer_or_parsers(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        static G: OnceLock<Graph> = OnceLock::new();
        let g = G.get_or_init(micro_graph);
        let text = String::from_utf8_lossy(&bytes);
        let q = parse_query(g, "AA AB [ a ] [ b ]").unwrap();
        for finished in [true, false] {
            let s = score(g, &q, None, &text, finished, &Alphas::default());
            prop_assert_eq!(s.valid, s.error.is_none());
        }
        let _ = parse_query(g, &text);
        let _ = Example::parse(g, &text);
    }
}

/// An answers file of arbitrary bytes is read, or refused with an error, never a panic.
#[test]
fn arbitrary_answer_files_never_panic_the_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = template();
    let data = lab::dataset::DataDir::open(&dir.join("data/micro")).unwrap();
    let queries = data.eval().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(500));
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..400), |bytes| {
            let p = tmp.path().join("a.jsonl");
            std::fs::write(&p, &bytes).unwrap();
            let _ = lab::eval::answers::read(&p, &queries, false);
            let _ = lab::eval::answers::read(&p, &queries, true);
            Ok(())
        })
        .unwrap();
}
