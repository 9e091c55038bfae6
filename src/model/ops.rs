//! Fused CPU kernels with hand-written backward passes: LayerNorm, causal self-attention,
//! tanh-GELU, and the LM head fused with masked cross-entropy. candle-nn's fused norms and
//! softmax have no backward (candle #2168, #2977, #3011); these do, and are tested for it.

use std::mem::MaybeUninit;

use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor, bail};
use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::model::{fastmath, profile};

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

// ---------------------------------------------------------------- LayerNorm

/// y = (x − mean) / √(var + ε) · w + b over the last dimension.
struct LayerNorm;

#[inline(always)]
fn ln_row_stats(x: &[f32]) -> (f32, f32) {
    let c = x.len() as f32;
    let mean = fastmath::sum(x) / c;
    // Σ (x − mean)² in runs of 128, each summed as `fastmath::dot` sums (the bits of a buffer
    // of deviations dotted with itself, without the buffer: its stores held each row up).
    let mut var = 0f32;
    for chunk in x.chunks(128) {
        var += fastmath::dot_sq_dev(chunk, mean);
    }
    let var = var / c;
    (mean, 1.0 / (var + LN_EPS).sqrt())
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "lab-layer-norm"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let b = f32s(bs, bl, self.name())?;
        let c = w.len();
        let y = written(x.len(), |y| {
            y.par_chunks_mut(c * ROWS)
                .zip(x.par_chunks(c * ROWS))
                .for_each(|(yc, xc)| {
                    fastmath::wide(
                        #[inline(always)]
                        || {
                            for (yr, xr) in yc.chunks_mut(c).zip(xc.chunks(c)) {
                                let (mean, rstd) = ln_row_stats(xr);
                                for (((y, x), w), b) in yr.iter_mut().zip(xr).zip(w).zip(b) {
                                    y.write((x - mean) * rstd * w + b);
                                }
                            }
                        },
                    )
                })
        });
        Ok((CpuStorage::F32(y), xl.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let packed = x.apply_op3_no_bwd(w, &dy.contiguous()?, &LayerNormBwd)?;
        let mut g = unpack(&packed, &[x, w, b])?.into_iter();
        Ok((g.next(), g.next(), g.next()))
    }
}

/// The LayerNorm backward as one pass: dx, then dw and db, packed in one flat tensor.
struct LayerNormBwd;

impl CustomOp3 for LayerNormBwd {
    fn name(&self) -> &'static str {
        "lab-layer-norm-bwd"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        dys: &CpuStorage,
        dyl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let dy = f32s(dys, dyl, self.name())?;
        let c = w.len();
        let n = x.len();
        let out = written(n + 2 * c, |out| {
            let (dx, tail) = out.split_at_mut(n);
            ln_bwd_rows(dx, tail, x, w, dy)
        });
        Ok((CpuStorage::F32(out), Shape::from(n + 2 * c)))
    }
}

/// dx of every row into `dx`, and Σ_rows dy·x̂ then Σ_rows dy into `dwb` (2C).
fn ln_bwd_rows(
    dx: &mut [MaybeUninit<f32>],
    dwb: &mut [MaybeUninit<f32>],
    x: &[f32],
    w: &[f32],
    dy: &[f32],
) {
    let c = w.len();
    let partials: Vec<Vec<f32>> = dx
        .par_chunks_mut(c * ROWS)
        .zip(x.par_chunks(c * ROWS).zip(dy.par_chunks(c * ROWS)))
        .map(|(dxc, (xc, dyc))| {
            fastmath::wide(
                #[inline(always)]
                || {
                    let mut acc = vec![0f32; 2 * c];
                    let mut xhat = vec![0f32; c];
                    for ((dxr, xr), dyr) in dxc.chunks_mut(c).zip(xc.chunks(c)).zip(dyc.chunks(c)) {
                        let (mean, rstd) = ln_row_stats(xr);
                        // Zipped slices, not indices: bounds checks kept these loops
                        // scalar. The sums m1, m2 run in index order, on their own.
                        let (dw, db) = acc.split_at_mut(c);
                        for ((((xh, x), g), dw), db) in
                            xhat.iter_mut().zip(xr).zip(dyr).zip(dw).zip(db)
                        {
                            *xh = (x - mean) * rstd;
                            *dw += g * *xh;
                            *db += g;
                        }
                        let (mut m1, mut m2) = (0f32, 0f32);
                        for ((g, w), xh) in dyr.iter().zip(w).zip(&xhat) {
                            let g = g * w;
                            m1 += g;
                            m2 += g * xh;
                        }
                        let (m1, m2) = (m1 / c as f32, m2 / c as f32);
                        for (((dx, g), w), xh) in dxr.iter_mut().zip(dyr).zip(w).zip(&xhat) {
                            dx.write((g * w - m1 - xh * m2) * rstd);
                        }
                    }
                    acc
                },
            )
        })
        .collect();
    let mut sums = vec![0f32; 2 * c];
    for p in partials {
        for (t, v) in sums.iter_mut().zip(p) {
            *t += v;
        }
    }
    dwb.write_copy_of_slice(&sums);
}

pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op3(w, b, LayerNorm)
}

// ---------------------------------------------------------------- attention

/// Causal multi-head self-attention over packed q|k|v rows (N, 3E), as HF GPT-2 lays out the
/// `c_attn` output, for sequences of lengths `lens` stored back to back. Returns (N, E) with
/// heads concatenated. The forward keeps each sequence's gathered heads and probabilities for
/// the backward, which then recomputes nothing.
struct CausalAttention {
    n_head: usize,
    lens: Vec<usize>,
    saved: std::sync::Mutex<Vec<Heads>>,
}

/// The (start row, length) of every sequence of lengths `lens` stored back to back.
fn spans(lens: &[usize]) -> Vec<(usize, usize)> {
    let mut start = 0;
    lens.iter()
        .map(|&l| {
            let s = (start, l);
            start += l;
            s
        })
        .collect()
}

/// Keys per block: one 256-bit vector of f32.
const KB: usize = fastmath::LANES;
type Block = [f32; KB];

/// Every head of one sequence, gathered so that the attention's inner loops work on whole
/// blocks of 8 keys held in one vector register: q row-major (T×hd), k and v transposed into
/// hd rows of NB key blocks, per head. Head sizes are small (3 to 88 in the studies), so loops
/// over the head dimension would use a fraction of a vector; blocks of keys do not, and their
/// length is known to the compiler, so no loop has a scalar tail. Query t works on the blocks
/// up to the one holding key t; keys after t have probability exactly 0.
struct Heads {
    t_len: usize,
    hd: usize,
    /// Key blocks per row: T rounded up to whole blocks.
    nb: usize,
    q: Vec<f32>,
    kt: Vec<Block>,
    vt: Vec<Block>,
    /// Causal softmax, T rows of NB blocks per head; row t is 0 after key t.
    p: Vec<Block>,
}

/// Σ of a block's lanes, in a fixed order.
#[inline(always)]
fn hsum(b: &Block) -> f32 {
    let h: [f32; 4] = std::array::from_fn(|l| b[l] + b[l + 4]);
    (h[0] + h[2]) + (h[1] + h[3])
}

/// acc += a·x, lane by lane.
#[inline(always)]
fn fma_block(acc: &mut Block, a: f32, x: &Block) {
    for l in 0..KB {
        acc[l] += a * x[l];
    }
}

/// Σ_b x[b]·y[b] over whole blocks.
#[inline(always)]
fn dot_blocks(x: &[Block], y: &[Block]) -> f32 {
    let mut acc = [0f32; KB];
    for (x, y) in x.iter().zip(y) {
        for l in 0..KB {
            acc[l] += x[l] * y[l];
        }
    }
    hsum(&acc)
}

impl Heads {
    /// Gather the `n_head` heads of the q|k|v rows `x` (T rows of 3E) and compute their
    /// probabilities.
    #[inline(always)]
    fn load(x: &[f32], t_len: usize, e: usize, n_head: usize) -> Heads {
        let hd = e / n_head;
        let nb = t_len.div_ceil(KB);
        let mut s = Heads {
            t_len,
            hd,
            nb,
            q: vec![0.0; n_head * t_len * hd],
            kt: vec![[0.0; KB]; e * nb],
            vt: vec![[0.0; KB]; e * nb],
            p: vec![[0.0; KB]; n_head * t_len * nb],
        };
        for t in 0..t_len {
            let row = &x[t * 3 * e..][..3 * e];
            for h in 0..n_head {
                s.q[(h * t_len + t) * hd..][..hd].copy_from_slice(&row[h * hd..][..hd]);
            }
            // Row c of kt and vt is channel c of the keys and values: head c / hd.
            for c in 0..e {
                s.kt[c * nb + t / KB][t % KB] = row[e + c];
                s.vt[c * nb + t / KB][t % KB] = row[2 * e + c];
            }
        }
        let scale = 1.0 / (hd as f32).sqrt();
        for h in 0..n_head {
            for t in 0..t_len {
                let n = Heads::blocks(t);
                let q = &s.q[(h * t_len + t) * hd..][..hd];
                let kt = &s.kt[h * hd * nb..][..hd * nb];
                let row = &mut s.p[(h * t_len + t) * nb..][..n];
                for (b, out) in row.iter_mut().enumerate() {
                    let mut acc = [0f32; KB];
                    for (i, &qi) in q.iter().enumerate() {
                        fma_block(&mut acc, qi * scale, &kt[i * nb + b]);
                    }
                    *out = acc;
                }
                softmax_blocks(row, t);
            }
        }
        s
    }

