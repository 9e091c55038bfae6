//! The launches of the lab ops' CUDA kernels (`layer_norm.cu`, `gelu.cu`, `attention.cu`,
//! `cross_entropy.cu`): inputs as the
//! contiguous f32 views of their storage, outputs freshly allocated on the inputs' device.

use candle_core::backend::{BackendDevice, BackendStorage};
use std::sync::{Arc, Mutex};

use candle_core::cuda::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDType, WrapErr};
use candle_core::{CudaDevice, CudaStorage, Layout, Result, bail};

use super::cuda_shape::{
    ATT_MAX_D, ATT_MAX_T, ATT_THREADS, CE_THREADS, EMB_THREADS, GELU_THREADS, LN_ROWS, LN_THREADS,
};

/// One contiguous input of a kernel on the GPU.
pub struct CudaIn<'a> {
    pub s: &'a CudaStorage,
    pub l: &'a Layout,
}

impl<'a> CudaIn<'a> {
    /// The f32 values, or an error naming `op`.
    pub fn f32(&self, op: &str) -> Result<CudaView<'a, f32>> {
        self.values(op)
    }

    /// The u32 values (targets), or an error naming `op`.
    pub fn u32(&self, op: &str) -> Result<CudaView<'a, u32>> {
        self.values(op)
    }

    /// The values of the contiguous input as `T`.
    fn values<T: CudaDType>(&self, op: &str) -> Result<CudaView<'a, T>> {
        let Some((a, b)) = self.l.contiguous_offsets() else {
            bail!("{op}: input must be contiguous")
        };
        Ok(self.s.as_cuda_slice::<T>()?.slice(a..b))
    }

    pub fn shape(&self) -> &'a candle_core::Shape {
        self.l.shape()
    }

    pub fn device(&self) -> &'a CudaDevice {
        self.s.device()
    }
}

