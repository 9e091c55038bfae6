//! `scripts/gpu-check.sh`, the one-shot check for the first GPU, runs its CPU dry run (the same
//! five steps, tiny shapes, `--device cpu`) to the end with every step passing, and reports a
//! failing step without stopping.

use std::process::Command;

use crate::util::root;

fn gpu_check(lab: &str) -> (i32, String, String) {
    let out = Command::new("bash")
        .arg(root().join("scripts/gpu-check.sh"))
        .args(["--dry-run", "--lab", lab])
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (
        out.status.code().unwrap(),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
fn the_dry_run_passes_every_step() {
    let (code, stdout, stderr) = gpu_check(env!("CARGO_BIN_EXE_lab"));
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| ---"))
        .collect();
    // The header, then the binary, two first-step losses, two throughputs, resume, decode.
    assert_eq!(rows.len(), 8, "{stdout}");
    for (row, step) in rows[1..].iter().zip(["1", "2", "2", "3", "3", "4", "5"]) {
        assert!(row.starts_with(&format!("| {step} ")), "{row}");
        assert!(row.contains("| ok |"), "{row}");
    }
    assert!(stdout.contains("tokens/s, MFU"), "{stdout}");
    assert!(stdout.contains("generated tokens/s"), "{stdout}");
}

#[test]
fn failing_steps_are_reported_counted_and_passed_over() {
    // No binary: the one step that everything needs fails, and the script stops there.
    let (code, stdout, stderr) = gpu_check("/bin/false");
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("| 1 binary | FAILED |"), "{stdout}");
    assert!(stderr.contains("step 1 FAILED"), "{stderr}");
    // A binary that cannot train in bf16: steps 2 (bf16) and 3 fail with their errors, then
    // step 4 still runs and passes, and step 5 fails for want of step 3's model.
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
    let (code, stdout, stderr) = gpu_check(fake.to_str().unwrap());
    assert_eq!(code, 4, "{stdout}\n{stderr}");
    for (step, result) in [
        ("| 1 binary |", "ok"),
        ("| 2 first-step loss, fp32 |", "ok"),
        ("| 2 first-step loss, bf16 |", "FAILED"),
        ("| 4 cpu checkpoint resumed on cpu |", "ok"),
        ("| 5 greedy decode", "FAILED"),
    ] {
        let row = stdout.lines().find(|l| l.starts_with(step)).unwrap();
        assert!(row.contains(&format!("| {result} |")), "{row}");
    }
    assert_eq!(stdout.matches("| FAILED |").count(), 4, "{stdout}");
    assert!(
        stderr.contains("step 3 FAILED") && stderr.contains("no bf16 here"),
        "{stderr}"
    );
}
