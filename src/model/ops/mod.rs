//! The lab's fused kernels, one file an op with its CPU forward and hand-written backward:
//! LayerNorm, causal self-attention, tanh-GELU, the linear layer, and the LM head fused with
//! masked cross-entropy, each a `Kernel` (kernel.rs, the one adapter to candle's custom ops);
//! this file holds what they share (slices, gemm, row blocks).
//! candle-nn's fused norms and softmax have no backward (candle #2168, #2977, #3011); these
//! do, and are tested for it.

use std::mem::MaybeUninit;

use candle_core::{CpuStorage, DType, Layout, Result, Shape, Tensor, bail};
use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::model::fastmath;

mod attention;
mod cross_entropy;
#[cfg(feature = "cuda")]
mod cublaslt;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(test)]
mod cuda_host;
mod embedding;
mod gelu;
mod head;
mod kernel;
mod layer_norm;
mod linear;
#[cfg(any(test, feature = "cuda"))]
mod lt_layout;
pub mod reference;
#[cfg(test)]
mod tests;

#[cfg(feature = "cuda")]
use cuda::CudaIn;
use kernel::{In, Kernel, apply, apply_no_bwd};

pub use attention::causal_attention;
pub use cross_entropy::cross_entropy;
pub use embedding::embedding;
pub use gelu::gelu;
pub use head::{head_cross_entropy, head_cross_entropy_runs, head_loss, head_loss_value};
pub use layer_norm::{layer_norm, layer_norm_runs};
pub use linear::{linear, linear_in, linear_runs};

/// The rows of each run of a pack, in order (SPEC §8 Revision, packs): run r's rows follow run
/// r − 1's and meet only run r's weights, the r-th of each weight's leading dimension. A run
/// alone is a pack of one, whose weights have no leading dimension. Every reduction over rows
/// starts afresh at a run's first row, so a run's figures in a pack are its figures alone, to
/// the bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runs(Vec<usize>);

impl Runs {
    /// One run of `rows` rows.
    pub fn one(rows: usize) -> Runs {
        Runs(vec![rows])
    }

    /// Runs of these many rows each, in order.
    pub fn new(rows: Vec<usize>) -> Runs {
        Runs(rows)
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No run at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Rows of all runs together.
    pub fn rows(&self) -> usize {
        self.0.iter().sum()
    }

    /// Each run's first row and row count.
    pub fn spans(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.0.iter().scan(0, |at, &n| {
            let s = (*at, n);
            *at += n;
            Some(s)
        })
    }

    /// The width of a weight of `len` values shared by no two runs, or an error naming `op`.
    fn width(&self, len: usize, op: &str) -> Result<usize> {
        if self.0.is_empty() || !len.is_multiple_of(self.0.len()) {
            bail!(
                "{op}: {len} weights do not split over {} runs",
                self.0.len()
            );
        }
        Ok(len / self.0.len())
    }
}

/// The CUDA kernels' launch shapes, as `layer_norm.cu`, `gelu.cu`, `attention.cu`,
/// `cross_entropy.cu` and `embedding.cu` define them (a host test
/// holds them equal).
#[cfg(any(test, feature = "cuda"))]
mod cuda_shape {
    /// Threads of a LayerNorm block, and rows of a backward block.
    pub const LN_THREADS: u32 = 128;
    pub const LN_ROWS: usize = 32;
    /// Threads of a GELU block, one an element.
    pub const GELU_THREADS: u32 = 256;
    /// Threads of an attention block (one block per sequence and head), the largest head
    /// size and the longest sequence its kernels take.
    pub const ATT_THREADS: u32 = 64;
    pub const ATT_MAX_D: usize = 128;
    pub const ATT_MAX_T: usize = 1024;
    /// Threads of a cross-entropy block, one block a row.
    pub const CE_THREADS: u32 = 256;
    /// Threads of an embedding block (one an element forward, a table column backward).
    pub const EMB_THREADS: u32 = 256;
}

/// a · b with both cast to `dtype` and the product cast back to f32 (in f32, a · b itself):
/// the products of a bf16 run.
pub fn matmul_in(a: &Tensor, b: &Tensor, dtype: DType) -> Result<Tensor> {
    a.to_dtype(dtype)?
        .matmul(&b.to_dtype(dtype)?)?
        .to_dtype(DType::F32)
}

/// `matmul_in` with the product written in f32 by the product itself: on CUDA one cuBLASLt
/// product that reads inputs already in `dtype` (transposed views too) as they are.
pub fn matmul_f32(a: &Tensor, b: &Tensor, dtype: DType) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if a.device().is_cuda() {
        return apply_no_bwd(cublaslt::Product(dtype), &[a, b]);
    }
    matmul_in(a, b, dtype)
}

