//! Which code this binary is: the lab's version, git commit, whether the tree was dirty, the
//! build features and the target CPU features (set by `build.rs`), recorded in every run.

use serde::{Deserialize, Serialize};

/// The code that wrote a run's files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Code {
    pub version: String,
    /// The git commit the binary was built from (`unknown` outside a git checkout).
    pub commit: String,
    /// Whether the source tree (`src`, `vendor`, `Cargo.*`, configs…) differed from the commit:
    /// `true`, `false`, or `unknown`.
    pub dirty: String,
    /// For a dirty tree, a hash of its diff against the commit (empty otherwise), so that two
    /// builds of different uncommitted changes are told apart.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tree: String,
    /// Cargo features, comma-separated (`cuda`…).
    pub features: String,
    /// The target's CPU features the compiler could use (`avx2,fma,…`).
    pub target_features: String,
}

impl Code {
    /// This binary.
    pub fn this() -> Code {
        Code {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("LAB_COMMIT").to_string(),
            dirty: env!("LAB_DIRTY").to_string(),
            tree: env!("LAB_TREE").to_string(),
            features: env!("LAB_FEATURES").to_string(),
            target_features: env!("LAB_TARGET_FEATURES").to_string(),
        }
    }

    /// `0123abcd` or `0123abcd-dirty`: the commit as `results.csv` and messages give it.
    pub fn label(&self) -> String {
        let short: String = self.commit.chars().take(12).collect();
        match self.dirty.as_str() {
            "false" => short,
            "true" => format!("{short}-dirty"),
            _ => format!("{short}-dirty?"),
        }
    }

    /// Whether `other` may compute differently: another commit, other uncommitted changes, a
    /// tree whose state is unknown, or other features.
    pub fn differs(&self, other: &Code) -> bool {
        self != other || self.dirty == "unknown"
    }
}
