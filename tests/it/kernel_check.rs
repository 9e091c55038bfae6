//! `lab kernel-check`: every fused kernel, the optimizer and the whole model's gradients
//! against their definitions on the CPU, a row per comparison; a device this binary cannot
//! open and a config that does not load are refused.

use crate::util::{lab, root, run_expect};

#[test]
fn every_kernel_is_within_tolerance_at_a_config_and_the_seed_is_printed() {
    let out = run_expect(
        lab(&root()).args(["kernel-check", "--config", "tiny", "--seed", "7"]),
        0,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| tiny |")).collect();
    // layer_norm 4, two linears 4 each, gelu 2, attention 2, cross_entropy 2, head_loss 3,
    // embedding 3, head 3; adamw 5; the model 3 in fp32 and 3 in bf16.
    assert_eq!(rows.len(), 38, "{text}");
    assert!(rows.iter().all(|r| r.ends_with("| ok |")), "{text}");
    for op in [
        "layer_norm",
        "linear c_attn",
        "linear c_fc",
        "gelu",
        "embedding",
        "causal_attention",
        "cross_entropy",
        "head_loss",
    ] {
        assert!(
            rows.iter().any(|r| r.contains(&format!("| {op} |"))),
            "{op}: {text}"
        );
    }
    assert!(
        rows.iter()
            .any(|r| r.contains("| head_cross_entropy |") && r.contains("grad wte"))
    );
    for what in [
        "| adamw |",
        "parameter change",
        "| model |",
        "fp32",
        "bf16",
        "grad, worst",
    ] {
        assert!(rows.iter().any(|r| r.contains(what)), "{what}: {text}");
    }
    assert!(
        text.contains("38 of 38 comparisons within tolerance on cpu (")
            && text.contains("(inputs from --seed 7)"),
        "{text}"
    );
    // The same seed gives the same table.
    let again = run_expect(
        lab(&root()).args(["kernel-check", "--config", "tiny", "--seed", "7"]),
        0,
    );
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn a_device_the_binary_cannot_open_and_a_bad_config_are_refused() {
    for (args, needle) in [
        (vec!["kernel-check", "--device", "cuda"], "without CUDA"),
        (vec!["kernel-check", "--device", "tpu"], "`tpu`"),
        (
            vec!["kernel-check", "--config", "no-such-config"],
            "no-such-config",
        ),
    ] {
        let out = run_expect(lab(&root()).args(&args), 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}
