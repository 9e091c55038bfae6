//! A study's arms (`arms.toml` beside its results.csv): which sweeps' runs each set of verdicts
//! reads, so that a tuning grid never pools with the runs it selected, nor one variant with another.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use crate::report::Row;

/// The file beside results.csv that names the arms.
pub const FILE: &str = "arms.toml";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArmsFile {
    arm: Vec<Arm>,
}

/// One arm: the runs of `sweeps`, plus the runs of other sweeps at the depths `borrow` names
/// (a variant anchored on the baseline's own model reuses the baseline's runs of it).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    pub name: String,
    pub sweeps: Vec<String>,
    #[serde(default)]
    pub borrow: Vec<Borrow>,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Borrow {
    pub sweep: String,
    pub n_layer: Vec<u64>,
}

impl Arm {
    /// Whether `r` is a run of the arm's own sweeps (not a borrowed one).
    pub fn owns(&self, r: &Row) -> bool {
        self.sweeps.iter().any(|s| s == r.get("sweep"))
    }

    /// Whether `r` belongs to this arm.
    pub fn holds(&self, r: &Row) -> bool {
        let sweep = r.get("sweep");
        self.owns(r)
            || self.borrow.iter().any(|b| {
                b.sweep == sweep
                    && r.num("n_layer")
                        .is_some_and(|l| b.n_layer.iter().any(|&n| n as f64 == l))
            })
    }
}

/// The arms of the study in `dir`, or None where it has no arms.toml (one arm: every row).
pub fn load(dir: &Path) -> Result<Option<Vec<Arm>>> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow!("{}: cannot read: {e}", path.display())),
    };
    let file: ArmsFile = toml::from_str(&text).map_err(|e| {
        anyhow!(
            "{}: {}",
            path.display(),
            e.message().split_whitespace().collect::<Vec<_>>().join(" ")
        )
    })?;
    let mut seen = BTreeMap::new();
    for (i, a) in file.arm.iter().enumerate() {
        let field = |f: &str| format!("{}: arm[{i}].{f}", path.display());
        if a.name.is_empty() {
            return Err(anyhow!("{}: must not be empty", field("name")));
        }
        if let Some(j) = seen.insert(a.name.as_str(), i) {
            return Err(anyhow!(
                "{}: {:?} is already arm[{j}]'s name",
                field("name"),
                a.name
            ));
        }
        if a.sweeps.is_empty() {
            return Err(anyhow!("{}: names no sweep", field("sweeps")));
        }
    }
    if file.arm.is_empty() {
        return Err(anyhow!("{}: arm: names no arm", path.display()));
    }
    Ok(Some(file.arm))
}

/// The sweeps of `rows` that no arm reads (a tuning grid), each with its row count.
pub fn left_out(arms: &[Arm], rows: &[Row]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for r in rows.iter().filter(|r| !arms.iter().any(|a| a.holds(r))) {
        *out.entry(r.get("sweep").to_string()).or_insert(0) += 1;
    }
    out
}
