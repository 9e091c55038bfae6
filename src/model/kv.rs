//! The KV cache, kept outside the model so that one forward serves training (no cache) and
//! decoding: keys and values of every position seen so far, per layer and row, with rows that
//! stop taking part once their answer is finished, and left padding hidden per row.

use candle_core::{Device, Result, Tensor};
use rayon::prelude::*;

use crate::model::fastmath;

/// The score bias hiding a padding key: finite, so that a padding query, which sees nothing
/// but padding, gets a uniform softmax instead of NaNs that would reach the cache.
const PAD_BIAS: f32 = -1e9;

/// Where the keys and values live.
enum Store {
    /// CPU: per layer, rows × capacity × E floats, preallocated; appending copies one row.
    Host {
        e: usize,
        cap: usize,
        k: Vec<Vec<f32>>,
        v: Vec<Vec<f32>>,
    },
    /// Any device: per layer, (rows, H, len, hd) tensors grown by concatenation.
    Dense {
        k: Vec<Option<Tensor>>,
        v: Vec<Option<Tensor>>,
    },
}

pub struct KvCache {
    store: Store,
    /// Positions cached, padding included.
    len: usize,
    /// Per cache row: leading positions that are left padding, hidden from every query.
    pad: Vec<usize>,
    /// The cache rows the next forward's batch rows stand for, in order.
    active: Vec<usize>,
}

impl KvCache {
    /// A cache for `rows` sequences of at most `cap` positions, whose first `pad[r]` positions
    /// are padding. `host` keeps it in preallocated CPU memory for the fused kernels.
    pub fn new(n_layer: usize, e: usize, pad: Vec<usize>, cap: usize, host: bool) -> KvCache {
        let rows = pad.len();
        let store = if host {
            Store::Host {
                e,
                cap,
                k: vec![vec![0.0; rows * cap * e]; n_layer],
                v: vec![vec![0.0; rows * cap * e]; n_layer],
            }
        } else {
            Store::Dense {
                k: vec![None; n_layer],
                v: vec![None; n_layer],
            }
        };
        KvCache {
            store,
            len: 0,
            active: (0..rows).collect(),
            pad,
        }
    }

