//! For the `cuda` build only: a RUNPATH so that the binary finds the CUDA 13 libraries in the
//! usual toolkit places on a GPU machine without LD_LIBRARY_PATH (see scripts/build-cuda.sh).

fn main() {
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN:/usr/local/cuda/lib64:/usr/local/cuda-13/lib64:/usr/lib/x86_64-linux-gnu:/usr/local/nvidia/lib64"
        );
    }
    println!("cargo:rerun-if-changed=build.rs");
}
