//! Sweep specs (SPEC §8): a base config, overrides for every run, and a grid of explicit lists
//! and/or a parameter bucket, resolved into validated run configs with stable names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Value;

use crate::config::{Config, hex};

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
    bucket: Option<Bucket>,
}

/// A size bucket: the target non-embedding parameter count 12·L·E² and the depths to try; E
/// follows from the target, and heads come from a list.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bucket {
    pub target: u64,
    pub n_layer: Vec<u32>,
    pub n_head: Vec<u32>,
}

/// E for depth L: √(target / 12L) rounded to a multiple of 64 (SPEC §8).
pub fn bucket_width(target: u64, n_layer: u32) -> u32 {
    let e = (target as f64 / (12.0 * n_layer as f64)).sqrt();
    ((e / 64.0).round() * 64.0) as u32
}

/// One planned run: its name, its resolved config, and the values of the swept fields.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    pub config: Config,
    /// The swept fields of this run (dotted path → value), in axis order.
    pub axes: Vec<(String, Value)>,
}

/// A resolved sweep.
pub struct Spec {
    pub path: PathBuf,
    pub name: String,
    pub bucket: Option<Bucket>,
    pub runs: Vec<Planned>,
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

/// Set `path` (dotted) to `v` in a config table, creating sections as needed.
fn put(doc: &mut toml::Table, path: &str, v: Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().expect("non-empty path");
    let mut t = doc;
    for p in parts {
        t = t
            .entry(p.to_string())
            .or_insert_with(|| Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("config sections are tables");
    }
    t.insert(last.to_string(), v);
}

fn short(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Float(f) => format!("{f}"),
        other => other.to_string(),
    }
}

impl Spec {
    pub fn load(path: &Path) -> Result<Spec> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        let file: SpecFile = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}",
                path.display(),
                e.message().split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })?;
        let err =
            |field: &str, reason: String| anyhow::anyhow!("{}: {field}: {reason}", path.display());
        if file.name.is_empty()
            || !file
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(err(
                "name",
                format!(
                    "must be letters, digits, '-', '_' or '.', got {:?}",
                    file.name
                ),
            ));
        }
        let base_path = path.parent().unwrap_or(Path::new(".")).join(&file.base);
        let base_text = std::fs::read_to_string(&base_path)
            .map_err(|e| err("base", format!("cannot read {}: {e}", base_path.display())))?;
        Config::from_toml(&base_text, &base_path, &file.name)?;
        let base: toml::Table = toml::from_str(&base_text)?;

        let mut set = Vec::new();
        flatten("", &file.set, &mut set);
        let mut axes = Vec::new();
        flatten("", &file.grid, &mut axes);
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
        // The bucket's (L, E, H) combinations form one more axis.
        let mut shapes: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        if let Some(b) = &file.bucket {
            if b.n_layer.is_empty() || b.n_head.is_empty() {
                return Err(err(
                    "bucket",
                    "n_layer and n_head must list at least one value".into(),
                ));
            }
            shapes.clear();
            for &l in &b.n_layer {
                let e = bucket_width(b.target, l);
                let min_h = *b.n_head.iter().min().unwrap();
                if l == 0 || e < min_h || e == 0 {
                    return Err(err(
                        "bucket.n_layer",
                        format!(
                            "L = {l} gives E = {e} (target {}), smaller than every head count",
                            b.target
                        ),
                    ));
                }
                let heads: Vec<u32> = b
                    .n_head
                    .iter()
                    .copied()
                    .filter(|h| e.is_multiple_of(*h) && *h <= e)
                    .collect();
                if heads.is_empty() {
                    return Err(err(
                        "bucket.n_head",
                        format!(
                            "no head count in {:?} divides E = {e} (L = {l}, target {})",
                            b.n_head, b.target
                        ),
                    ));
                }
                for h in heads {
                    shapes.push(vec![
                        ("model.n_layer".into(), Value::Integer(l as i64)),
                        ("model.n_embd".into(), Value::Integer(e as i64)),
                        ("model.n_head".into(), Value::Integer(h as i64)),
                    ]);
                }
            }
        } else if lists.is_empty() {
            return Err(err(
                "grid",
                "empty: a sweep needs at least one grid axis or a [bucket]".into(),
            ));
        }
        let mut combos: Vec<Vec<(String, Value)>> = shapes;
        for (k, items) in &lists {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    items.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((k.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        let mut runs = Vec::new();
        let mut seen = BTreeMap::new();
        for combo in combos {
            let mut doc = base.clone();
            for (k, v) in set.iter().chain(&combo) {
                put(&mut doc, k, v.clone());
            }
            doc.remove("name");
            let text = toml::to_string(&doc)?;
            let probe = Config::from_toml(&text, path, &file.name)?;
            let hash = hex(&Sha256::digest(probe.run_hash().as_bytes()))[..8].to_string();
            let m = &probe.model;
            let mut name = format!("{}-L{}-E{}-H{}", file.name, m.n_layer, m.n_embd, m.n_head);
            for (k, v) in &combo {
                if !k.starts_with("model.n_") {
                    let field = k.rsplit('.').next().unwrap_or(k);
                    name.push_str(&format!("-{field}{}", short(v)));
                }
            }
            name.push_str(&format!("-{hash}"));
            let name: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if seen.insert(name.clone(), ()).is_some() {
                continue;
            }
            let mut config = probe;
            config.name = name.clone();
            runs.push(Planned {
                name,
                config,
                axes: combo,
            });
        }
        Ok(Spec {
            path: path.to_path_buf(),
            name: file.name,
            bucket: file.bucket,
            runs,
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
    fn bucket_widths_round_to_64() {
        // 100M at L = 8: √(1e8 / 96) = 1020.6 → 1024.
        assert_eq!(bucket_width(100_000_000, 8), 1024);
        // 1M at L = 4: √(1e6 / 48) = 144.3 → 128.
        assert_eq!(bucket_width(1_000_000, 4), 128);
        assert_eq!(bucket_width(10_000_000, 6), 384);
    }
}
