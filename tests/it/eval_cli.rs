//! Decoding and the evaluation commands through the real binary: the KV cache decodes exactly
//! what full recomputation decodes, and `lab eval`, `lab score` and `lab query` handle bad input
//! with clear errors while scoring every good line.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::{Device, Tensor};
use lab::dataset::example::prompt;
use lab::eval::decode::{Decode, Decoder, choose, sample_stream};
use lab::eval::{Run, Which, hash_stream};
use lab::model::{Gpt, Kernels};
use lab::tokenizer::EOS;

use crate::train_cli::MICRO;
use crate::util::{lab, run_expect, write_config};

/// One micro model trained for the whole test binary (2 epochs, a few seconds).
fn trained() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let cfg = write_config(&dir, "micro.toml", MICRO);
        run_expect(
            lab(&dir)
                .args(["train", "--device", "cpu", "--config"])
                .arg(&cfg)
                .args(["--out", "run"]),
            0,
        );
        dir
    })
}

/// Decode one prompt by recomputing the whole prefix at every step (no cache).
#[allow(clippy::too_many_arguments)]
fn recompute(
    model: &Gpt,
    prompt: &[u32],
    decode: Decode,
    seed: u64,
    id: u64,
    k: usize,
    n_tokens: usize,
    budget: usize,
) -> Vec<u32> {
    let mut rng = sample_stream(seed, id, k);
    let mut seq = prompt.to_vec();
    let mut out = Vec::new();
    for _ in 0..budget {
        let n = seq.len();
        let ids = Tensor::from_vec(seq.clone(), n, &Device::Cpu).unwrap();
        let pos = Tensor::from_vec((0..n as u32).collect::<Vec<_>>(), n, &Device::Cpu).unwrap();
        let h = model
            .hidden(&Tensor::cat(&[&ids, &pos], 0).unwrap(), &[n])
            .unwrap();
        let logits: Vec<f32> = model
            .logits(&h.narrow(0, n - 1, 1).unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let t = choose(&logits[..n_tokens], decode, &mut rng);
        if t == EOS {
            break;
        }
        out.push(t);
        seq.push(t);
    }
    out
}

#[test]
fn kv_cache_decodes_exactly_what_recomputation_decodes() {
    let run = Run::open(&trained().join("run"), Which::Last, &Device::Cpu).unwrap();
    let vocab = run.data.vocab();
    let queries = run.data.eval().unwrap();
    let prompts: Vec<Vec<u32>> = queries
        .iter()
        .map(|q| vocab.encode(&prompt(&run.data.graph, &q.query)))
        .collect();
    let ids: Vec<u64> = queries.iter().map(|q| q.id as u64).collect();
    let mut model = run.model;
    let n_tokens = vocab.n_tokens() as usize;
    let sample = Decode::Sample {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };
    for kernels in [Kernels::Fused, Kernels::Composed] {
        model.kernels = kernels;
        for (decode, samples) in [(Decode::Greedy, 1), (sample, 3)] {
            let d = Decoder {
                model: &model,
                n_tokens,
                budget: 14,
                batch_rows: 16,
                decode,
                samples,
                seed: 7,
            };
            let got = d.run(&prompts, &ids).unwrap();
            for (i, answers) in got.iter().enumerate() {
                for (k, a) in answers.iter().enumerate() {
                    let want = recompute(&model, &prompts[i], decode, 7, ids[i], k, n_tokens, 14);
                    assert_eq!(
                        a.tokens, want,
                        "{kernels:?} {decode:?}: query {} sample {k}",
                        ids[i]
                    );
                }
            }
        }
    }
}

/// A hash-conditioned evaluation decodes every answer after its own prefix, drawn from the
/// evaluation's hash stream: exactly what decoding `prefix + prompt` by hand gives.
#[test]
fn hash_conditioned_answers_each_follow_their_own_fresh_prefix() {
    let run = Run::open(&trained().join("run"), Which::Last, &Device::Cpu).unwrap();
    let vocab = run.data.vocab();
    let queries = &run.data.eval().unwrap()[..12];
    let mut s = lab::eval::Settings::greedy(&run.cfg);
    (s.hash_prefix, s.samples, s.seed) = (3, 2, 9);
    let got = lab::eval::evaluate(&run.model, &run.data, queries, &s).unwrap();
    assert_eq!(got.len(), queries.len());
    for (q, a) in queries.iter().zip(&got) {
        assert_eq!(a.answers.len(), 2);
        let prefix = |j: u64| vocab.hash_prefix(&mut hash_stream(9, (q.id as u64) << 16 | j), 3);
        assert_ne!(
            prefix(0),
            prefix(1),
            "query {}: one prefix per answer",
            q.id
        );
        for j in 0..2 {
            let mut row = prefix(j);
            assert!(row.iter().all(|&t| vocab.token(t).starts_with('#')));
            row.extend(vocab.encode(&prompt(&run.data.graph, &q.query)));
            let n_tokens = vocab.n_tokens() as usize;
            let want = recompute(
                &run.model,
                &row,
                Decode::Greedy,
                9,
                0,
                0,
                n_tokens,
                s.budget,
            );
            assert_eq!(
                a.answers[j as usize].output,
                vocab.decode(&want),
                "query {}",
                q.id
            );
        }
    }
}

#[test]
fn eval_writes_files_and_sampling_is_seeded() {
    let dir = trained();
    let out = run_expect(
        lab(dir).args(["eval", "--run", "run", "--device", "cpu", "--epoch", "2"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("run @ epoch-02") && text.contains("creativity"),
        "{text}"
    );
    let greedy = std::fs::read_to_string(dir.join("run/eval/epoch-02.jsonl")).unwrap();
    assert_eq!(greedy.lines().count(), 45);
    let sample = |seed: &str| {
        run_expect(
            lab(dir).args([
                "eval",
                "--run",
                "run",
                "--device",
                "cpu",
                "--samples",
                "4",
                "--seed",
                seed,
            ]),
            0,
        );
        let name = format!("run/eval/epoch-02.sample-k4-t1-topk0-topp1-seed{seed}.jsonl");
        std::fs::read_to_string(dir.join(name)).unwrap()
    };
    let (a, b, c) = (sample("5"), sample("5"), sample("6"));
    assert_eq!(a, b, "the same seed gives the same samples");
    assert_ne!(a, c, "another seed gives other samples");
    let first: serde_json::Value = serde_json::from_str(a.lines().next().unwrap()).unwrap();
    assert_eq!(first["samples"].as_array().unwrap().len(), 4);
    assert!(first["distinct_valid"].is_u64());
}

#[test]
fn score_reports_bad_lines_and_scores_the_rest() {
    let dir = trained();
    let data = lab::rundir::read_run_info(&dir.join("run"))
        .unwrap()
        .data_dir;
    let answers = dir.join("answers.jsonl");
    let d = lab::dataset::DataDir::open(&data).unwrap();
    let eval = d.eval().unwrap();
    let reference = |i: usize| lab::dataset::example::path_text(&d.graph, &eval[i].path);
    std::fs::write(
        &answers,
        format!(
            "{{\"id\": 0, \"output\": \"{}\"}}\nnot json\n{{\"id\": 999, \"output\": \"AA\"}}\n{{\"id\": 0, \"output\": \"x\"}}\n{{\"id\": 1, \"output\": \"garbage ] [ <eos>\"}}\n{{\"id\": 2, \"output\": 5}}\n",
            reference(0)
        ),
    )
    .unwrap();
    let out = run_expect(
        lab(dir)
            .args(["score", "--data"])
            .arg(&data)
            .arg("--answers")
            .arg(&answers),
        0,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "answers.jsonl:2: malformed JSON",
        "answers.jsonl:3: unknown id 999",
        "answers.jsonl:4: duplicate id 0",
        "answers.jsonl:6: `output` must be a string",
    ] {
        assert!(err.contains(needle), "missing `{needle}` in:\n{err}");
    }
    let scored = std::fs::read_to_string(dir.join("answers.scored.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = scored
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "the good lines, ids 0 and 1");
    assert_eq!(lines[0]["valid"], true);
    assert_eq!(lines[1]["error"], "parse_failure");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("answers.scored.summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["n"], 2);
    assert_eq!(summary["errors"]["parse_failure"], 1);
    assert_eq!(summary["valid_rate"], 0.5);
}

#[test]
fn score_prompts_writes_one_prompt_per_eval_query() {
    let dir = trained();
    let data = lab::rundir::read_run_info(&dir.join("run"))
        .unwrap()
        .data_dir;
    let out = run_expect(
        lab(dir).args(["score", "--prompts", "--data"]).arg(&data),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 45);
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(
        first["prompt"]
            .as_str()
            .unwrap()
            .contains("find a walk from")
    );
}

/// `lab eval --split tune` decodes and scores the tuning split's queries, in files of their own
/// (the eval set's answers are left as they were), byte for byte as training's evaluation did;
/// a run whose data has no tuning split gets a one-line error and exit code 2.
#[test]
fn eval_scores_the_tuning_split_in_files_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let text = MICRO.replace("[data]\n", "[data]\ntune_base_paths_per_hop = 3\n");
    let cfg = write_config(tmp.path(), "tune.toml", &text);
    run_expect(
        lab(tmp.path())
            .args(["train", "--device", "cpu", "--config"])
            .arg(&cfg)
            .args(["--out", "run"]),
        0,
    );
    let run = tmp.path().join("run");
    let greedy = std::fs::read(run.join("eval/epoch-02.jsonl")).unwrap();
    // Training already scored the tuning split at its evaluation; `lab eval --split tune` on
    // the checkpoint gives the same bytes (selection reads either).
    let during = [
        std::fs::read(run.join("eval/epoch-02.tune.jsonl")).unwrap(),
        std::fs::read(run.join("eval/epoch-02.tune.summary.json")).unwrap(),
    ];
    let logged = lab::train::metrics::read_lines(&run)
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|l| l.get("tune/creativity").and_then(|v| v.as_f64()))
        .expect("tune/creativity logged at the evaluation");
    std::fs::remove_file(run.join("eval/epoch-02.tune.jsonl")).unwrap();
    std::fs::remove_file(run.join("eval/epoch-02.tune.summary.json")).unwrap();
    let out = run_expect(
        lab(tmp.path()).args(["eval", "--run", "run", "--split", "tune", "--device", "cpu"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("epoch-02.tune.jsonl"), "{text}");
    let data =
        lab::dataset::DataDir::open(&lab::rundir::read_run_info(&run).unwrap().data_dir).unwrap();
    let (tune, eval) = (data.tune().unwrap().unwrap(), data.eval().unwrap());
    let answered: Vec<serde_json::Value> =
        std::fs::read_to_string(run.join("eval/epoch-02.tune.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    assert_eq!(answered.len(), tune.len());
    assert!(answered.iter().zip(&tune).all(|(a, q)| a["id"] == q.id));
    assert_ne!(
        tune.len(),
        eval.len(),
        "a split of its own, not the eval set again"
    );
    assert_eq!(
        std::fs::read(run.join("eval/epoch-02.jsonl")).unwrap(),
        greedy
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(run.join("eval/epoch-02.tune.summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["creativity"].as_f64(), Some(logged), "{summary}");
    assert_eq!(
        [
            std::fs::read(run.join("eval/epoch-02.tune.jsonl")).unwrap(),
            std::fs::read(run.join("eval/epoch-02.tune.summary.json")).unwrap(),
        ],
        during
    );

    let out = run_expect(
        lab(trained()).args(["eval", "--run", "run", "--split", "tune", "--device", "cpu"]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("has no tuning split"), "{err}");
}

#[test]
fn eval_without_checkpoint_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "micro.toml", MICRO);
    // A run directory whose training stopped before its first checkpoint: only config files.
    run_expect(
        lab(tmp.path())
            .args(["train", "--device", "cpu", "--config"])
            .arg(&cfg)
            .args(["--out", "run", "--max-steps", "0"]),
        0,
    );
    std::fs::remove_file(tmp.path().join("run/latest")).unwrap();
    let out = run_expect(
        lab(tmp.path()).args(["eval", "--run", "run", "--device", "cpu"]),
        2,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("no checkpoint to evaluate"), "{err}");
    let out = run_expect(
        lab(tmp.path()).args(["eval", "--run", "nowhere", "--device", "cpu"]),
        2,
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nowhere/config.toml: cannot read"));
}

#[test]
fn query_with_a_malformed_string_says_the_expected_form() {
    let dir = trained();
    for bad in [
        "AA",
        "AA AB [ a ]",
        "AA AB [ a ] [ a ]",
        "AA QQQ [ ] [ ]",
        "AA AB ( a ) ( b )",
    ] {
        let out = run_expect(
            lab(dir).args(["query", "--run", "run", "--device", "cpu", bad]),
            2,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("U V [ I… ] [ X… ]"), "`{bad}`: {err}");
    }
    let out = run_expect(
        lab(dir).args([
            "query",
            "--run",
            "run",
            "--device",
            "cpu",
            "AA AB [ ] [ ]",
            "--samples",
            "3",
        ]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("answer 3:") && text.contains("reference"),
        "{text}"
    );
}

/// `lab score` scores with the weights of the run (or config) it is given, says which, and
/// then agrees with `lab eval` on the same answers; with the SPEC defaults the numbers differ.
#[test]
fn score_uses_the_runs_weights_and_agrees_with_eval() {
    let dir = tempfile::tempdir().unwrap().keep();
    let text = format!(
        "{MICRO}[eval]\nalpha_hops = 0.5\nalpha_rarity = 2.0\nalpha_include = 3.0\nalpha_exclude = 0.25\n"
    );
    let cfg = write_config(&dir, "weighted.toml", &text);
    run_expect(
        lab(&dir)
            .args(["train", "--device", "cpu", "--config"])
            .arg(&cfg)
            .args(["--out", "run"]),
        0,
    );
    // `lab eval` on the last epoch's checkpoint: the same answers and summary as training's.
    let before = std::fs::read_to_string(dir.join("run/eval/epoch-02.summary.json")).unwrap();
    run_expect(
        lab(&dir).args(["eval", "--device", "cpu", "--run", "run", "--epoch", "2"]),
        0,
    );
    let summary = &dir.join("run/eval/epoch-02.summary.json");
    assert_eq!(std::fs::read_to_string(summary).unwrap(), before);
    let answers = PathBuf::from(summary.to_string_lossy().replace(".summary.json", ".jsonl"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap();
    for how in [
        &["--run", "run"][..],
        &["--config", "weighted.toml", "--data"][..],
    ] {
        let mut c = lab(&dir);
        c.arg("score").args(how);
        if how[0] == "--config" {
            let info: serde_json::Value =
                serde_json::from_str(&read(&dir.join("run/run.json"))).unwrap();
            c.arg(info["data_dir"].as_str().unwrap());
        }
        let out = run_expect(
            c.arg("--answers")
                .arg(&answers)
                .args(["--out", "rescored.jsonl"]),
            0,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("alpha_hops 0.5 alpha_rarity 2 alpha_include 3 alpha_exclude 0.25"),
            "{stdout}"
        );
        assert_eq!(
            read(&dir.join("rescored.summary.json")),
            read(summary),
            "{how:?}"
        );
    }
    // On valid answers (the reference paths) the weights matter: the run's give
    // U = (1 + 3|I|)(1 + 0.25|X|) and N = 0.5 h + 2 S, a flag overrides one of them, and
    // without a run or config the defaults apply.
    let info: serde_json::Value = serde_json::from_str(&read(&dir.join("run/run.json"))).unwrap();
    let data = PathBuf::from(info["data_dir"].as_str().unwrap());
    let eval_lines: Vec<serde_json::Value> = read(&data.join("eval.jsonl"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let refs: String = eval_lines
        .iter()
        .map(|q| {
            let path: Vec<&str> = q["path"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap())
                .collect();
            format!(
                "{}\n",
                serde_json::json!({"id": q["id"], "output": path.join(" ")})
            )
        })
        .collect();
    std::fs::write(dir.join("refs.jsonl"), refs).unwrap();
    let score = |args: &[&str], out: &str| -> Vec<serde_json::Value> {
        let o = run_expect(
            lab(&dir)
                .arg("score")
                .args(args)
                .args(["--answers", "refs.jsonl", "--out", out]),
            0,
        );
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut lines: Vec<serde_json::Value> = read(&dir.join(out))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        lines.push(serde_json::Value::String(stdout));
        lines
    };
    let weighted = score(&["--run", "run"], "w.jsonl");
    let flagged = score(&["--run", "run", "--alpha-include", "1"], "f.jsonl");
    let plain = score(&["--data", data.to_str().unwrap()], "p.jsonl");
    assert!(
        plain
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("(from the SPEC defaults)")
    );
    assert!(
        flagged
            .last()
            .unwrap()
            .as_str()
            .unwrap()
            .contains("alpha_include 1 ")
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&read(&data.join("manifest.json"))).unwrap();
    let w = &manifest["label_weights"];
    for (k, q) in eval_lines.iter().enumerate() {
        let (w_line, f_line, p_line) = (&weighted[k], &flagged[k], &plain[k]);
        assert_eq!(w_line["valid"], true, "{w_line}");
        let path = q["path"].as_array().unwrap();
        let h = (path.len() / 2) as f64;
        let s: f64 = path
            .iter()
            .skip(1)
            .step_by(2)
            .map(|l| -w[l.as_str().unwrap()].as_f64().unwrap().ln())
            .sum::<f64>()
            / h;
        let (ni, nx) = (
            q["include"].as_array().unwrap().len() as f64,
            q["exclude"].as_array().unwrap().len() as f64,
        );
        let close = |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
        assert!(close(&w_line["novelty"], 0.5 * h + 2.0 * s), "{w_line}");
        assert!(
            close(&w_line["utility"], (1.0 + 3.0 * ni) * (1.0 + 0.25 * nx)),
            "{w_line}"
        );
        assert!(
            close(&f_line["utility"], (1.0 + ni) * (1.0 + 0.25 * nx)),
            "{f_line}"
        );
        assert!(close(&p_line["novelty"], h + s), "{p_line}");
        assert!(
            close(&p_line["utility"], (1.0 + ni) * (1.0 + nx)),
            "{p_line}"
        );
    }
}

/// A decode budget too short for any answer: `lab eval --max-new-tokens 3` writes its own
/// `.budget3` files, every answer of 3 tokens without `<eos>` is cut off (a parse failure, so
/// counted), and `lab score` with a config of that budget re-scores the answers to the same
/// summary, cut-off share included; at the run's own budget the share is counted too.
#[test]
fn a_short_budget_cuts_answers_off_and_rescoring_counts_them_alike() {
    let dir = trained();
    run_expect(
        lab(dir).args([
            "eval",
            "--device",
            "cpu",
            "--run",
            "run",
            "--epoch",
            "2",
            "--max-new-tokens",
            "3",
        ]),
        0,
    );
    let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
    let summary: serde_json::Value =
        serde_json::from_str(&read("run/eval/epoch-02.budget3.summary.json")).unwrap();
    let (n, cut) = (
        summary["n"].as_u64().unwrap(),
        summary["cut_off"].as_u64().unwrap(),
    );
    let lines: Vec<serde_json::Value> = read("run/eval/epoch-02.budget3.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let cut_lines = lines.iter().filter(|l| l["cut_off"] == true).count() as u64;
    assert!(cut > n / 2, "{cut} of {n} cut off at 3 tokens");
    assert_eq!(cut, cut_lines);
    for l in lines.iter().filter(|l| l["cut_off"] == true) {
        assert_eq!(l["error"], "parse_failure", "{l}");
        assert_eq!(l["output"].as_str().unwrap().split_whitespace().count(), 3);
    }
    let own: serde_json::Value =
        serde_json::from_str(&read("run/eval/epoch-02.summary.json")).unwrap();
    assert!(own["cut_off"].as_u64().unwrap() < cut, "{own}");
    let cfg = write_config(
        dir,
        "budget3.toml",
        &format!("{MICRO}[eval]\nmax_new_tokens = 3\n"),
    );
    let info: serde_json::Value = serde_json::from_str(&read("run/run.json")).unwrap();
    run_expect(
        lab(dir)
            .arg("score")
            .arg("--config")
            .arg(&cfg)
            .args(["--data", info["data_dir"].as_str().unwrap()])
            .args(["--answers", "run/eval/epoch-02.budget3.jsonl"])
            .args(["--out", "budget3-rescored.jsonl"]),
        0,
    );
    assert_eq!(
        read("budget3-rescored.summary.json"),
        read("run/eval/epoch-02.budget3.summary.json")
    );
}