    /// Positions already cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_host(&self) -> bool {
        matches!(self.store, Store::Host { .. })
    }

    /// Mark `t` more positions as cached (after every layer appended them).
    pub fn advance(&mut self, t: usize) {
        self.len += t;
    }

    /// Keep only cache rows `rows` in the next forwards, in this order.
    pub fn set_active(&mut self, rows: Vec<usize>) {
        self.active = rows;
    }

    /// Give every cache row `k` copies (row r becomes rows r·k … r·k + k − 1): the samples
    /// of one prompt share its prefill.
    pub fn repeat_rows(&mut self, k: usize) -> Result<()> {
        let rows = self.pad.len();
        self.pad = self
            .pad
            .iter()
            .flat_map(|&p| std::iter::repeat_n(p, k))
            .collect();
        self.active = (0..rows * k).collect();
        match &mut self.store {
            Store::Host {
                e,
                cap,
                k: ks,
                v: vs,
            } => {
                let width = *cap * *e;
                for buf in ks.iter_mut().chain(vs.iter_mut()) {
                    let old = std::mem::take(buf);
                    *buf = old
                        .chunks(width)
                        .flat_map(|r| std::iter::repeat_n(r, k).flatten().copied())
                        .collect();
                }
            }
            Store::Dense { k: ks, v: vs } => {
                let idx: Vec<u32> = (0..rows as u32)
                    .flat_map(|r| std::iter::repeat_n(r, k))
                    .collect();
                for t in ks.iter_mut().chain(vs.iter_mut()).flatten() {
                    let i = Tensor::from_vec(idx.clone(), idx.len(), t.device())?;
                    *t = t.index_select(&i, 0)?;
                }
            }
        }
        Ok(())
    }

    /// Dense store: append this step's keys and values (active rows, H, t, hd) for `layer`
    /// and return all of them for the active rows, with the additive bias (rows, total) that
    /// hides padding.
    pub fn append_dense(
        &mut self,
        layer: usize,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let Store::Dense { k: ks, v: vs } = &mut self.store else {
            candle_core::bail!("append_dense on a host cache");
        };
        let device = k.device().clone();
        let all_rows = self.pad.len();
        let active = Tensor::from_vec(
            self.active.iter().map(|&r| r as u32).collect::<Vec<_>>(),
            self.active.len(),
            &device,
        )?;
        let (nk, nv) = match (&ks[layer], &vs[layer]) {
            (None, None) => (k.clone(), v.clone()),
            (Some(pk), Some(pv)) => {
                // Scatter the active rows' new positions into the full-width cache.
                let t = k.dim(2)?;
                let full = |past: &Tensor, new: &Tensor| -> Result<Tensor> {
                    let (_, h, _, hd) = past.dims4()?;
                    let grown = Tensor::zeros((all_rows, h, t, hd), past.dtype(), &device)?;
                    let grown = grown.index_add(&active, new, 0)?;
                    Tensor::cat(&[past, &grown], 2)
                };
                (full(pk, k)?, full(pv, v)?)
            }
            _ => unreachable!("keys and values grow together"),
        };
        ks[layer] = Some(nk.clone());
        vs[layer] = Some(nv.clone());
        let total = nk.dim(2)?;
        let pad = &self.pad;
        let bias: Vec<f32> = self
            .active
            .iter()
            .flat_map(|&r| (0..total).map(move |j| if j < pad[r] { PAD_BIAS } else { 0.0 }))
            .collect();
        let bias = Tensor::from_vec(bias, (self.active.len(), total), &device)?;
        Ok((
            nk.index_select(&active, 0)?,
            nv.index_select(&active, 0)?,
            bias,
        ))
    }

    /// Host store: causal attention of the new q|k|v rows (active rows × t, 3E) over every
    /// cached position of their rows, appending the new keys and values first. Returns the
    /// (active rows × t, E) output.
    pub fn attend_host(
        &mut self,
        layer: usize,
        qkv: &Tensor,
        t: usize,
        n_head: usize,
    ) -> Result<Tensor> {
        let Store::Host {
            e,
            cap,
            k: ks,
            v: vs,
        } = &mut self.store
        else {
            candle_core::bail!("attend_host on a dense cache");
        };
        let (e, cap) = (*e, *cap);
        let past = self.len;
        if past + t > cap {
            candle_core::bail!("KV cache full: {} positions of {cap}", past + t);
        }
        let _t = crate::model::profile::span("lab-kv-attention");
        let hd = e / n_head;
        let scale = 1.0 / (hd as f32).sqrt();
        let x: Vec<f32> = qkv.flatten_all()?.to_vec1()?;
        let mut slot = vec![usize::MAX; self.pad.len()];
        for (b, &r) in self.active.iter().enumerate() {
            slot[r] = b;
        }
        let mut out = vec![0f32; self.active.len() * t * e];
        let mut outs: Vec<Option<&mut [f32]>> = out.chunks_mut(t * e).map(Some).collect();
        // (cache row, its keys, its values, its output rows)
        type RowWork<'b> = (usize, &'b mut [f32], &'b mut [f32], &'b mut [f32]);
        let work: Vec<RowWork> = ks[layer]
            .chunks_mut(cap * e)
            .zip(vs[layer].chunks_mut(cap * e))
            .enumerate()
            .filter(|(r, _)| slot[*r] != usize::MAX)
            .map(|(r, (kr, vr))| (r, kr, vr, outs[slot[r]].take().expect("each row once")))
            .collect();
        work.into_par_iter().for_each(|(r, kr, vr, o)| {
            let b = slot[r];
            for i in 0..t {
                let row = &x[(b * t + i) * 3 * e..][..3 * e];
                kr[(past + i) * e..][..e].copy_from_slice(&row[e..2 * e]);
                vr[(past + i) * e..][..e].copy_from_slice(&row[2 * e..]);
            }
            let mut p = vec![0f32; past + t];
            for i in 0..t {
                let q = &x[(b * t + i) * 3 * e..][..e];
                let keys = self.pad[r]..past + i + 1;
                if keys.is_empty() {
                    continue; // a padding position: nothing to attend to, output unused
                }
                for h in 0..n_head {
                    let qh = &q[h * hd..][..hd];
                    for j in keys.clone() {
                        p[j] = fastmath::dot(qh, &kr[j * e + h * hd..][..hd]) * scale;
                    }
                    fastmath::softmax_in_place(&mut p[keys.clone()]);
                    let oh = &mut o[i * e + h * hd..][..hd];
                    for j in keys.clone() {
                        let vj = &vr[j * e + h * hd..][..hd];
                        for (a, b) in oh.iter_mut().zip(vj) {
                            *a += p[j] * b;
                        }
                    }
                }
            }
        });
        Tensor::from_vec(out, (self.active.len() * t, e), &Device::Cpu)
    }
}