    /// The blocks query t works on.
    #[inline(always)]
    fn blocks(t: usize) -> usize {
        t / KB + 1
    }

    /// Head h's query t.
    #[inline(always)]
    fn q(&self, h: usize, t: usize) -> &[f32] {
        &self.q[(h * self.t_len + t) * self.hd..][..self.hd]
    }

    /// Head h's query t's probabilities, over its blocks.
    #[inline(always)]
    fn probs(&self, h: usize, t: usize) -> &[Block] {
        &self.p[(h * self.t_len + t) * self.nb..][..Heads::blocks(t)]
    }

    /// Head h's rows of a transposed buffer (hd rows of NB blocks).
    #[inline(always)]
    fn rows<'a>(&self, buf: &'a [Block], h: usize) -> &'a [Block] {
        &buf[h * self.hd * self.nb..][..self.hd * self.nb]
    }
}

/// Softmax in place over keys 0..=t of a row of blocks; the rest of the last block is 0.
/// Branch-free: the causal cut is a lane select against `t % KB`, and the maximum is a lane
/// max then a tree over the lanes (the maximum of finite scores is the same in any order).
#[inline(always)]
fn softmax_blocks(row: &mut [Block], t: usize) {
    let r = t % KB;
    let (last, full) = row.split_last_mut().expect("a query sees key 0");
    let mut m: Block = std::array::from_fn(|l| if l <= r { last[l] } else { f32::NEG_INFINITY });
    for blk in full.iter() {
        for (m, &v) in m.iter_mut().zip(blk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let max = |a: f32, b: f32| if b > a { b } else { a };
    let m4: [f32; 4] = std::array::from_fn(|l| max(m[l], m[l + 4]));
    let m = max(max(m4[0], m4[2]), max(m4[1], m4[3]));
    let mut sum = [0f32; KB];
    for blk in full.iter_mut() {
        for (s, v) in sum.iter_mut().zip(blk.iter_mut()) {
            *v = fastmath::exp(*v - m);
            *s += *v;
        }
    }
    for (l, (s, v)) in sum.iter_mut().zip(last.iter_mut()).enumerate() {
        let x = fastmath::exp(*v - m);
        *v = if l <= r { x } else { 0.0 };
        *s += *v;
    }
    let inv = 1.0 / hsum(&sum);
    for blk in row.iter_mut() {
        for v in blk.iter_mut() {
            *v *= inv;
        }
    }
}

/// Split `out` (rows of `width`) into the disjoint row ranges of `spans`.
fn split_rows<'a, T>(
    mut out: &'a mut [T],
    spans: &[(usize, usize)],
    width: usize,
) -> Vec<&'a mut [T]> {
    let mut parts = Vec::with_capacity(spans.len());
    for &(_, l) in spans {
        let (head, tail) = std::mem::take(&mut out).split_at_mut(l * width);
        parts.push(head);
        out = tail;
    }
    parts
}

/// Every sequence's gathered heads, in parallel.
fn gather(qkv: &[f32], spans: &[(usize, usize)], e: usize, n_head: usize) -> Vec<Heads> {
    spans
        .par_iter()
        .map(|&(start, t_len)| {
            fastmath::wide(
                #[inline(always)]
                || {
                    Heads::load(
                        &qkv[start * 3 * e..(start + t_len) * 3 * e],
                        t_len,
                        e,
                        n_head,
                    )
                },
            )
        })
        .collect()
}

