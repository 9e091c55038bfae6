//! Crash-safe writes: a file or a whole directory is staged under a temporary name beside its
//! target and renamed into place, so readers never see a half-written result.

use std::fs::Permissions;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Write `bytes` to `path` through a temporary file in the same directory, then rename. The
/// file gets the mode `File::create` would give (0o666 less the umask), not a temp file's 0o600,
/// so that results stay readable to a group on a shared cluster.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = parent_of(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(Permissions::from_mode(0o666))
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

/// Read a text file, gunzipping it when its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .with_context(|| format!("{}: not gzipped UTF-8 text", path.display()))?;
        Ok(text)
    } else {
        String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8 text", path.display()))
    }
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
            .with_context(|| format!("{}: cannot create directory", target.display()))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{name}.tmp-"))
            .permissions(Permissions::from_mode(0o777))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_files_and_dirs_get_the_usual_modes() {
        let tmp = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let plain = tmp.path().join("plain");
        std::fs::File::create(&plain).unwrap();
        let atomic = tmp.path().join("atomic");
        write_atomic(&atomic, b"x").unwrap();
        assert_eq!(mode(&atomic), mode(&plain));
        let made = tmp.path().join("made");
        std::fs::create_dir(&made).unwrap();
        let staged = StagingDir::new(&tmp.path().join("staged"))
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(mode(&staged), mode(&made));
    }
}
