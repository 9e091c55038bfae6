//! Device choice for `--device auto|cpu|cuda[:N]`: CUDA only when the binary was built with
//! the `cuda` feature and a GPU answers; `auto` prefers it.

use anyhow::{Result, bail};
use candle_core::Device;

/// Resolve a `--device` value.
pub fn parse(spec: &str) -> Result<Device> {
    match spec {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(cuda(0).unwrap_or(Device::Cpu)),
        s if s == "cuda" || s.starts_with("cuda:") => {
            let n = match s.strip_prefix("cuda:") {
                None => 0,
                Some(n) => n.parse().map_err(|_| {
                    anyhow::anyhow!("--device: `{s}` is not cuda:N with N a GPU index")
                })?,
            };
            cuda(n)
        }
        s => bail!("--device: `{s}` is not one of auto, cpu, cuda, cuda:N"),
    }
}

#[cfg(feature = "cuda")]
fn cuda(n: usize) -> Result<Device> {
    // `cuda_is_available()` is true whenever the feature is built; only opening the device
    // tells whether a GPU is there.
    let d = Device::new_cuda(n)
        .map_err(|e| anyhow::anyhow!("--device: cannot open CUDA device {n}: {e}"))?;
    // f32 matmuls on TF32 tensor cores: ~8x the f32 rate on Hopper, at 10-bit mantissas.
    candle_core::cuda::set_gemm_reduced_precision_f32(true);
    Ok(d)
}

#[cfg(not(feature = "cuda"))]
fn cuda(_n: usize) -> Result<Device> {
    bail!("--device: this binary was built without CUDA; build one with scripts/build-cuda.sh")
}

/// A short name for logs.
pub fn name(d: &Device) -> String {
    match d {
        Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
        Device::Cuda(_) => "cuda".to_string(),
        _ => format!("{d:?}"),
    }
}
