//! Device choice for `--device auto|cpu|cuda[:N]` (CUDA only when the binary was built with
//! the `cuda` feature and a GPU answers; `auto` prefers it), and each device's peak for MFU.

use anyhow::{Result, bail};
use candle_core::Device;

use crate::config::Precision;

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

/// The PTX of one of the lab's CUDA kernel files, as build.rs compiles it: Hopper's own, and
/// `compute_80`'s, which the driver compiles at load for any other GPU from the A100 on.
#[cfg(feature = "cuda")]
pub struct Ptx {
    pub sm_90a: &'static str,
    pub compute_80: &'static str,
}

/// The PTX of `p` for `dev`, or an error naming the module `name` on a GPU older than 8.0.
#[cfg(feature = "cuda")]
pub fn ptx(
    dev: &candle_core::CudaDevice,
    name: &str,
    p: &'static Ptx,
) -> candle_core::Result<&'static str> {
    use candle_core::cuda_backend::WrapErr;
    let ctx = dev.cuda_stream().context().clone();
    match ctx.compute_capability().w()? {
        (9, 0) => Ok(p.sm_90a),
        (major, _) if major >= 8 => Ok(p.compute_80),
        (major, minor) => {
            candle_core::bail!("{name}: compute capability {major}.{minor}; 8.0 or later needed")
        }
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
    // cudarc gives every allocation a read and a write event to order its uses across
    // streams; `new_cuda` runs everything on one stream (the per-thread one), where they
    // order nothing and cost 2 event creations and destructions per tensor.
    if let Device::Cuda(c) = &d {
        // SAFETY: the lab never creates a second stream, so no tensor is used, written or
        // freed across streams; this runs before any tensor of the device exists.
        unsafe { c.disable_event_tracking() };
        keep_freed_memory(c)
            .map_err(|e| anyhow::anyhow!("--device: CUDA device {n}'s memory pool: {e}"))?;
    }
    Ok(d)
}

/// cudarc allocates stream-ordered (`cuMemAllocAsync`) from the device's default memory pool
/// wherever the GPU has pools (every GPU the lab targets). That pool's release threshold is 0:
/// each synchronisation gives freed memory back to the driver, and the next step allocates
/// it again. With the threshold at its maximum the pool keeps what a step frees for the next.
#[cfg(feature = "cuda")]
fn keep_freed_memory(c: &candle_core::CudaDevice) -> Result<()> {
    use candle_core::cuda::cudarc::driver::sys;
    let stream = c.cuda_stream();
    let ctx = stream.context();
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    ctx.bind_to_thread()?;
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold = u64::MAX;
    // SAFETY: the context is bound to this thread, `pool` receives the device's default pool,
    // and the attribute takes a pointer to a u64 that lives across the call.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()).result()?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()?;
    }
    Ok(())
}

/// f32 matmuls on TF32 tensor cores (on by default once a GPU is opened), or in full f32 as
/// the GPU checks compare them. Nothing to set without CUDA.
pub fn tf32(on: bool) {
    #[cfg(feature = "cuda")]
    candle_core::cuda::set_gemm_reduced_precision_f32(on);
    #[cfg(not(feature = "cuda"))]
    let _ = on;
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

/// The peak FLOP/s that MFU is measured against, and where the figure comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    pub flops: f64,
    pub source: String,
}

/// Dense peaks of known GPUs for f32 matmuls on TF32 tensor cores, from the vendors' data
/// sheets (SXM parts); bf16 is twice these (H100/H200 989 TFLOP/s, A100 312).
const GPU_TF32_PEAKS: &[(&str, f64)] = &[
    ("H200", 494e12),
    ("H100", 494e12),
    ("A100", 156e12),
    ("L40S", 183e12),
    ("A10", 62.5e12),
];

/// The peak of `d`: `--peak` when given; on the CPU the measured rate of a 1024³ f32 matmul
/// on this run's threads (best of 10 after 3 to warm the thread pool and the clock, ~0.1 s;
/// the CPU's bf16 runs through candle's generic gemm, so the f32 peak is the honest bound); on CUDA the table above by `nvidia-smi`'s GPU name, or
/// None when the GPU is not in it (then MFU is not logged, and the log says to pass --peak).
pub fn peak(d: &Device, given: Option<f64>, precision: Precision) -> Option<Peak> {
    if let Some(f) = given {
        return Some(Peak {
            flops: f,
            source: "--peak".into(),
        });
    }
    match d {
        Device::Cpu => {
            let n = 1024;
            let a = vec![1.0f32; n * n];
            let mut c = vec![0f32; n * n];
            let best = (0..13)
                .map(|_| {
                    let t = std::time::Instant::now();
                    crate::model::ops::sgemm(n, n, n, &mut c, false, &a, n, 1, &a, n, 1, true);
                    t.elapsed().as_secs_f64()
                })
                .skip(3)
                .fold(f64::INFINITY, f64::min);
            Some(Peak {
                flops: 2.0 * (n * n * n) as f64 / best,
                source: format!(
                    "measured: f32 matmul {n}³ on {} threads",
                    rayon::current_num_threads()
                ),
            })
        }
        _ => {
            let out = std::process::Command::new("nvidia-smi")
                .args(["--query-gpu=name", "--format=csv,noheader"])
                .output()
                .ok()?;
            let name = String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()?
                .to_string();
            let (times, kind) = match precision {
                Precision::Fp32 => (1.0, "TF32"),
                Precision::Bf16 => (2.0, "bf16"),
            };
            GPU_TF32_PEAKS
                .iter()
                .find(|(k, _)| name.contains(k))
                .map(|&(k, f)| Peak {
                    flops: f * times,
                    source: format!("{k} {kind} dense, data sheet ({name})"),
                })
        }
    }
}
