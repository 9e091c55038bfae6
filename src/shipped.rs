//! The configs and sweep specs shipped with the lab, built into the binary so that an installed
//! `lab` has them in any directory: found by name when no such file exists, listed and written out.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::fsutil::write_atomic;

include!(concat!(env!("OUT_DIR"), "/shipped.rs"));

/// The name a path asks for: its file name without `.toml`, when it names no directory.
fn name_of(path: &Path) -> Option<&str> {
    let mut parts = path.components();
    let (Some(std::path::Component::Normal(n)), None) = (parts.next(), parts.next()) else {
        return None;
    };
    n.to_str().map(|n| n.strip_suffix(".toml").unwrap_or(n))
}

fn find(table: &'static [(&str, &str)], name: &str) -> Option<&'static str> {
    table.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// The shipped config a missing config path names (`100m-L8` or `100m-L8.toml`), if any.
pub fn config(path: &Path) -> Option<&'static str> {
    find(CONFIGS, name_of(path)?)
}

/// The shipped config of a spec's `base` (`../configs/tiny.toml` → `tiny`): a spec copied out of
/// the binary then works in any directory.
pub fn base_config(base: &Path) -> Option<&'static str> {
    let stem = base.file_stem()?.to_str()?;
    find(CONFIGS, stem)
}

/// A spec's base config: the file, or, when there is none, the shipped config of its name (a
/// spec copied out of the binary then works in any directory).
pub fn read_base(base: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(base) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            base_config(base).map(str::to_string).ok_or(e)
        }
        other => other,
    }
}

/// The shipped names, for an error that says what exists.
pub fn config_names() -> String {
    CONFIGS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The first comment line of a file: what it is, in its own words.
fn summary(text: &str) -> &str {
    text.lines()
        .find_map(|l| l.strip_prefix('#'))
        .map(str::trim)
        .unwrap_or("")
}

/// `lab configs`: every shipped config and sweep spec with its first comment line.
pub fn listing() -> String {
    let w = CONFIGS
        .iter()
        .chain(SPECS)
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(4);
    let mut out = String::new();
    for (kind, table) in [("config", CONFIGS), ("sweep", SPECS)] {
        for (name, text) in table {
            out += &format!("{kind:<6}  {name:<w$}  {}\n", summary(text));
        }
    }
    out + "(`lab configs NAME` prints one; `--out PATH` writes it to start from)\n"
}

/// The text of a shipped config or spec by name (configs first), or an error listing them.
pub fn text(name: &str) -> Result<&'static str> {
    let name = name.strip_suffix(".toml").unwrap_or(name);
    if let Some(t) = find(CONFIGS, name).or_else(|| find(SPECS, name)) {
        return Ok(t);
    }
    let specs: Vec<&str> = SPECS.iter().map(|(n, _)| *n).collect();
    bail!(
        "{name}: no shipped config or sweep spec of that name (configs: {}; sweeps: {})",
        config_names(),
        specs.join(", ")
    )
}

/// Write a shipped file to `out` (a file, or a directory to put `NAME.toml` in), never over an
/// existing file unless `force`. Returns the path written.
pub fn write_out(name: &str, out: &Path, force: bool) -> Result<PathBuf> {
    let text = text(name)?;
    let file = format!("{}.toml", name.strip_suffix(".toml").unwrap_or(name));
    let path = if out.is_dir() {
        out.join(file)
    } else {
        out.to_path_buf()
    };
    if path.exists() && !force {
        bail!("{}: exists; pass --force to replace it", path.display());
    }
    write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_configs_and_sweeps_is_shipped() {
        for (dir, table) in [("configs", CONFIGS), ("sweeps", SPECS)] {
            let on_disk = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(dir))
                .unwrap()
                .filter(|e| e.as_ref().unwrap().path().extension() == Some("toml".as_ref()))
                .count();
            assert_eq!(table.len(), on_disk, "{dir}");
        }
        assert!(config(Path::new("100m-L8.toml")).is_some());
        assert!(config(Path::new("tiny")).is_some());
        assert!(
            config(Path::new("configs/tiny.toml")).is_none(),
            "a path is never a name"
        );
        assert_eq!(
            base_config(Path::new("../configs/tiny.toml")),
            config(Path::new("tiny"))
        );
    }
}
