//! Causal multi-head self-attention over packed sequences, each (sequence, head)
//! in registers blocks; the forward keeps the probabilities the backward reads.

use super::*;

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

impl Kernel for CausalAttention {
    const NAME: &'static str = "lab-causal-attention";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let qkv = xs[0].f32::<Self>()?;
        let (n, e3) = xs[0].shape().dims2()?;
        let e = e3 / 3;
        let spans = spans(&self.lens);
        if self.lens.iter().sum::<usize>() != n {
            bail!(
                "{}: the sequence lengths do not add up to {n} rows",
                Self::NAME
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
        Ok((y, Shape::from((n, e))))
    }

    /// On a GPU nothing is kept: the backward computes the probabilities again.
    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (n, e3) = xs[0].shape().dims2()?;
        if self.lens.iter().sum::<usize>() != n {
            bail!(
                "{}: the sequence lengths do not add up to {n} rows",
                Self::NAME
            );
        }
        let y = cuda::attention(&xs[0], None, &spans(&self.lens), self.n_head)?;
        Ok((y, Shape::from((n, e3 / 3))))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let heads = std::mem::take(&mut *self.saved.lock().expect("attention heads"));
        let bwd = CausalAttentionBwd {
            n_head: self.n_head,
            spans: spans(&self.lens),
            heads: std::sync::Mutex::new(heads),
        };
        Ok(vec![Some(apply_no_bwd(bwd, &[xs[0], &dy.contiguous()?])?)])
    }
}

/// d(qkv) from dy and the forward's saved heads (gathered again if they are gone: a second
/// backward through the same graph).
struct CausalAttentionBwd {
    n_head: usize,
    spans: Vec<(usize, usize)>,
    heads: std::sync::Mutex<Vec<Heads>>,
}

impl Kernel for CausalAttentionBwd {
    const NAME: &'static str = "lab-causal-attention-bwd";

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let dq = cuda::attention(&xs[0], Some(&xs[1]), &self.spans, self.n_head)?;
        Ok((dq, xs[0].shape().clone()))
    }

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (qkv, dy) = (xs[0].f32::<Self>()?, xs[1].f32::<Self>()?);
        let (_, e3) = xs[0].shape().dims2()?;
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
        Ok((dqkv, xs[0].shape().clone()))
    }
}

/// Causal attention of packed sequences: `qkv` (N, 3E), `lens` summing to N.
pub fn causal_attention(qkv: &Tensor, lens: &[usize], n_head: usize) -> Result<Tensor> {
    let op = CausalAttention {
        n_head,
        lens: lens.to_vec(),
        saved: Default::default(),
    };
    apply(op, &[&qkv.contiguous()?])
}
