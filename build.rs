//! Builds the table of shipped configs and sweep specs (`src/shipped.rs` includes it), so that
//! an installed `lab` has them anywhere; and, for the `cuda` build only, a RUNPATH so that the
//! binary finds the CUDA 13 libraries in the usual toolkit places (see scripts/build-cuda.sh).

use std::path::Path;

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

fn main() {
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("shipped.rs");
    let code = format!(
        "/// The shipped configs, `configs/<name>.toml`.\npub static CONFIGS: &[(&str, &str)] = {};\n\
         /// The shipped sweep specs, `sweeps/<name>.toml`.\npub static SPECS: &[(&str, &str)] = {};\n",
        table("configs"),
        table("sweeps")
    );
    std::fs::write(&out, code).expect("writing shipped.rs");
    println!("cargo:rerun-if-changed=configs");
    println!("cargo:rerun-if-changed=sweeps");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN:/usr/local/cuda/lib64:/usr/local/cuda-13/lib64:/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64"
        );
    }
    println!("cargo:rerun-if-changed=build.rs");
}