impl CustomOp1 for CausalAttention {
    fn name(&self) -> &'static str {
        "lab-causal-attention"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let qkv = f32s(s, l, self.name())?;
        let (n, e3) = l.shape().dims2()?;
        let e = e3 / 3;
        let spans = spans(&self.lens);
        if self.lens.iter().sum::<usize>() != n {
            bail!(
                "{}: the sequence lengths do not add up to {n} rows",
                self.name()
            );
        }
        let heads = gather(qkv, &spans, e, self.n_head);
        let y = written(n * e, |y| {
            split_rows(y, &spans, e)
                .into_par_iter()
                .zip(heads.par_iter())
                .for_each(|(yb, hb)| {
                    fastmath::wide(
                        #[inline(always)]
                        || {
                            let hd = hb.hd;
                            for h in 0..self.n_head {
                                let vt = hb.rows(&hb.vt, h);
                                for t in 0..hb.t_len {
                                    let (p, n) = (hb.probs(h, t), Heads::blocks(t));
                                    for i in 0..hd {
                                        yb[t * e + h * hd + i]
                                            .write(dot_blocks(p, &vt[i * hb.nb..][..n]));
                                    }
                                }
                            }
                        },
                    )
                })
        });
        *self.saved.lock().expect("attention heads") = heads;
        Ok((CpuStorage::F32(y), Shape::from((n, e))))
    }

    fn bwd(&self, qkv: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let heads = std::mem::take(&mut *self.saved.lock().expect("attention heads"));
        let d = qkv.apply_op2_no_bwd(
            &dy.contiguous()?,
            &CausalAttentionBwd {
                n_head: self.n_head,
                spans: spans(&self.lens),
                heads: std::sync::Mutex::new(heads),
            },
        )?;
        Ok(Some(d))
    }
}

/// d(qkv) from dy and the forward's saved heads (gathered again if they are gone: a second
/// backward through the same graph).
struct CausalAttentionBwd {
    n_head: usize,
    spans: Vec<(usize, usize)>,
    heads: std::sync::Mutex<Vec<Heads>>,
}

impl candle_core::CustomOp2 for CausalAttentionBwd {
    fn name(&self) -> &'static str {
        "lab-causal-attention-bwd"
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let qkv = f32s(s, l, self.name())?;
        let dy = f32s(ds, dl, self.name())?;
        let (_, e3) = l.shape().dims2()?;
        let e = e3 / 3;
        let hd = e / self.n_head;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut heads = std::mem::take(&mut *self.heads.lock().expect("attention heads"));
        if heads.len() != self.spans.len() {
            heads = gather(qkv, &self.spans, e, self.n_head);
        }
        let dqkv = written(qkv.len(), |dqkv| {
            split_rows(dqkv, &self.spans, e3)
                .into_par_iter()
                .zip(self.spans.par_iter().zip(heads.par_iter()))
                .for_each(|(dxb, (&(start, t_len), hb))| {
                    fastmath::wide(
                        #[inline(always)]
                        || {
                            let dyb = &dy[start * e..(start + t_len) * e];
                            let nb = hb.nb;
                            // Every query's ds, kept for the keys' sums after the queries.
                            let (mut dp, mut ds) =
                                (vec![[0f32; KB]; nb], vec![[0f32; KB]; t_len * nb]);
                            for h in 0..self.n_head {
                                let (kt, vt) = (hb.rows(&hb.kt, h), hb.rows(&hb.vt, h));
                                for t in 0..t_len {
                                    let (p, n) = (hb.probs(h, t), Heads::blocks(t));
                                    let dyt = &dyb[t * e + h * hd..][..hd];
                                    // dp_j = dy_t · v_j
                                    let dp = &mut dp[..n];
                                    for (b, out) in dp.iter_mut().enumerate() {
                                        let mut acc = [0f32; KB];
                                        for (i, &g) in dyt.iter().enumerate() {
                                            fma_block(&mut acc, g, &vt[i * nb + b]);
                                        }
                                        *out = acc;
                                    }
                                    // ds_j = scale · p_j (dp_j − Σ p dp), 0 after key t with p
                                    let dot = dot_blocks(p, dp);
                                    let ds = &mut ds[t * nb..][..n];
                                    for b in 0..n {
                                        for l in 0..KB {
                                            ds[b][l] = p[b][l] * (dp[b][l] - dot) * scale;
                                        }
                                    }
                                    // dq_t = Σ_j ds_j k_j
                                    for i in 0..hd {
                                        dxb[t * e3 + h * hd + i]
                                            .write(dot_blocks(ds, &kt[i * nb..][..n]));
                                    }
                                }
                                // dk_j = Σ_t ds_tj q_t and dv_j = Σ_t p_tj dy_t over the
                                // queries t that see key block b (t ≥ b·KB), in t order, each
                                // block summed in registers and written once.
                                for b in 0..nb {
                                    let keys = (b * KB..t_len.min((b + 1) * KB)).enumerate();
                                    for i in 0..hd {
                                        let (mut dk, mut dv) = ([0f32; KB], [0f32; KB]);
                                        for t in b * KB..t_len {
                                            fma_block(&mut dk, hb.q(h, t)[i], &ds[t * nb + b]);
                                            fma_block(
                                                &mut dv,
                                                dyb[t * e + h * hd + i],
                                                &hb.probs(h, t)[b],
                                            );
                                        }
                                        for (l, j) in keys.clone() {
                                            dxb[j * e3 + e + h * hd + i].write(dk[l]);
                                            dxb[j * e3 + 2 * e + h * hd + i].write(dv[l]);
                                        }
                                    }
                                }
                            }
                        },
                    )
                })
        });
        Ok((CpuStorage::F32(dqkv), l.shape().clone()))
    }
}

