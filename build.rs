//! Builds the table of shipped configs and sweep specs (`src/shipped.rs` includes it), so that
//! an installed `lab` has them anywhere; the code's identity (`src/code.rs`: commit, dirty tree,
//! features, target CPU features); and, for the `cuda` build only, a RUNPATH so that the binary
//! finds the CUDA 13 libraries in the usual toolkit places (see scripts/build-cuda.sh); and the
//! lab's CUDA kernels (`src/**/*.cu`): built for the host always, where the tests run their
//! arithmetic, and to PTX for `compute_80` and `sm_90a` by nvcc in the `cuda` build.

use std::path::Path;
use std::process::Command;

/// What goes into the binary: a change under these makes the tree dirty for `LAB_DIRTY`.
const CODE_PATHS: &[&str] = &[
    "src",
    "vendor",
    "build.rs",
    "Cargo.toml",
    "Cargo.lock",
    "configs",
    "sweeps",
    "assets",
];

/// `git ARGS` in the crate's folder, trimmed; None where git or the repository is missing.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `LAB_COMMIT`, `LAB_DIRTY`, `LAB_TREE`, `LAB_FEATURES` and `LAB_TARGET_FEATURES` for
/// `src/code.rs`, and
/// the files whose change must re-run this (a commit, a checkout, an edit of the code).
fn code_identity() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let mut status = vec!["status", "--porcelain", "--untracked-files=no", "--"];
    status.extend(CODE_PATHS);
    let dirty = git(&status).map_or("unknown".into(), |s| (!s.is_empty()).to_string());
    // A dirty tree is told apart from another dirty tree by a hash of its diff.
    let mut diff = vec!["diff", "HEAD", "--"];
    diff.extend(CODE_PATHS);
    let tree = match (dirty.as_str(), git(&diff)) {
        ("true", Some(d)) => {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            d.hash(&mut h);
            format!("{:016x}", h.finish())
        }
        _ => String::new(),
    };
    let mut features: Vec<String> = std::env::vars()
        .filter_map(|(k, _)| k.strip_prefix("CARGO_FEATURE_").map(str::to_lowercase))
        .collect();
    features.sort();
    let target = std::env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    println!("cargo:rustc-env=LAB_COMMIT={commit}");
    println!("cargo:rustc-env=LAB_DIRTY={dirty}");
    println!("cargo:rustc-env=LAB_TREE={tree}");
    println!("cargo:rustc-env=LAB_FEATURES={}", features.join(","));
    println!("cargo:rustc-env=LAB_TARGET_FEATURES={target}");
    for p in ["HEAD", "index", "logs/HEAD"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    for p in CODE_PATHS {
        println!("cargo:rerun-if-changed={p}");
    }
}

/// `(name, text)` of every `DIR/*.toml`, sorted, as a Rust array of `include_str!`s.
fn table(dir: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    names.sort();
    let rows: String = names
        .iter()
        .map(|n| {
            let path = root.join(dir).join(n);
            format!(
                "    ({:?}, include_str!({:?})),\n",
                n.trim_end_matches(".toml"),
                path.display().to_string()
            )
        })
        .collect();
    format!("&[\n{rows}]")
}

/// The lab's CUDA kernel sources, each `src/<path>.cu` with its launch beside it.
const KERNELS: &[&str] = &[
    "src/train/adamw.cu",
    "src/model/ops/layer_norm.cu",
    "src/model/ops/gelu.cu",
    "src/model/ops/attention.cu",
    "src/model/ops/cross_entropy.cu",
    "src/model/ops/embedding.cu",
];

/// The PTX targets: `compute_80` JIT-compiles on any GPU from the A100 on (A100, L40S, H100),
/// `sm_90a` is Hopper's own. src/cuda.rs picks one by the device's compute capability.
const PTX_ARCHS: &[&str] = &["compute_80", "sm_90a"];

/// Each kernel's host build (its `LAB_HD` arithmetic and the host runs of its launches) into
/// one static library, for the tests; and with the `cuda` feature, its PTX for each target
/// as `OUT_DIR/<stem>.<arch>.ptx`. nvcc runs with `-fmad=false`: no multiply-add is fused, so
/// the GPU computes what the host build computes, bit for bit.
fn kernels(out: &Path) {
    let mut host = cc::Build::new();
    host.cpp(true)
        .flag("-x")
        .flag("c++")
        .flag("-ffp-contract=off")
        .opt_level(2)
        .warnings_into_errors(true);
    for k in KERNELS {
        host.file(k);
        println!("cargo:rerun-if-changed={k}");
    }
    host.compile("lab_kernels_host");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var("NVCC").unwrap_or_else(|_| "nvcc".into());
    for k in KERNELS {
        let stem = Path::new(k)
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("kernel stem");
        for arch in PTX_ARCHS {
            let ptx = out.join(format!("{stem}.{arch}.ptx"));
            let status = Command::new(&nvcc)
                .args(["--ptx", "-O3", "-fmad=false", "-std=c++17"])
                .arg(format!("-arch={arch}"))
                .arg(k)
                .arg("-o")
                .arg(&ptx)
                .status()
                .unwrap_or_else(|e| panic!("{nvcc}: {e} (scripts/build-cuda.sh sets it up)"));
            assert!(status.success(), "{nvcc} failed on {k} for {arch}");
        }
    }
    println!("cargo:rerun-if-env-changed=NVCC");
}

fn main() {
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("shipped.rs");
    let code = format!(
        "/// The shipped configs, `configs/<name>.toml`.\npub static CONFIGS: &[(&str, &str)] = {};\n\
         /// The shipped sweep specs, `sweeps/<name>.toml`.\npub static SPECS: &[(&str, &str)] = {};\n",
        table("configs"),
        table("sweeps")
    );
    std::fs::write(&out, code).expect("writing shipped.rs");
    code_identity();
    kernels(out.parent().expect("OUT_DIR"));
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN:/usr/local/cuda/lib64:/usr/local/cuda-13/lib64:/usr/local/cuda-12/lib64:/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64"
        );
    }
    println!("cargo:rerun-if-changed=build.rs");
}
