//! The committed studies recompute from what they commit: `lab report` on each one's
//! `results.csv` writes exactly its committed report files, and every table a FINDINGS.md
//! quotes under a `<!-- lab … -->` line is exactly what that command prints.

use std::path::PathBuf;

use crate::util::{lab, root, run_expect};

/// The committed studies that have a report: `results/<study>/`.
fn studies() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("results"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("report.md").exists())
        .collect();
    out.sort();
    out
}

#[test]
fn committed_reports_are_what_lab_report_writes() {
    let studies = studies();
    assert!(studies.len() >= 4, "{studies:?}");
    for study in studies {
        let name = study.file_name().unwrap().to_string_lossy().into_owned();
        let tmp = tempfile::tempdir().unwrap();
        let rel = format!("results/{name}");
        run_expect(
            lab(&root()).args(["report", &rel, "--out", tmp.path().to_str().unwrap()]),
            0,
        );
        let mut written = Vec::new();
        for e in std::fs::read_dir(tmp.path()).unwrap() {
            let p = e.unwrap().path();
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            if file.ends_with(".png") {
                continue;
            }
            let committed = std::fs::read(study.join(&file))
                .unwrap_or_else(|_| panic!("{rel}/{file}: written by lab report, not committed"));
            assert!(
                committed == std::fs::read(&p).unwrap(),
                "{rel}/{file}: differs from what `lab report {rel}` writes"
            );
            written.push(file);
        }
        // And no committed figure is one the report no longer draws.
        for e in std::fs::read_dir(&study).unwrap() {
            let file = e.unwrap().file_name().to_string_lossy().into_owned();
            let figure = file.ends_with(".svg") || file.ends_with(".csv");
            let kept = ["results.csv", "provenance.csv"].contains(&file.as_str());
            assert!(
                !figure || kept || written.contains(&file),
                "{rel}/{file}: committed, but `lab report {rel}` does not write it"
            );
        }
    }
}

/// Each `<!-- lab ARGS -->` line followed by a ```text block: (ARGS, the block).
fn quoted_tables(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("<!-- lab ") {
        rest = &rest[i + "<!-- lab ".len()..];
        let (args, after) = rest.split_once(" -->\n```text\n").expect("a ```text block");
        let (body, after) = after.split_once("```").expect("a closed block");
        out.push((args.to_string(), body.to_string()));
        rest = after;
    }
    out
}

#[test]
fn findings_tables_are_what_lab_report_prints() {
    let mut seen = 0;
    for study in studies() {
        let path = study.join("FINDINGS.md");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (args, body) in quoted_tables(&text) {
            let out = run_expect(lab(&root()).args(args.split_whitespace()), 0);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                body,
                "{}: the table of `lab {args}`",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen >= 11, "{seen} quoted tables");
}