/// Causal attention of packed sequences: `qkv` (N, 3E), `lens` summing to N.
pub fn causal_attention(qkv: &Tensor, lens: &[usize], n_head: usize) -> Result<Tensor> {
    qkv.contiguous()?.apply_op1(CausalAttention {
        n_head,
        lens: lens.to_vec(),
        saved: Default::default(),
    })
}

// ---------------------------------------------------------------- GELU

const GELU_C: f32 = 0.797_884_6; // √(2/π)
const GELU_A: f32 = 0.044_715;

/// tanh(√(2/π)(x + 0.044715x³)), the inner term of both GELU passes.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    fastmath::tanh(GELU_C * (x + GELU_A * x * x * x))
}

/// GELU with the tanh approximation (HF `gelu_new`). The forward keeps each element's tanh for
/// the backward, which then computes no tanh of its own.
#[derive(Default)]
struct Gelu {
    tanh: std::sync::Mutex<Vec<f32>>,
}

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "lab-gelu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(s, l, self.name())?;
        let mut th = Vec::new();
        let y = written(x.len(), |y| {
            th = written(x.len(), |th| {
                y.par_chunks_mut(1 << 14)
                    .zip(th.par_chunks_mut(1 << 14).zip(x.par_chunks(1 << 14)))
                    .for_each(|(yc, (tc, xc))| {
                        fastmath::wide(
                            #[inline(always)]
                            || {
                                for ((y, t), &x) in yc.iter_mut().zip(tc).zip(xc) {
                                    let th = gelu_tanh(x);
                                    t.write(th);
                                    y.write(0.5 * x * (1.0 + th));
                                }
                            },
                        )
                    })
            })
        });
        *self.tanh.lock().expect("gelu tanh") = th;
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let tanh = std::mem::take(&mut *self.tanh.lock().expect("gelu tanh"));
        Ok(Some(x.apply_op2_no_bwd(
            &dy.contiguous()?,
            &GeluBwd {
                tanh: std::sync::Mutex::new(tanh),
            },
        )?))
    }
}

/// dx from dy and the forward's tanh (computed again if it is gone: a second backward).
struct GeluBwd {
    tanh: std::sync::Mutex<Vec<f32>>,
}

impl candle_core::CustomOp2 for GeluBwd {
    fn name(&self) -> &'static str {
        "lab-gelu-bwd"
    }

    fn cpu_fwd(
        &self,
        s: &CpuStorage,
        l: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(s, l, self.name())?;
        let dy = f32s(ds, dl, self.name())?;
        let mut tanh = std::mem::take(&mut *self.tanh.lock().expect("gelu tanh"));
        if tanh.len() != x.len() {
            tanh = x.iter().map(|&x| gelu_tanh(x)).collect();
        }
        let dx = written(x.len(), |dx| {
            dx.par_chunks_mut(1 << 14)
                .zip(x.par_chunks(1 << 14).zip(dy.par_chunks(1 << 14)))
                .zip(tanh.par_chunks(1 << 14))
                .for_each(|((dc, (xc, gc)), tc)| {
                    fastmath::wide(
                        #[inline(always)]
                        || {
                            for (((d, &x), &g), &th) in dc.iter_mut().zip(xc).zip(gc).zip(tc) {
                                let du = GELU_C * (1.0 + 3.0 * GELU_A * x * x);
                                d.write(g * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du));
                            }
                        },
                    )
                })
        });
        Ok((CpuStorage::F32(dx), l.shape().clone()))
    }
}

pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op1(Gelu::default())
}

// ---------------------------------------------------------------- linear

/// y = x · W + b with W in Conv1D (in, out) layout, as one gemm into rows preset to b.
struct Linear;

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "lab-linear"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let b = f32s(bs, bl, self.name())?;
        let (k, n) = wl.shape().dims2()?;
        let m = x.len() / k;
        let mut y = written(m * n, |y| {
            y.par_chunks_mut(n * ROWS).for_each(|c| {
                for row in c.chunks_mut(n) {
                    row.write_copy_of_slice(b);
                }
            })
        });
        sgemm(m, n, k, &mut y, true, x, k, 1, w, n, 1, true);
        let mut dims = xl.shape().dims().to_vec();
        *dims.last_mut().unwrap() = n;
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let packed = x.apply_op3_no_bwd(w, &dy.contiguous()?, &LinearBwd)?;
        let mut g = unpack(&packed, &[x, w, b])?.into_iter();
        Ok((g.next(), g.next(), g.next()))
    }
}

