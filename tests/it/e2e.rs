//! The README's main job end to end through the real binary: `lab train --config
//! configs/tiny.toml` writes an evaluation per epoch, and its creativity at the last epoch
//! beats its first epoch's.

use serde_json::Value;

use crate::util::{lab, root, run_expect};

#[test]
fn tiny_training_evaluates_every_epoch_and_gets_more_creative() {
    let tmp = tempfile::tempdir().unwrap();
    let out = run_expect(
        lab(tmp.path())
            .args(["train", "--device", "cpu", "--config"])
            .arg(root().join("configs/tiny.toml")),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("done: checkpoints/tiny"), "{text}");
    assert!(
        text.contains("val/loss") && text.contains("creativity"),
        "the summary: {text}"
    );
    let run = tmp.path().join("checkpoints/tiny");
    assert!(run.join("DONE").exists());
    let cfg = lab::config::Config::load(&root().join("configs/tiny.toml")).unwrap();
    let epochs = cfg.train.epochs as u64;
    let summary = |e: u64| -> Value {
        let p = run.join(format!("eval/epoch-{e:02}.summary.json"));
        serde_json::from_str(
            &std::fs::read_to_string(&p).unwrap_or_else(|_| panic!("{}", p.display())),
        )
        .unwrap()
    };
    for e in 1..=epochs {
        assert_eq!(summary(e)["n"], 400, "epoch {e}");
        let lines = std::fs::read_to_string(run.join(format!("eval/epoch-{e:02}.jsonl"))).unwrap();
        assert_eq!(lines.lines().count(), 400);
    }
    let (first, last) = (summary(1), summary(epochs));
    let c = |s: &Value| s["creativity"].as_f64().unwrap();
    let v = |s: &Value| s["valid_rate"].as_f64().unwrap();
    eprintln!(
        "tiny: creativity {} -> {}, valid rate {} -> {}",
        c(&first),
        c(&last),
        v(&first),
        v(&last)
    );
    assert!(
        c(&last) > c(&first) + 1.0,
        "creativity must rise: {} -> {}",
        c(&first),
        c(&last)
    );
    assert!(v(&last) > v(&first), "validity must rise");
    // metrics.jsonl carries the evaluation of every epoch, with cumulative FLOPs.
    let evals: Vec<Value> = std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l.get("eval/creativity").is_some())
        .collect();
    assert_eq!(evals.len() as u64, epochs);
    assert!(
        evals
            .windows(2)
            .all(|w| w[1]["flops"].as_f64() > w[0]["flops"].as_f64())
    );
    assert_eq!(
        evals.last().unwrap()["eval/creativity"].as_f64(),
        Some(c(&last))
    );
}
