//! Crash-safe writes: a file or a whole directory is staged under a temporary name beside its
//! target and renamed into place, so readers never see a half-written result.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Write `bytes` to `path` through a temporary file in the same directory, then rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = parent_of(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .tempfile_in(dir)
        .with_context(|| format!("{}: cannot write", path.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("{}: cannot write", path.display()))?;
    tmp.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A directory being built beside its final place. Dropped without `commit`, it is removed.
pub struct StagingDir {
    dir: tempfile::TempDir,
    target: PathBuf,
}

impl StagingDir {
    /// Create the staging directory next to `target`, creating `target`'s parents.
    pub fn new(target: &Path) -> Result<StagingDir> {
        let parent = parent_of(target);
        std::fs::create_dir_all(parent)
            .with_context(|| format!("{}: cannot create directory", parent.display()))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{name}.tmp-"))
            .tempdir_in(parent)
            .with_context(|| format!("{}: cannot create directory", target.display()))?;
        Ok(StagingDir {
            dir,
            target: target.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Move the finished directory into place, replacing any old one at the target.
    pub fn commit(self) -> Result<PathBuf> {
        let staged = self.dir.keep();
        if self.target.exists() {
            let old = staged.with_extension("old");
            std::fs::rename(&self.target, &old)
                .with_context(|| format!("{}: cannot replace", self.target.display()))?;
            std::fs::rename(&staged, &self.target)
                .with_context(|| format!("{}: cannot replace", self.target.display()))?;
            std::fs::remove_dir_all(&old)
                .with_context(|| format!("{}: cannot remove", old.display()))?;
        } else {
            std::fs::rename(&staged, &self.target)
                .with_context(|| format!("{}: cannot create", self.target.display()))?;
        }
        Ok(self.target)
    }
}