/// dx = dy · Wᵀ, dW = xᵀ · dy, db = Σ_rows dy, packed.
struct LinearBwd;

impl CustomOp3 for LinearBwd {
    fn name(&self) -> &'static str {
        "lab-linear-bwd"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let dy = f32s(ds, dl, self.name())?;
        let (k, n) = wl.shape().dims2()?;
        let m = x.len() / k;
        let partials: Vec<Vec<f32>> = dy
            .par_chunks(n * ROWS)
            .map(|c| {
                let mut acc = vec![0f32; n];
                for row in c.chunks(n) {
                    for (a, v) in acc.iter_mut().zip(row) {
                        *a += v;
                    }
                }
                acc
            })
            .collect();
        let mut sums = vec![0f32; n];
        for p in partials {
            for (a, v) in sums.iter_mut().zip(p) {
                *a += v;
            }
        }
        let out = written(m * k + k * n + n, |out| {
            let (dx, rest) = out.split_at_mut(m * k);
            let (dw, db) = rest.split_at_mut(k * n);
            sgemm_into(m, k, n, dx, dy, n, 1, w, 1, n, true);
            sgemm_into(k, n, m, dw, x, 1, k, dy, n, 1, true);
            db.write_copy_of_slice(&sums);
        });
        Ok((CpuStorage::F32(out), Shape::from(m * k + k * n + n)))
    }
}

/// x · W + b over the last dimension of x, W (in, out).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op3(w, b, Linear)
}

// ---------------------------------------------------------------- LM head + cross-entropy

/// Rows of the head per gemm. Each gemm packs all of `wte`, and the softmax is kept for the
/// backward anyway, so chunks are as large as a batch's loss rows: 128-row chunks cost model
/// (b) a fifth of its head forward (measured with LAB_PROFILE, scripts/bench/train.sh).
const HEAD_CHUNK: usize = 4096;

/// mean over rows of −log softmax(x · wteᵀ)[target]. The forward keeps the softmax of each
/// row for the backward, which then needs no second pass over the vocabulary.
#[derive(Default)]
struct HeadCrossEntropy {
    probs: std::sync::Mutex<Vec<f32>>,
}

/// The logits of rows `x` (n×E), a gemm per `HEAD_CHUNK` rows.
fn head_logits(x: &[f32], w: &[f32], e: usize, v: usize) -> Vec<f32> {
    let n = x.len() / e.max(1);
    written(n * v, |out| {
        for (xc, oc) in x.chunks(HEAD_CHUNK * e).zip(out.chunks_mut(HEAD_CHUNK * v)) {
            sgemm_into(xc.len() / e, v, e, oc, xc, e, 1, w, 1, e, true);
        }
    })
}

/// Each row of logits turned into its softmax in place; returns the summed loss of each
/// `HEAD_CHUNK` rows. Rows run in parallel; one exp per logit.
fn head_softmax(logits: &mut [f32], v: usize, tgt: &[u32]) -> Vec<f64> {
    let losses: Vec<f64> = logits
        .par_chunks_mut(v)
        .zip(tgt.par_iter())
        .map(|(row, &t)| {
            fastmath::wide(
                #[inline(always)]
                || {
                    let target = row[t as usize];
                    let (max, sum) = fastmath::softmax_in_place(row);
                    (max + sum.ln() - target) as f64
                },
            )
        })
        .collect();
    losses.chunks(HEAD_CHUNK).map(|c| c.iter().sum()).collect()
}