/// `blocks` blocks of `threads` threads.
fn grid(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Enough blocks of `per` threads for one thread an element of `n`.
fn blocks(n: usize, per: usize) -> LaunchConfig {
    grid(n.div_ceil(per), per as u32)
}

/// LayerNorm of `rows` rows of `c` with weights `w` and `b` (c each): one block a row.
pub fn layer_norm(
    x: &CudaIn,
    w: &CudaIn,
    b: &CudaIn,
    rows: usize,
    c: usize,
) -> Result<CudaStorage> {
    const OP: &str = "lab-layer-norm";
    let dev = x.device();
    // SAFETY: every element is written below (a block a row, every column of it).
    let mut y = unsafe { dev.alloc::<f32>(rows * c) }?;
    if rows > 0 {
        let ptx = crate::device::ptx(dev, "lab-layer-norm", &LAYER_NORM_PTX)?;
        let f = dev.get_or_load_custom_func("lab_ln_fwd", OP, ptx)?;
        let (xv, wv, bv, c32) = (x.f32(OP)?, w.f32(OP)?, b.f32(OP)?, c as i32);
        let mut l = f.builder();
        l.arg(&xv).arg(&wv).arg(&bv).arg(&mut y).arg(&c32);
        // SAFETY: x and y hold rows·c values, w and b c each (checked by the caller).
        unsafe { l.launch(grid(rows, LN_THREADS)) }.w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

/// The LayerNorm backward: dx (rows·c), then dw and db (c each), in one flat buffer as the CPU
/// kernel packs them. dw and db are summed per block of `LN_ROWS` rows, then over the blocks
/// in order by a second launch.
pub fn layer_norm_bwd(
    x: &CudaIn,
    w: &CudaIn,
    dy: &CudaIn,
    rows: usize,
    c: usize,
) -> Result<CudaStorage> {
    const OP: &str = "lab-layer-norm-bwd";
    let dev = x.device();
    let n = rows * c;
    if rows == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(
            dev.alloc_zeros::<f32>(2 * c)?,
            dev.clone(),
        ));
    }
    let ptx = crate::device::ptx(dev, "lab-layer-norm", &LAYER_NORM_PTX)?;
    let bwd = dev.get_or_load_custom_func("lab_ln_bwd", "lab-layer-norm", ptx)?;
    let sum = dev.get_or_load_custom_func("lab_ln_bwd_sum", "lab-layer-norm", ptx)?;
    let nblocks = rows.div_ceil(LN_ROWS);
    // SAFETY: the first launch writes every dx and every block's 2c partial sums, the second
    // every one of the 2c sums after dx.
    let mut out = unsafe { dev.alloc::<f32>(n + 2 * c) }?;
    let mut partials = unsafe { dev.alloc::<f32>(nblocks * 2 * c) }?;
    let (xv, wv, dyv) = (x.f32(OP)?, w.f32(OP)?, dy.f32(OP)?);
    let (r32, c32, b32, c2) = (rows as i32, c as i32, nblocks as i32, 2 * c as i32);
    let mut l = bwd.builder();
    l.arg(&xv)
        .arg(&wv)
        .arg(&dyv)
        .arg(&mut out)
        .arg(&mut partials)
        .arg(&r32)
        .arg(&c32);
    // SAFETY: x, dy and dx hold rows·c values, w c, the partials a block's 2c each.
    unsafe { l.launch(grid(nblocks, LN_THREADS)) }.w()?;
    let mut dwdb = out.slice_mut(n..);
    let mut l = sum.builder();
    l.arg(&partials).arg(&b32).arg(&c2).arg(&mut dwdb);
    // SAFETY: the partials hold nblocks·2c values, dwdb 2c.
    unsafe { l.launch(blocks(2 * c, 256)) }.w()?;
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// GELU of x with `dy` None, or its backward dx: one thread an element.
pub fn gelu(x: &CudaIn, dy: Option<&CudaIn>) -> Result<CudaStorage> {
    const OP: &str = "lab-gelu";
    let dev = x.device();
    let xv = x.f32(OP)?;
    let n = xv.len();
    // SAFETY: every element is written below.
    let mut y = unsafe { dev.alloc::<f32>(n) }?;
    if n > 0 {
        let ptx = crate::device::ptx(dev, OP, &GELU_PTX)?;
        let n64 = n as i64;
        let cfg = blocks(n, GELU_THREADS as usize);
        match dy {
            None => {
                let f = dev.get_or_load_custom_func("lab_gelu_fwd", OP, ptx)?;
                let mut l = f.builder();
                l.arg(&xv).arg(&mut y).arg(&n64);
                // SAFETY: x and y hold n values.
                unsafe { l.launch(cfg) }.w()?;
            }
            Some(dy) => {
                let dyv = dy.f32(OP)?;
                if dyv.len() != n {
                    bail!("{OP}: {n} inputs and {} gradients", dyv.len());
                }
                let f = dev.get_or_load_custom_func("lab_gelu_bwd", OP, ptx)?;
                let mut l = f.builder();
                l.arg(&xv).arg(&dyv).arg(&mut y).arg(&n64);
                // SAFETY: x, dy and dx hold n values.
                unsafe { l.launch(cfg) }.w()?;
            }
        }
    }
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}

/// The spans last uploaded (each sequence's first row, then each one's length, as i32) on
/// the device they went to.
type Uploaded = (Vec<(usize, usize)>, CudaDevice, Arc<CudaSlice<i32>>);
static SPANS: Mutex<Option<Uploaded>> = Mutex::new(None);

/// `spans` on `dev` as the attention kernels read them (the starts, then the lengths): one
/// upload while they stay the same, so a step's layers share one each way (a new batch's are
/// uploaded to a fresh buffer; the old one is freed in stream order after its last reader).
fn spans_on(dev: &CudaDevice, spans: &[(usize, usize)]) -> Result<Arc<CudaSlice<i32>>> {
    let mut last = SPANS
        .lock()
        .map_err(|_| candle_core::Error::Msg("lab-causal-attention: spans lock".into()))?;
    if let Some((s, d, buf)) = last.as_ref()
        && s == spans
        && d.same_device(dev)
    {
        return Ok(buf.clone());
    }
    let host: Vec<i32> = (spans.iter().map(|s| s.0 as i32))
        .chain(spans.iter().map(|s| s.1 as i32))
        .collect();
    // SAFETY: written in full by the copy below.
    let mut buf = unsafe { dev.alloc::<i32>(host.len()) }?;
    dev.memcpy_htod(&host, &mut buf)?;
    let buf = Arc::new(buf);
    *last = Some((spans.to_vec(), dev.clone(), buf.clone()));
    Ok(buf)
}

/// Causal attention of packed sequences (`spans`: each one's first row and length) over
/// q|k|v rows (N, 3E) with `n_head` heads: the output (N, E), or with `dy` (N, E) the gradient
/// of q|k|v (N, 3E). One block per (sequence, head).
pub fn attention(
    qkv: &CudaIn,
    dy: Option<&CudaIn>,
    spans: &[(usize, usize)],
    n_head: usize,
) -> Result<CudaStorage> {
    const OP: &str = "lab-causal-attention";
    let dev = qkv.device();
    let (n, e3) = qkv.shape().dims2()?;
    let e = e3 / 3;
    let hd = e / n_head.max(1);
    if n_head == 0 || hd * n_head != e || hd > ATT_MAX_D {
        bail!("{OP}: {n_head} heads of {e}: the CUDA kernel takes heads of at most {ATT_MAX_D}");
    }
    if let Some(&(_, t)) = spans.iter().find(|s| s.1 > ATT_MAX_T) {
        bail!("{OP}: a sequence of {t}; the CUDA kernel takes at most {ATT_MAX_T}");
    }
    let out_len = if dy.is_some() { n * e3 } else { n * e };
    // SAFETY: every row of every sequence is written below: a thread per query row writes its
    // output (or dq), a thread per key row its dk and dv; the spans cover the N rows.
    let mut out = unsafe { dev.alloc::<f32>(out_len) }?;
    if spans.is_empty() || n == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()));
    }
    let on_device = spans_on(dev, spans)?;
    let k = spans.len();
    let (d_starts, d_lens) = (on_device.slice(0..k), on_device.slice(k..2 * k));
    let ptx = crate::device::ptx(dev, OP, &ATTENTION_PTX)?;
    let qv = qkv.f32(OP)?;
    let (e32, hd32, scale) = (e as i32, hd as i32, 1.0f32 / (hd as f32).sqrt());
    let cfg = LaunchConfig {
        grid_dim: (spans.len() as u32, n_head as u32, 1),
        block_dim: (ATT_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    match dy {
        None => {
            let f = dev.get_or_load_custom_func("lab_att_fwd", OP, ptx)?;
            let mut l = f.builder();
            l.arg(&qv)
                .arg(&mut out)
                .arg(&d_starts)
                .arg(&d_lens)
                .arg(&e32)
                .arg(&hd32)
                .arg(&scale);
            // SAFETY: qkv holds N·3E values, out N·E, the spans lie within N rows.
            unsafe { l.launch(cfg) }.w()?;
        }
        Some(dy) => {
            let dyv = dy.f32(OP)?;
            if dyv.len() != n * e {
                bail!("{OP}: {} output gradients for {n} rows of {e}", dyv.len());
            }
            let f = dev.get_or_load_custom_func("lab_att_bwd", OP, ptx)?;
            let mut l = f.builder();
            l.arg(&qv)
                .arg(&dyv)
                .arg(&mut out)
                .arg(&d_starts)
                .arg(&d_lens)
                .arg(&e32)
                .arg(&hd32)
                .arg(&scale);
            // SAFETY: qkv and out hold N·3E values, dy N·E, the spans lie within N rows.
            unsafe { l.launch(cfg) }.w()?;
        }
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// What `cross_entropy` computes of each row.
pub enum Ce<'a> {
    /// Its loss (n values).
    Loss,
    /// Its logits' gradient by its loss gradient of `dloss` (n × v).
    Grad(&'a CudaIn<'a>),
    /// Its logits' gradient by this loss gradient, then its loss times it (n·v + n).
    GradAndLoss(f32),
}

/// Cross-entropy of the rows of x (n × v) against their targets, as `how` says: one block a
/// row.
pub fn cross_entropy(x: &CudaIn, targets: &CudaIn, how: Ce) -> Result<CudaStorage> {
    const OP: &str = "lab-cross-entropy";
    let dev = x.device();
    let (n, v) = x.shape().dims2()?;
    let (xv, tv) = (x.f32(OP)?, targets.u32(OP)?);
    if tv.len() != n {
        bail!("{OP}: {} targets for {n} rows", tv.len());
    }
    let out_len = match how {
        Ce::Loss => n,
        Ce::Grad(_) => n * v,
        Ce::GradAndLoss(_) => n * v + n,
    };
    // SAFETY: a block a row writes that row's loss, or every value of its gradient (and its
    // loss).
    let mut out = unsafe { dev.alloc::<f32>(out_len) }?;
    if n == 0 || v == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()));
    }
    let ptx = crate::device::ptx(dev, OP, &CROSS_ENTROPY_PTX)?;
    let v32 = v as i32;
    // The kernel reads no dloss, and writes no loss, through a null pointer.
    let null = 0u64;
    let (gv, scale, bwd);
    match how {
        Ce::Loss => {
            let f = dev.get_or_load_custom_func("lab_ce_fwd", OP, ptx)?;
            let mut l = f.builder();
            l.arg(&xv).arg(&tv).arg(&mut out).arg(&v32);
            // SAFETY: x holds n rows of v, targets and the losses n values.
            unsafe { l.launch(grid(n, CE_THREADS)) }.w()?;
        }
        Ce::Grad(g) => {
            gv = g.f32(OP)?;
            if gv.len() != n {
                bail!("{OP}: {} loss gradients for {n} rows", gv.len());
            }
            (scale, bwd) = (0f32, dev.get_or_load_custom_func("lab_ce_bwd", OP, ptx)?);
            let mut l = bwd.builder();
            l.arg(&xv)
                .arg(&tv)
                .arg(&gv)
                .arg(&scale)
                .arg(&mut out)
                .arg(&null)
                .arg(&v32);
            // SAFETY: x and dx hold n rows of v, targets and dloss n values; no loss written.
            unsafe { l.launch(grid(n, CE_THREADS)) }.w()?;
        }
        Ce::GradAndLoss(s) => {
            (scale, bwd) = (s, dev.get_or_load_custom_func("lab_ce_bwd", OP, ptx)?);
            let (mut dx, mut loss) = out.split_at_mut(n * v);
            let mut l = bwd.builder();
            l.arg(&xv)
                .arg(&tv)
                .arg(&null)
                .arg(&scale)
                .arg(&mut dx)
                .arg(&mut loss)
                .arg(&v32);
            // SAFETY: x and dx hold n rows of v, targets and the losses n values; no dloss
            // read.
            unsafe { l.launch(grid(n, CE_THREADS)) }.w()?;
        }
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// wte[ids] + wpe[pos] (n × e) for `tok` (2n: the ids, then the positions): a thread an
/// element.
pub fn embedding(
    wte: &CudaIn,
    wpe: &CudaIn,
    tok: &CudaIn,
    n: usize,
    e: usize,
) -> Result<CudaStorage> {
    const OP: &str = "lab-embedding";
    let dev = wte.device();
    // SAFETY: every element is written below.
    let mut x = unsafe { dev.alloc::<f32>(n * e) }?;
    if n * e > 0 {
        let ptx = crate::device::ptx(dev, OP, &EMBEDDING_PTX)?;
        let f = dev.get_or_load_custom_func("lab_emb_fwd", OP, ptx)?;
        let (wv, pv, tv) = (wte.f32(OP)?, wpe.f32(OP)?, tok.u32(OP)?);
        let (n64, e32) = (n as i64, e as i32);
        let mut l = f.builder();
        l.arg(&wv).arg(&pv).arg(&tv).arg(&mut x).arg(&n64).arg(&e32);
        // SAFETY: x holds n·e values, tok 2n indices into the tables (the lab's own ids).
        unsafe { l.launch(blocks(n * e, EMB_THREADS as usize)) }.w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(x, dev.clone()))
}

/// The gradients of wte (`v` values) and wpe (`p`), packed, from dx (n × e): zeroed, then a
/// thread a column of each table adds the rows in order.
pub fn embedding_grads(
    tok: &CudaIn,
    dx: &CudaIn,
    (v, p): (usize, usize),
    e: usize,
) -> Result<CudaStorage> {
    const OP: &str = "lab-embedding-bwd";
    let dev = dx.device();
    let (tv, dv) = (tok.u32(OP)?, dx.f32(OP)?);
    let n = tv.len() / 2;
    if dv.len() != n * e {
        bail!("{OP}: {} gradients for {n} rows of {e}", dv.len());
    }
    let mut out = dev.alloc_zeros::<f32>(v + p)?;
    if n * e > 0 {
        let ptx = crate::device::ptx(dev, OP, &EMBEDDING_PTX)?;
        let f = dev.get_or_load_custom_func("lab_emb_bwd", OP, ptx)?;
        let (n64, e32) = (n as i64, e as i32);
        let (mut dwte, mut dwpe) = out.split_at_mut(v);
        let mut l = f.builder();
        l.arg(&dv)
            .arg(&tv)
            .arg(&mut dwte)
            .arg(&mut dwpe)
            .arg(&n64)
            .arg(&e32);
        // SAFETY: dx holds n·e values, tok 2n indices into tables of v/e and p/e rows.
        unsafe { l.launch(blocks(2 * e, EMB_THREADS as usize)) }.w()?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// Each module's PTX: Hopper's own, and `compute_80`'s for any other GPU from the A100 on.
static LAYER_NORM_PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/layer_norm.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/layer_norm.compute_80.ptx")),
};
static GELU_PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/gelu.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/gelu.compute_80.ptx")),
};
static ATTENTION_PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/attention.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/attention.compute_80.ptx")),
};
static EMBEDDING_PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/embedding.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/embedding.compute_80.ptx")),
};
static CROSS_ENTROPY_PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/cross_entropy.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/cross_entropy.compute_80.ptx")),
};
