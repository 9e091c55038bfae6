//! `lab sweep slim`: a results directory's exported runs rewritten in the committed layout
//! (docs/RESULTS.md), keeping the answers its report reads; checked against its `results.csv`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::fsutil::StagingDir;
use crate::sweep::collect;
use crate::sweep::export::{self, Keep, KeepAnswers, META};

/// What slimming did.
pub struct Slimmed {
    pub runs: usize,
    /// Greedy answer files kept.
    pub answers: usize,
}

/// Rewrite every exported run of `results` with its evaluation lines of metrics only, and the
/// greedy answers of the epochs in `reads` (run → epochs a verdict or figure reads) and of its
/// last epoch. `results.csv` collected from the slim runs must be byte for byte the one there;
/// only then is `runs/` replaced, so a failure leaves the directory as it was.
pub fn slim(results: &Path, reads: &BTreeMap<String, BTreeSet<u64>>) -> Result<Slimmed> {
    let csv = results.join("results.csv");
    let before = std::fs::read(&csv).with_context(|| format!("{}: cannot read", csv.display()))?;
    let keep = Keep {
        answers: KeepAnswers::Last,
        metrics_every: 0,
        samples: false,
    };
    let stage = StagingDir::new(&results.join("runs"))?;
    let mut out = Slimmed {
        runs: 0,
        answers: 0,
    };
    for (meta, dir) in export::runs(results)? {
        let run = &meta.plan.run;
        let to = stage.path().join(run);
        std::fs::create_dir_all(&to)?;
        let epochs = reads.get(run).cloned().unwrap_or_default();
        export::write_layout(&dir, &to, &keep, Some(&epochs))?;
        std::fs::copy(dir.join(META), to.join(META))
            .with_context(|| format!("{}: cannot copy", dir.join(META).display()))?;
        out.runs += 1;
        out.answers += std::fs::read_dir(to.join(crate::rundir::EVAL))?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".jsonl.gz"))
            })
            .count();
    }
    let check = tempfile::tempdir()?;
    std::os::unix::fs::symlink(stage.path(), check.path().join("runs"))?;
    let after = collect::collect_results(check.path())?;
    let now = std::fs::read(&after.path)?;
    if now != before {
        let (a, b) = (
            String::from_utf8_lossy(&before),
            String::from_utf8_lossy(&now),
        );
        let (i, (was, is)) = a
            .lines()
            .zip(b.lines())
            .enumerate()
            .find(|(_, (x, y))| x != y)
            .unwrap_or((a.lines().count().min(b.lines().count()), ("(end)", "(end)")));
        bail!(
            "{}: collecting the slim runs gives another results.csv, first at line {}: {was:?} becomes {is:?}; nothing was changed",
            csv.display(),
            i + 1
        );
    }
    stage.commit()?;
    Ok(out)
}