impl CustomOp3 for HeadCrossEntropy {
    fn name(&self) -> &'static str {
        "lab-head-cross-entropy"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        ts: &CpuStorage,
        tl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let tgt = u32s(ts, tl, self.name())?;
        let (v, e) = wl.shape().dims2()?;
        let n = tgt.len();
        if x.len() != n * e {
            bail!(
                "{}: {n} targets for {} rows",
                self.name(),
                x.len() / e.max(1)
            );
        }
        let mut probs = head_logits(x, w, e, v);
        let loss = head_softmax(&mut probs, v, tgt)
            .into_iter()
            .fold(0f64, |a, c| a + c);
        *self.probs.lock().expect("head probabilities") = probs;
        Ok((
            CpuStorage::F32(vec![(loss / n.max(1) as f64) as f32]),
            Shape::from(()),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        t: &Tensor,
        _loss: &Tensor,
        dloss: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = dloss.to_dtype(DType::F32)?.to_vec0::<f32>()?;
        let probs = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        let bwd = HeadCrossEntropyBwd {
            grad: g,
            probs: std::sync::Mutex::new(probs),
        };
        let packed = x.apply_op3_no_bwd(w, t, &bwd)?;
        let mut g = unpack(&packed, &[x, w])?.into_iter();
        Ok((g.next(), g.next(), None))
    }
}

/// The head backward from the saved softmax: dlogits = (p − onehot)·g/n, then dx (n×E) and
/// dwte (V×E), packed.
struct HeadCrossEntropyBwd {
    grad: f32,
    probs: std::sync::Mutex<Vec<f32>>,
}

impl CustomOp3 for HeadCrossEntropyBwd {
    fn name(&self) -> &'static str {
        "lab-head-cross-entropy-bwd"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        ts: &CpuStorage,
        tl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let tgt = u32s(ts, tl, self.name())?;
        let (v, e) = wl.shape().dims2()?;
        let n = tgt.len();
        let mut dl = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        if dl.len() != n * v {
            bail!(
                "{}: the forward's probabilities are gone (backward run twice?)",
                self.name()
            );
        }
        let g = self.grad / n.max(1) as f32;
        dl.par_chunks_mut(v)
            .zip(tgt.par_iter())
            .for_each(|(row, &t)| {
                for z in row.iter_mut() {
                    *z *= g;
                }
                row[t as usize] -= g;
            });
        // dx = dlogits · W ; dW = dlogitsᵀ · x
        let out = written(n * e + v * e, |out| {
            let (dx, dw) = out.split_at_mut(n * e);
            sgemm_into(n, e, v, dx, &dl, v, 1, w, e, 1, true);
            sgemm_into(v, e, n, dw, &dl, 1, v, x, e, 1, true);
        });
        Ok((CpuStorage::F32(out), Shape::from(n * e + v * e)))
    }
}

/// Mean cross-entropy of the rows of `x` (n×E) against `targets` (n, u32) under the tied head
/// `wte` (V×E).
pub fn head_cross_entropy(x: &Tensor, wte: &Tensor, targets: &Tensor) -> Result<Tensor> {
    x.contiguous()?
        .apply_op3(wte, targets, HeadCrossEntropy::default())
}

/// Each fused kernel, forward and backward, against a straightforward composition of candle's
/// differentiable ops on odd shapes (rows not a multiple of `ROWS` or of a SIMD width, a head
/// size of 5, sequences of length 1). The end-to-end PyTorch parity tests hold the whole model.
#[cfg(test)]
mod tests {
    use candle_core::{D, Device, Var};

    use super::*;

    /// Deterministic values in [-1, 1) from a small LCG.
    fn values(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    /// The output of `f` on `inputs` and the gradients of Σ output·r (r fixed and random)
    /// with respect to each input.
    fn run(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) -> (Tensor, Vec<Tensor>) {
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| Var::from_tensor(t).unwrap())
            .collect();
        let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
        let y = f(&ts).unwrap();
        let r = values(y.dims(), 99);
        let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
        let grads = vars.iter().map(|v| g.get(v).unwrap().clone()).collect();
        (y, grads)
    }