/// LayerNorm epsilon (SPEC §5, as in HF GPT-2).
pub const LN_EPS: f32 = 1e-5;
/// Rows per parallel task; fixed so that reductions sum in the same order on any thread count.
const ROWS: usize = 64;

/// The contiguous f32 slice behind a storage, or an error naming the op.
fn f32s<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((a, b))) => Ok(&v[a..b]),
        (CpuStorage::F32(_), None) => bail!("{op}: input must be contiguous"),
        _ => bail!("{op}: input must be f32"),
    }
}

/// Run `f` on the contiguous f32 data of a CPU tensor without copying it.
pub fn with_host_f32<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    match (&*storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(c), Some((a, b))) => Ok(f(&c.as_slice::<f32>()?[a..b])),
        _ => bail!("expected a contiguous f32 tensor in host memory"),
    }
}

/// Split a backward op's flat output into one gradient per input, shaped like that input. The
/// output holds exactly those gradients: a shape that says otherwise is a kernel's bug.
fn unpack(packed: &Tensor, like: &[&Tensor]) -> Result<Vec<Tensor>> {
    let want: usize = like.iter().map(|t| t.elem_count()).sum();
    if packed.elem_count() != want {
        bail!(
            "a backward's packed gradients hold {} values, not the {want} of its inputs",
            packed.elem_count()
        );
    }
    let mut at = 0;
    like.iter()
        .map(|t| {
            let g = packed.narrow(0, at, t.elem_count())?.reshape(t.shape())?;
            at += t.elem_count();
            Ok(g)
        })
        .collect()
}

fn u32s<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [u32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::U32(v), Some((a, b))) => Ok(&v[a..b]),
        _ => bail!("{op}: targets must be contiguous u32"),
    }
}

fn threads() -> Parallelism {
    match rayon::current_num_threads() {
        1 => Parallelism::None,
        n => Parallelism::Rayon(n),
    }
}

/// `len` f32 that `write` initializes in full, without zeroing them first: the memset of
/// `vec![0.0; len]` was 7% of a 100k L = 16 step (`perf record`), on memory that every
/// kernel overwrites anyway.
fn written(len: usize, write: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    write(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: every caller's `write` initializes all `len` elements: its loops zip the buffer
    // with inputs of the same length, or cover every (row, column), or `sgemm_into` fills it.
    unsafe { v.set_len(len) };
    v
}

/// C (m×n, row-major) = [C +] A·B, where A and B are addressed by (row, column) strides.
/// This and `sgemm_into` are the entries into the gemm crate, the kernel candle's CPU matmul
/// uses.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    c: &mut [f32],
    accumulate: bool,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    par: bool,
) {
    assert!(c.len() >= m * n);
    gemm_at(
        m,
        n,
        k,
        c.as_mut_ptr(),
        accumulate,
        a,
        a_rs,
        a_cs,
        b,
        b_rs,
        b_cs,
        par,
    );
}

/// C = A·B into memory not yet initialized, which gemm writes without reading.
#[allow(clippy::too_many_arguments)]
fn sgemm_into(
    m: usize,
    n: usize,
    k: usize,
    c: &mut [MaybeUninit<f32>],
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    par: bool,
) {
    assert!(c.len() >= m * n);
    gemm_at(
        m,
        n,
        k,
        c.as_mut_ptr().cast(),
        false,
        a,
        a_rs,
        a_cs,
        b,
        b_rs,
        b_cs,
        par,
    );
}

/// The gemm call behind both, into `c`, which holds at least m×n f32 (read only when
/// accumulating).
#[allow(clippy::too_many_arguments)]
fn gemm_at(
    m: usize,
    n: usize,
    k: usize,
    c: *mut f32,
    accumulate: bool,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &[f32],
    b_rs: usize,
    b_cs: usize,
    par: bool,
) {
    assert!(m == 0 || k == 0 || a.len() > (m - 1) * a_rs + (k - 1) * a_cs);
    assert!(n == 0 || k == 0 || b.len() > (k - 1) * b_rs + (n - 1) * b_cs);
    // SAFETY: the asserts above bound every index gemm touches in a and b; both callers
    // check that c holds m×n.
    unsafe {
        gemm(
            m,
            n,
            k,
            c,
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            if par { threads() } else { Parallelism::None },
        )
    }
}
