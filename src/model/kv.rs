//! The KV cache, kept outside the model so that one `forward` serves training (no cache) and
//! decoding: per layer, the keys and values of every position seen so far.

use candle_core::{Result, Tensor};

pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
    /// Additive bias (B, n) over the first n keys: −inf where a row was left-padded.
    pad_bias: Option<Tensor>,
}

impl KvCache {
    pub fn new(n_layer: usize) -> KvCache {
        KvCache {
            layers: vec![None; n_layer],
            len: 0,
            pad_bias: None,
        }
    }

    /// A cache whose first keys are hidden per row by `pad_bias` (B, n): 0 for real tokens,
    /// −inf for left padding.
    pub fn with_padding(n_layer: usize, pad_bias: Tensor) -> KvCache {
        KvCache {
            pad_bias: Some(pad_bias),
            ..KvCache::new(n_layer)
        }
    }

    /// Positions already cached.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append this step's keys and values (B, H, t, hd) for `layer`; returns all of them.
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let kv = match &self.layers[layer] {
            None => (k.clone(), v.clone()),
            Some((pk, pv)) => (Tensor::cat(&[pk, k], 2)?, Tensor::cat(&[pv, v], 2)?),
        };
        self.layers[layer] = Some(kv.clone());
        Ok(kv)
    }

    /// The key bias over `total` keys, if any row is padded.
    pub fn key_bias(&self, total: usize) -> Result<Option<Tensor>> {
        let Some(bias) = &self.pad_bias else {
            return Ok(None);
        };
        let (b, n) = bias.dims2()?;
        if total <= n {
            return Ok(Some(bias.narrow(1, 0, total)?));
        }
        let zeros = Tensor::zeros((b, total - n), bias.dtype(), bias.device())?;
        Ok(Some(Tensor::cat(&[bias, &zeros], 1)?))
    }

    /// Mark `t` more positions as cached (after every layer appended them).
    pub fn advance(&mut self, t: usize) {
        self.len += t;
    }
}