    fn assert_close(a: &Tensor, b: &Tensor, tol: f32, what: &str) {
        assert_eq!(a.dims(), b.dims(), "{what}: shapes");
        let (a, b) = (
            a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{i}]: fused {x} vs reference {y}"
            );
        }
    }

    fn compare(
        fused: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        reference: &dyn Fn(&[Tensor]) -> Result<Tensor>,
        inputs: &[Tensor],
        tol: f32,
        what: &str,
    ) {
        let (y1, g1) = run(fused, inputs);
        let (y2, g2) = run(reference, inputs);
        assert_close(&y1, &y2, tol, &format!("{what} forward"));
        for (i, (a, b)) in g1.iter().zip(&g2).enumerate() {
            assert_close(a, b, tol, &format!("{what} gradient of input {i}"));
        }
    }

    #[test]
    fn layer_norm_matches_its_definition() {
        let (n, c) = (ROWS + 7, 13);
        let reference = |t: &[Tensor]| {
            let x = &t[0];
            let mean = x.mean_keepdim(D::Minus1)?;
            let xc = x.broadcast_sub(&mean)?;
            let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
            let xhat = xc.broadcast_div(&(var + LN_EPS as f64)?.sqrt()?)?;
            xhat.broadcast_mul(&t[1])?.broadcast_add(&t[2])
        };
        let inputs = [values(&[n, c], 1), values(&[c], 2), values(&[c], 3)];
        compare(
            &|t| layer_norm(&t[0], &t[1], &t[2]),
            &reference,
            &inputs,
            1e-5,
            "layer norm",
        );
    }

    #[test]
    fn gelu_matches_the_tanh_approximation() {
        let x = (values(&[3, 1000], 4) * 6.0).unwrap();
        compare(&|t| gelu(&t[0]), &|t| t[0].gelu(), &[x], 1e-5, "gelu");
    }

    #[test]
    fn linear_matches_matmul_plus_bias() {
        let inputs = [
            values(&[ROWS + 3, 11], 5),
            values(&[11, 17], 6),
            values(&[17], 7),
        ];
        compare(
            &|t| linear(&t[0], &t[1], &t[2]),
            &|t| t[0].matmul(&t[1])?.broadcast_add(&t[2]),
            &inputs,
            1e-5,
            "linear",
        );
    }

    #[test]
    fn causal_attention_matches_per_sequence_softmax_attention() {
        let (h, hd) = (3, 5);
        let e = h * hd;
        let lens = [1, 7, 4, 1, 9];
        let n: usize = lens.iter().sum();
        let reference = |t: &[Tensor]| {
            let mut outs = Vec::new();
            let mut start = 0;
            for &l in &lens {
                let rows = t[0].narrow(0, start, l)?;
                start += l;
                let mut heads = Vec::new();
                for i in 0..h {
                    let q = rows.narrow(1, i * hd, hd)?;
                    let k = rows.narrow(1, e + i * hd, hd)?;
                    let v = rows.narrow(1, 2 * e + i * hd, hd)?;
                    let s = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
                    let mask: Vec<f32> = (0..l * l)
                        .map(|ij| {
                            if ij % l > ij / l {
                                f32::NEG_INFINITY
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    let s = s.broadcast_add(&Tensor::from_vec(mask, (l, l), &Device::Cpu)?)?;
                    heads.push(candle_nn::ops::softmax(&s, D::Minus1)?.matmul(&v)?);
                }
                outs.push(Tensor::cat(&heads, 1)?);
            }
            Tensor::cat(&outs, 0)
        };
        compare(
            &|t| causal_attention(&t[0], &lens, h),
            &reference,
            &[values(&[n, 3 * e], 8)],
            1e-5,
            "causal attention",
        );
    }

    /// The forward's saved heads go to the first backward; a second backward through the same
    /// graph gathers them again (and recomputes their probabilities) and gives the same bits.
    #[test]
    fn a_second_backward_through_attention_gathers_the_heads_again() {
        let lens = [3, 9, 1];
        second_backward_matches_the_first(&[13, 3 * 8], &|x| causal_attention(x, &lens, 2));
    }

    #[test]
    fn a_second_backward_through_gelu_computes_the_tanh_again() {
        second_backward_matches_the_first(&[7, 12], &|x| gelu(x));
    }

    /// The saved state of a fused op's forward is taken by its first backward: a second
    /// backward through the same graph must rebuild it and give the same gradient.
    fn second_backward_matches_the_first(shape: &[usize], op: &dyn Fn(&Tensor) -> Result<Tensor>) {
        let x = Var::from_tensor(&values(shape, 11)).unwrap();
        let y = op(x.as_tensor()).unwrap();
        let loss = (&y * &values(y.dims(), 12)).unwrap().sum_all().unwrap();
        let grad = |g: candle_core::backprop::GradStore| {
            g.get(&x)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        let first = grad(loss.backward().unwrap());
        let second = grad(loss.backward().unwrap());
        assert!(first.iter().any(|g| *g != 0.0));
        assert_eq!(first, second);
    }

    #[test]
    fn head_cross_entropy_matches_log_softmax_of_the_logits() {
        let (n, e, v) = (HEAD_CHUNK + 5, 9, 37);
        let targets: Vec<u32> = (0..n as u32).map(|i| i * 7 % v as u32).collect();
        let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
        let reference = |t: &[Tensor]| {
            let logp = candle_nn::ops::log_softmax(&t[0].matmul(&t[1].t()?)?, D::Minus1)?;
            logp.gather(&targets.unsqueeze(1)?, 1)?.mean_all()?.neg()
        };
        compare(
            &|t| head_cross_entropy(&t[0], &t[1], &targets),
            &reference,
            &[values(&[n, e], 9), values(&[v, e], 10)],
            1e-5,
            "head cross-entropy",
        );
    }
}
