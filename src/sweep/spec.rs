//! Sweep specs (SPEC §8): a base config, overrides for every run, and a grid of explicit lists
//! and/or a parameter bucket, resolved into validated run configs with stable names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Value;

use crate::config::{Config, Override, hex, set_path};
use crate::sweep::export::Keep;
pub use crate::sweep::planned::Planned;
use crate::sweep::select::{Candidates, Choice, SelectSpec};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    name: String,
    /// The base config, relative to the spec file.
    base: PathBuf,
    /// Overrides applied to every run: `[set.train] epochs = 2`.
    #[serde(default)]
    set: toml::Table,
    /// Explicit lists, crossed: `[grid.model] n_layer = [2, 4]`.
    #[serde(default)]
    grid: toml::Table,
    /// Lists of equal length taken together, as one more axis: `[zip.model] n_embd = [64,
    /// 128]` with `[zip.train] epochs = [8, 2]` gives two runs, not four.
    #[serde(default)]
    zip: toml::Table,
    bucket: Option<Bucket>,
    /// Where finished runs are exported for committing (relative to the spec file); runs
    /// found there are not trained again.
    results: Option<PathBuf>,
    /// What an export keeps of each run (`[export]`); everything by default.
    #[serde(default)]
    export: Keep,
    /// Axes whose value comes from an earlier sweep's runs (`[[select]]`).
    #[serde(default)]
    select: Vec<SelectSpec>,
    /// How the study is launched on Slurm (`[slurm]`), so that the spec records it.
    #[serde(default)]
    slurm: SlurmTable,
}

/// `[slurm]` in a spec: what `--lab-binary`, `--setup`, `--cpus-per-task` and `--mps` give on
/// the command line (a flag wins over the spec; `--setup` lines run after these).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmTable {
    /// Relative to the spec file.
    pub lab_binary: Option<PathBuf>,
    #[serde(default)]
    pub setup: Vec<String>,
    pub cpus_per_task: Option<u32>,
    #[serde(default)]
    pub mps: bool,
}

/// A size bucket: the target non-embedding parameter count 12·L·E² (one, or a list of
/// buckets crossed with the rest) and the depths to try; E follows from the target, rounded
/// to a multiple of `round`, and heads come from a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub target: Targets,
    pub n_layer: Vec<u32>,
    pub n_head: Vec<u32>,
    /// E is rounded to a multiple of this. SPEC §8: 32 (64 made "1M" span 0.79–1.57M).
    #[serde(default = "default_round")]
    pub round: u32,
    /// What the bucket holds fixed as the depth changes (SPEC Revision).
    #[serde(default)]
    pub fixed: Fixed,
    /// Head counts whose head size E/H falls below this are left out (0: none are).
    #[serde(default)]
    pub min_head_size: u32,
    /// The depth whose model all three `fixed` rules share (default: the middle depth).
    pub anchor: Option<u32>,
}

/// What a bucket holds fixed across its depths (SPEC Revision: what a bucket holds fixed).
/// The two alternatives are anchored on the bucket's middle depth, so that all three give the
/// same model there and differ only away from it.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Fixed {
    /// 12·L·E² = target: the non-embedding parameters (SPEC §8; the default).
    #[default]
    NonEmbedding,
    /// Every parameter, the embedding table included, as many as the anchor model has.
    Total,
    /// L×E as the anchor model's: the paper's §4.1 text.
    LTimesE,
}

impl Bucket {
    /// The anchor depth: `anchor`, or the middle of the sorted depths.
    fn anchor(&self) -> u32 {
        let mut l = self.n_layer.clone();
        l.sort_unstable();
        self.anchor.unwrap_or(l[(l.len() - 1) / 2])
    }

    /// E for depth `l` at `target`, where `embed_rows` is the vocabulary (padded) plus the
    /// positions: the rows of the embedding tables, which only `Fixed::Total` counts. The
    /// anchor's E rounds to `round` as the default rule's does; the alternatives' widths round
    /// to the least common multiple of the head counts, which is finer and keeps every head.
    pub fn width(&self, target: u64, l: u32, embed_rows: u64) -> u32 {
        let gcd = |mut a: u32, mut b: u32| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        };
        let step = self
            .n_head
            .iter()
            .fold(1, |m, &h| m / gcd(m, h.max(1)) * h.max(1)) as f64;
        let round = |e: f64| (((e / step).round() * step) as u32).max(step as u32);
        let la = self.anchor();
        let ea = bucket_width(target, la, self.round) as f64;
        match self.fixed {
            Fixed::NonEmbedding => bucket_width(target, l, self.round),
            Fixed::LTimesE => round(la as f64 * ea / l as f64),
            Fixed::Total => {
                // total(L, E) = 12L·E² + (rows + 13L + 2)·E (GptConfig::total_params).
                let total =
                    |l: f64, e: f64| 12.0 * l * e * e + (embed_rows as f64 + 13.0 * l + 2.0) * e;
                let want = total(la as f64, ea);
                let (a, b) = (12.0 * l as f64, embed_rows as f64 + 13.0 * l as f64 + 2.0);
                round((-b + (b * b + 4.0 * a * want).sqrt()) / (2.0 * a))
            }
        }
    }
}

fn default_round() -> u32 {
    32
}

/// One bucket target or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Targets {
    One(u64),
    Many(Vec<u64>),
}

impl Targets {
    pub fn list(&self) -> Vec<u64> {
        match self {
            Targets::One(t) => vec![*t],
            Targets::Many(v) => v.clone(),
        }
    }
}

/// E for depth L: √(target / 12L) rounded to a multiple of `round` (SPEC §8).
pub fn bucket_width(target: u64, n_layer: u32, round: u32) -> u32 {
    let e = (target as f64 / (12.0 * n_layer as f64)).sqrt();
    let r = round as f64;
    ((e / r).round() * r) as u32
}

/// A resolved sweep.
pub struct Spec {
    pub path: PathBuf,
    pub name: String,
    pub runs: Vec<Planned>,
    /// The base config's path (relative to the working directory).
    pub base: PathBuf,
    /// The results directory, resolved against the spec's folder.
    pub results: Option<PathBuf>,
    /// What an export keeps.
    pub keep: Keep,
    /// The selections made for the runs (`[[select]]`), one per setting, in run order.
    pub choices: Vec<Choice>,
    /// `[slurm]`, with `lab_binary` resolved against the spec's folder.
    pub slurm: SlurmTable,
}

/// `section.field` paths of a nested table of leaves, in file order.
fn flatten(prefix: &str, t: &toml::Table, out: &mut Vec<(String, Value)>) {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Table(inner) => flatten(&path, inner, out),
            _ => out.push((path, v.clone())),
        }
    }
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Float(f) => format!("{f}"),
        other => other.to_string(),
    }
}

/// A bucket target (if any) and the fields a combination sets.
type Combo = (Option<u64>, Vec<(String, Value)>);

/// `PATH: FIELD: REASON`, a spec's error.
fn at(path: &Path, field: &str, reason: String) -> anyhow::Error {
    anyhow::anyhow!("{}: {field}: {reason}", path.display())
}

/// The bucket's (target, L, E, H) combinations, each as its target and the model fields it
/// sets; `embed_rows` is V + n_positions (the embedding rows `fixed = "total"` counts).
fn bucket_shapes(path: &Path, b: &Bucket, embed_rows: u64) -> Result<Vec<Combo>> {
    let err = |field: &str, reason: String| at(path, field, reason);
    let mut shapes = Vec::new();
    for (target, &l) in b
        .target
        .list()
        .into_iter()
        .flat_map(|t| b.n_layer.iter().map(move |l| (t, l)))
    {
        let e = b.width(target, l, embed_rows);
        let min_h = *b.n_head.iter().min().unwrap();
        if l == 0 || e < min_h || e == 0 {
            return Err(err(
                "bucket.n_layer",
                format!("L = {l} gives E = {e} (target {target}), smaller than every head count"),
            ));
        }
        let heads: Vec<u32> = b
            .n_head
            .iter()
            .copied()
            .filter(|h| e.is_multiple_of(*h) && *h <= e && e / *h >= b.min_head_size)
            .collect();
        if heads.is_empty() {
            return Err(err(
                "bucket.n_head",
                format!(
                    "no head count in {:?} divides E = {e} (L = {l}, target {target})",
                    b.n_head
                ),
            ));
        }
        for h in heads {
            shapes.push((
                Some(target),
                vec![
                    ("model.n_layer".into(), Value::Integer(l as i64)),
                    ("model.n_embd".into(), Value::Integer(e as i64)),
                    ("model.n_head".into(), Value::Integer(h as i64)),
                ],
            ));
        }
    }
    Ok(shapes)
}

/// `[zip]`'s lists as rows: the i-th value of every list together.
fn zip_rows(path: &Path, zip: &toml::Table) -> Result<Vec<Vec<(String, Value)>>> {
    let err = |field: &str, reason: String| at(path, field, reason);
    let mut zipped = Vec::new();
    flatten("", zip, &mut zipped);
    let mut zip_rows: Vec<Vec<(String, Value)>> = Vec::new();
    for (k, v) in zipped {
        let Value::Array(items) = v else {
            return Err(err(&format!("zip.{k}"), "must be a list of values".into()));
        };
        if !zip_rows.is_empty() && items.len() != zip_rows.len() {
            return Err(err(
                &format!("zip.{k}"),
                format!(
                    "has {} values; every zip list needs the same length ({})",
                    items.len(),
                    zip_rows.len()
                ),
            ));
        }
        if items.is_empty() {
            return Err(err(&format!("zip.{k}"), "is an empty list".into()));
        }
        zip_rows.resize(items.len(), Vec::new());
        for (row, item) in zip_rows.iter_mut().zip(items) {
            row.push((k.clone(), item));
        }
    }
    Ok(zip_rows)
}

/// Every combination: each shape with each zip row, crossed with every grid list in order.
fn cross(
    shapes: Vec<Combo>,
    zip_rows: &[Vec<(String, Value)>],
    lists: &[(String, Vec<Value>)],
) -> Vec<Combo> {
    let mut combos = shapes;
    if !zip_rows.is_empty() {
        combos = combos
            .into_iter()
            .flat_map(|(t, c)| {
                zip_rows.iter().map(move |z| {
                    let mut c = c.clone();
                    c.extend(z.iter().cloned());
                    (t, c)
                })
            })
            .collect();
    }
    for (k, items) in lists {
        combos = combos
            .into_iter()
            .flat_map(|(t, c)| {
                items.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((k.clone(), v.clone()));
                    (t, c)
                })
            })
            .collect();
    }
    combos
}

/// A run's stable name: the sweep, the shape, every other swept value and the config's hash.
fn run_name(sweep: &str, probe: &Config, combo: &[(String, Value)]) -> String {
    let hash = hex(&Sha256::digest(probe.run_hash().as_bytes()))[..8].to_string();
    let m = &probe.model;
    let mut name = format!("{}-L{}-E{}-H{}", sweep, m.n_layer, m.n_embd, m.n_head);
    for (k, v) in combo {
        if !k.starts_with("model.n_") {
            let field = k.rsplit('.').next().unwrap_or(k);
            name.push_str(&format!("-{field}{}", short(v)));
        }
    }
    name.push_str(&format!("-{hash}"));
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The candidates of each `[[select]]`, read from the exported runs of its `from` spec; a key
/// that is set or swept here is refused.
fn selections(
    path: &Path,
    select: &[SelectSpec],
    swept: &[String],
    set: &[(String, Value)],
) -> Result<Vec<Candidates>> {
    let mut selections = Vec::new();
    for s in select {
        if swept.contains(&s.key) || set.iter().any(|(k, _)| *k == s.key) {
            return Err(at(
                path,
                "select.key",
                format!(
                    "{} is already set or swept here; it can only be selected",
                    s.key
                ),
            ));
        }
        let from = path.parent().unwrap_or(Path::new(".")).join(&s.from);
        let earlier = Spec::load(&from, &[])
            .map_err(|e| anyhow::anyhow!("{}: select {}: from: {e:#}", path.display(), s.key))?;
        selections.push(Candidates::load(
            path,
            s,
            &from,
            &earlier.name,
            earlier.results.as_deref(),
            &earlier.runs,
        )?);
    }
    Ok(selections)
}

/// A sweep's name: letters, digits, '-', '_' or '.' (it names directories and runs).
fn check_name(path: &Path, name: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(allowed) {
        return Err(at(
            path,
            "name",
            format!("must be letters, digits, '-', '_' or '.', got {:?}", name),
        ));
    }
    Ok(())
}

impl Spec {
    /// Load a spec; `overrides` (`--set`) apply to every run after the spec's own `[set]`.
    pub fn load(path: &Path, overrides: &[Override]) -> Result<Spec> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let file: SpecFile = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                e.message().split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })?;
        let err = |field: &str, reason: String| at(path, field, reason);
        check_name(path, &file.name)?;
        let base_path = path.parent().unwrap_or(Path::new(".")).join(&file.base);
        // A spec copied out of the binary (`lab configs NAME --out`) finds its base by name.
        let base_text = crate::shipped::read_base(&base_path)
            .map_err(|e| err("base", format!("cannot read {}: {e}", base_path.display())))?;
        Config::from_toml(&base_text, &base_path, &file.name)?;
        let base: toml::Table = toml::from_str(&base_text)?;

        let mut set = Vec::new();
        flatten("", &file.set, &mut set);
        let mut axes = Vec::new();
        flatten("", &file.grid, &mut axes);
        let mut swept: Vec<String> = axes.iter().map(|a| a.0.clone()).collect();
        let mut zipped_keys = Vec::new();
        flatten("", &file.zip, &mut zipped_keys);
        swept.extend(zipped_keys.into_iter().map(|z| z.0));
        if file.bucket.is_some() {
            swept.extend(["model.n_layer", "model.n_embd", "model.n_head"].map(String::from));
        }
        for o in overrides {
            if swept.contains(&o.key) {
                anyhow::bail!(
                    "--set {}: {} is an axis of {}; change the spec instead",
                    o.text,
                    o.key,
                    path.display()
                );
            }
            set.push((o.key.clone(), o.value.clone()));
        }
        let mut lists: Vec<(String, Vec<Value>)> = Vec::new();
        for (k, v) in axes {
            let Value::Array(items) = v else {
                return Err(err(&format!("grid.{k}"), "must be a list of values".into()));
            };
            if items.is_empty() {
                return Err(err(
                    &format!("grid.{k}"),
                    "is an empty list: a grid axis needs at least one value".into(),
                ));
            }
            lists.push((k, items));
        }
        let resolve = |combo: &[(String, Value)]| -> Result<Config> {
            let mut doc = base.clone();
            for (k, v) in set.iter().chain(combo) {
                set_path(&mut doc, k, v.clone());
            }
            doc.remove("name");
            let text = toml::to_string(&doc)?;
            Ok(Config::from_toml(&text, path, &file.name)?)
        };
        // The bucket's (target, L, E, H) combinations form one more axis.
        let mut shapes: Vec<Combo> = vec![(None, Vec::new())];
        if let Some(b) = &file.bucket {
            if b.n_layer.is_empty() || b.n_head.is_empty() || b.target.list().is_empty() {
                return Err(err(
                    "bucket",
                    "target, n_layer and n_head must list at least one value".into(),
                ));
            }
            if b.round == 0 {
                return Err(err("bucket.round", "must be at least 1".into()));
            }
            shapes.clear();
            let embed_rows = {
                let c = resolve(&[])?;
                let vocab = crate::tokenizer::Vocab::of_config(&c.graph);
                let gpt = crate::model::GptConfig::new(&c, vocab.n_tokens());
                (gpt.vocab_size + gpt.n_positions) as u64
            };
            shapes = bucket_shapes(path, b, embed_rows)?;
        } else if lists.is_empty() && file.zip.is_empty() {
            return Err(err(
                "grid",
                "empty: a sweep needs at least one grid axis or a [bucket]".into(),
            ));
        }
        let zip_rows = zip_rows(path, &file.zip)?;
        let combos = cross(shapes, &zip_rows, &lists);
        let selections = selections(path, &file.select, &swept, &set)?;
        let mut runs = Vec::new();
        let mut choices: Vec<Choice> = Vec::new();
        let mut seen = BTreeMap::new();
        for (target, mut combo) in combos {
            let mut probe = resolve(&combo)?;
            for c in &selections {
                let m = &probe.model;
                let (value, choice) = c
                    .choose([m.n_layer, m.n_embd, m.n_head], &combo)
                    .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
                combo.push((c.key().to_string(), value));
                if !choices.iter().any(|x| x.line() == choice.line()) {
                    choices.push(choice);
                }
            }
            if !selections.is_empty() {
                probe = resolve(&combo)?;
            }
            let name = run_name(&file.name, &probe, &combo);
            if seen.insert(name.clone(), ()).is_some() {
                continue;
            }
            let mut config = probe;
            config.name = name.clone();
            runs.push(Planned {
                name,
                config,
                axes: combo,
                target,
            });
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(Spec {
            path: path.to_path_buf(),
            name: file.name,
            runs,
            results: file.results.map(|r| dir.join(r)),
            keep: file.export,
            choices,
            slurm: SlurmTable {
                lab_binary: file.slurm.lab_binary.map(|b| dir.join(b)),
                ..file.slurm
            },
            base: base_path,
        })
    }

    /// The sweep directory: `checkpoints/<name>/`.
    pub fn dir(&self) -> PathBuf {
        PathBuf::from("checkpoints").join(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_widths_round_to_the_knob() {
        // 100M at L = 8: √(1e8 / 96) = 1020.6 → 1024 either way.
        assert_eq!(bucket_width(100_000_000, 8, 32), 1024);
        assert_eq!(bucket_width(100_000_000, 8, 64), 1024);
        // 1M at L = 4: √(1e6 / 48) = 144.3 → 160 by 32 (1.23M), 128 by 64 (0.79M).
        assert_eq!(bucket_width(1_000_000, 4, 32), 160);
        assert_eq!(bucket_width(1_000_000, 4, 64), 128);
        assert_eq!(bucket_width(10_000_000, 6, 32), 384);
    }

    /// The three rules share the anchor's model and hold their own quantity: non-embedding
    /// parameters, total parameters (within the rounding of E to whole heads), or L×E.
    #[test]
    fn what_a_bucket_holds_fixed() {
        let bucket = |fixed| Bucket {
            target: Targets::One(100_000),
            n_layer: vec![1, 2, 4, 8, 16],
            n_head: vec![4],
            round: 8,
            fixed,
            min_head_size: 0,
            anchor: None,
        };
        let rows = 2112 + 64; // the repro-cpu vocabulary, padded, and 64 positions
        let total = |l: u32, e: u32| {
            let (l, e) = (l as f64, e as f64);
            12.0 * l * e * e + (rows as f64 + 13.0 * l + 2.0) * e
        };
        for fixed in [Fixed::NonEmbedding, Fixed::Total, Fixed::LTimesE] {
            assert_eq!(
                bucket(fixed).width(100_000, 4, rows),
                48,
                "{fixed:?} at the anchor"
            );
        }
        let b = bucket(Fixed::NonEmbedding);
        assert_eq!(
            [1, 2, 8, 16].map(|l| b.width(100_000, l, rows)),
            [88, 64, 32, 24]
        );
        let b = bucket(Fixed::LTimesE);
        assert_eq!(
            [1, 2, 8, 16].map(|l| l * b.width(100_000, l, rows)),
            [192; 4]
        );
        let b = bucket(Fixed::Total);
        for l in [1, 2, 8, 16] {
            let e = b.width(100_000, l, rows);
            assert_eq!(e % 4, 0, "whole heads");
            let ratio = total(l, e) / total(4, 48);
            assert!(
                (0.9..1.1).contains(&ratio),
                "L = {l}: E = {e}, {ratio:.3} of the anchor"
            );
        }
        let anchored = Bucket {
            anchor: Some(4),
            n_layer: vec![1, 16],
            ..bucket(Fixed::LTimesE)
        };
        assert_eq!(anchored.width(100_000, 16, rows), 12, "an explicit anchor");
    }

    #[test]
    fn bucket_lists_cross_and_zip_lists_pair() {
        let dir = tempfile::tempdir().unwrap();
        let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/tiny.toml");
        let p = dir.path().join("s.toml");
        std::fs::write(
            &p,
            format!(
                "name = \"s\"\nbase = \"{}\"\nresults = \"out\"\n[bucket]\n\
                 target = [100000, 1000000]\nn_layer = [1, 4]\nn_head = [4]\nround = 8\n\
                 [zip.train]\nepochs = [1, 2]\nseed = [5, 6]\n",
                base.display()
            ),
        )
        .unwrap();
        let s = Spec::load(&p, &[]).unwrap();
        assert_eq!(s.results, Some(dir.path().join("out")));
        let got: Vec<(Option<u64>, u32, u32, u32, u64)> = s
            .runs
            .iter()
            .map(|r| {
                let c = &r.config;
                (
                    r.target,
                    c.model.n_layer,
                    c.model.n_embd,
                    c.train.epochs,
                    c.train.seed,
                )
            })
            .collect();
        // 100k: L1 -> 91.3 -> 88, L4 -> 45.6 -> 48; 1M: L1 -> 288.7 -> 288, L4 -> 144.
        assert_eq!(
            got,
            vec![
                (Some(100_000), 1, 88, 1, 5),
                (Some(100_000), 1, 88, 2, 6),
                (Some(100_000), 4, 48, 1, 5),
                (Some(100_000), 4, 48, 2, 6),
                (Some(1_000_000), 1, 288, 1, 5),
                (Some(1_000_000), 1, 288, 2, 6),
                (Some(1_000_000), 4, 144, 1, 5),
                (Some(1_000_000), 4, 144, 2, 6),
            ]
        );
    }
}
