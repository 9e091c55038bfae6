//! GPT-2 as HF `GPT2LMHeadModel` (SPEC §5): HF tensor names, Conv1D (in, out) weights, a head
//! tied to `wte`, parameter counts, init, safetensors and `config.json`. Takes the vocabulary
//! from `tokenizer`; fused CPU kernels from `ops`, the KV cache from `kv`.

pub mod check;
pub mod fastmath;
pub mod grad_check;
pub mod kv;
pub mod ops;
pub mod pack;
pub mod profile;

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, bail};
use candle_core::{D, DType, Device, Result, Tensor, Var};
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::config::{Config, Precision};
use crate::fsutil::write_atomic;
use crate::rng::{Purpose, stream};
use crate::tokenizer::{EOS, PAD};
use kv::KvCache;

/// The model shape, resolved: what `config.json` records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GptConfig {
    /// Embedding rows: the vocabulary rounded up to a multiple of 64 (SPEC §4).
    pub vocab_size: usize,
    pub n_positions: usize,
    pub n_embd: usize,
    pub n_layer: usize,
    pub n_head: usize,
}

/// Embedding rows are padded to this multiple (SPEC §4).
const VOCAB_MULTIPLE: usize = 64;
/// HF GPT-2's initializer_range.
const INIT_STD: f64 = 0.02;

impl GptConfig {
    pub fn new(cfg: &Config, n_tokens: u32) -> GptConfig {
        GptConfig {
            vocab_size: (n_tokens as usize).div_ceil(VOCAB_MULTIPLE) * VOCAB_MULTIPLE,
            n_positions: cfg.model.n_positions as usize,
            n_embd: cfg.model.n_embd as usize,
            n_layer: cfg.model.n_layer as usize,
            n_head: cfg.model.n_head as usize,
        }
    }

    /// (name, shape) of every parameter, in HF's order.
    pub fn param_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (e, v, p) = (self.n_embd, self.vocab_size, self.n_positions);
        let mut out = vec![
            ("transformer.wte.weight".to_string(), vec![v, e]),
            ("transformer.wpe.weight".to_string(), vec![p, e]),
        ];
        for i in 0..self.n_layer {
            let h = format!("transformer.h.{i}");
            for (name, shape) in [
                ("ln_1.weight", vec![e]),
                ("ln_1.bias", vec![e]),
                ("attn.c_attn.weight", vec![e, 3 * e]),
                ("attn.c_attn.bias", vec![3 * e]),
                ("attn.c_proj.weight", vec![e, e]),
                ("attn.c_proj.bias", vec![e]),
                ("ln_2.weight", vec![e]),
                ("ln_2.bias", vec![e]),
                ("mlp.c_fc.weight", vec![e, 4 * e]),
                ("mlp.c_fc.bias", vec![4 * e]),
                ("mlp.c_proj.weight", vec![4 * e, e]),
                ("mlp.c_proj.bias", vec![e]),
            ] {
                out.push((format!("{h}.{name}"), shape));
            }
        }
        out.push(("transformer.ln_f.weight".to_string(), vec![e]));
        out.push(("transformer.ln_f.bias".to_string(), vec![e]));
        out
    }

    /// All parameters (the tied head counted once).
    pub fn total_params(&self) -> u64 {
        self.param_shapes()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>() as u64)
            .sum()
    }

    /// Everything but the token and position embeddings.
    pub fn non_embedding_params(&self) -> u64 {
        self.total_params() - ((self.vocab_size + self.n_positions) * self.n_embd) as u64
    }

    /// Training FLOPs per token of a batch whose longest sequence has `t` tokens (SPEC §5):
    /// 6·N_non-emb + 12·L·E·T. Batches are packed, so only real tokens are processed and
    /// counted; T stays the padded length, as the spec defines it.
    pub fn flops_per_token(&self, t: usize) -> f64 {
        6.0 * self.non_embedding_params() as f64 + 12.0 * (self.n_layer * self.n_embd * t) as f64
    }

    /// FLOPs of the tied LM head per loss token, forward and backward: 6·V·E. The head runs
    /// only at loss positions (SPEC §5 revision).
    pub fn head_flops_per_loss_token(&self) -> f64 {
        6.0 * (self.vocab_size * self.n_embd) as f64
    }

    /// HF `GPT2Config` as `config.json`.
    pub fn hf_config_json(&self) -> String {
        let j = serde_json::json!({
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": null,
            "activation_function": "gelu_new",
            "resid_pdrop": 0.0,
            "embd_pdrop": 0.0,
            "attn_pdrop": 0.0,
            "layer_norm_epsilon": ops::LN_EPS as f64,
            "initializer_range": INIT_STD,
            "scale_attn_weights": true,
            "tie_word_embeddings": true,
            "bos_token_id": EOS,
            "eos_token_id": EOS,
            "pad_token_id": PAD,
            "use_cache": true,
            "torch_dtype": "float32",
        });
        serde_json::to_string_pretty(&j).expect("json") + "\n"
    }
}

/// Which kernels the forward pass uses. `Fused` is the CPU path (hand-written forward and
/// backward); `Composed` builds everything from candle's differentiable ops and runs on any
/// device. Both compute the same function; tests hold them to each other, and
/// `lab train --kernels composed` runs the CUDA path's kernels on the CPU (the GPU check's
/// dry run compares the two).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kernels {
    Fused,
    Composed,
}

impl Kernels {
    pub fn for_device(d: &Device) -> Kernels {
        if d.is_cpu() {
            Kernels::Fused
        } else {
            Kernels::Composed
        }
    }
}

/// Sequences packed back to back with no padding. The composed kernels pad them to (B, T) in
/// every layer: the indices and the causal mask are built and uploaded once a forward.
pub struct Packed {
    pub lens: Vec<usize>,
    /// The rows of each run, where a pack's runs train together (one run alone).
    runs: ops::Runs,
    padding: std::cell::OnceCell<(Tensor, Tensor, Tensor)>,
}

impl Packed {
    fn new(lens: &[usize]) -> Packed {
        Packed::of_runs(lens, ops::Runs::one(lens.iter().sum()))
    }

    fn of_runs(lens: &[usize], runs: ops::Runs) -> Packed {
        Packed {
            lens: lens.to_vec(),
            runs,
            padding: std::cell::OnceCell::new(),
        }
    }

    /// The pad index, the unpad index and the (T, T) causal mask, on `device`.
    fn padding(&self, device: &Device) -> Result<&(Tensor, Tensor, Tensor)> {
        if let Some(p) = self.padding.get() {
            return Ok(p);
        }
        let p = (
            self.pad_index(device)?,
            self.unpad_index(device)?,
            causal_mask(self.max_len(), 0, device)?,
        );
        Ok(self.padding.get_or_init(|| p))
    }

    fn max_len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }

    /// For each slot of the padded (B, T) layout, the packed row it takes (row 0 for padding).
    fn pad_index(&self, device: &Device) -> Result<Tensor> {
        let t = self.max_len();
        let mut idx = Vec::with_capacity(self.lens.len() * t);
        let mut start = 0u32;
        for &l in &self.lens {
            idx.extend((0..t as u32).map(|j| if (j as usize) < l { start + j } else { 0 }));
            start += l as u32;
        }
        Tensor::from_vec(idx, self.lens.len() * t, device)
    }

    /// For each packed row, its slot in the padded (B, T) layout.
    fn unpad_index(&self, device: &Device) -> Result<Tensor> {
        let t = self.max_len();
        let idx: Vec<u32> = self
            .lens
            .iter()
            .enumerate()
            .flat_map(|(b, &l)| (0..l as u32).map(move |j| (b * t) as u32 + j))
            .collect();
        let n = idx.len();
        Tensor::from_vec(idx, n, device)
    }
}

/// The additive causal mask (T, past + T) of T queries after `past` cached keys: −∞ on the
/// keys after each query's own position.
fn causal_mask(t: usize, past: usize, device: &Device) -> Result<Tensor> {
    let total = past + t;
    let mask: Vec<f32> = (0..t)
        .flat_map(|i| (0..total).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (t, total), device)
}

/// The tokens a forward embeds: ids then positions in one (2N,) tensor (training and
/// validation, one upload), or ids and positions apart (decoding, and a pack's offset ids).
#[derive(Clone, Copy)]
enum Tokens<'a> {
    Joined(&'a Tensor),
    Split(&'a Tensor, &'a Tensor),
}

/// How the rows of a forward pass form sequences: packed for training, or a dense (B, T)
/// step after what a KV cache holds, for decoding.
enum Layout<'a> {
    Packed(Packed),
    Cached {
        b: usize,
        t: usize,
        cache: &'a mut KvCache,
    },
}

impl Layout<'_> {
    /// The rows of each run among the forward's `rows`: a decoding step is one run's.
    fn runs(&self, rows: usize) -> ops::Runs {
        match self {
            Layout::Packed(p) => p.runs.clone(),
            Layout::Cached { .. } => ops::Runs::one(rows),
        }
    }
}

/// One transformer block's parameters, named like the HF tensors.
struct Block {
    ln_1: (Tensor, Tensor),
    c_attn: (Tensor, Tensor),
    attn_c_proj: (Tensor, Tensor),
    ln_2: (Tensor, Tensor),
    c_fc: (Tensor, Tensor),
    mlp_c_proj: (Tensor, Tensor),
}

/// GPT-2 with its parameters as candle `Var`s.
pub struct Gpt {
    pub cfg: GptConfig,
    /// Runs in the pack (1: a run alone): every parameter has this leading dimension when more
    /// than one (`pack.rs`).
    pub runs: usize,
    pub kernels: Kernels,
    /// The dtype matmul inputs are cast to: F32, or BF16 for mixed precision (`set_precision`).
    matmul_dtype: DType,
    /// Every parameter with its HF name, in HF order.
    pub params: Vec<(String, Var)>,
    wte: Tensor,
    wpe: Tensor,
    h: Vec<Block>,
    ln_f: (Tensor, Tensor),
}

impl Gpt {
    /// A fresh model: N(0, 0.02) weights, `c_proj` weights scaled by 1/√(2L), zero biases,
    /// unit LayerNorms, drawn from the run seed.
    pub fn init(cfg: GptConfig, seed: u64, device: &Device) -> Result<Gpt> {
        let mut rng = stream(seed, Purpose::Init, 0);
        let mut tensors = HashMap::new();
        for (name, shape) in cfg.param_shapes() {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = if name.ends_with(".bias") {
                vec![0.0; n]
            } else if name.contains(".ln_") || name.contains("ln_f") {
                vec![1.0; n]
            } else {
                let std = if name.ends_with("c_proj.weight") {
                    INIT_STD / (2.0 * cfg.n_layer as f64).sqrt()
                } else {
                    INIT_STD
                };
                (0..n)
                    .map(|_| {
                        let z: f64 = StandardNormal.sample(&mut rng);
                        (z * std) as f32
                    })
                    .collect()
            };
            tensors.insert(name, Tensor::from_vec(data, shape, device)?);
        }
        Gpt::from_tensors(cfg, tensors, device)
    }

    /// Build from named tensors (HF names); every parameter must be present with its shape.
    pub fn from_tensors(
        cfg: GptConfig,
        tensors: HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Gpt> {
        Gpt::with_runs(cfg, 1, tensors, device)
    }

    /// Build a pack of `runs` runs (`pack.rs`) from named tensors whose shapes lead with
    /// `runs` (when more than one).
    fn with_runs(
        cfg: GptConfig,
        runs: usize,
        mut tensors: HashMap<String, Tensor>,
        device: &Device,
    ) -> Result<Gpt> {
        let mut params = Vec::new();
        for (name, mut shape) in cfg.param_shapes() {
            if runs > 1 {
                shape.insert(0, runs);
            }
            let t = tensors
                .remove(&name)
                .ok_or_else(|| candle_core::Error::Msg(format!("missing tensor {name}")))?;
            if t.dims() != shape.as_slice() {
                candle_core::bail!("tensor {name} has shape {:?}, expected {shape:?}", t.dims());
            }
            let t = t.to_dtype(DType::F32)?.to_device(device)?;
            params.push((name, Var::from_tensor(&t)?));
        }
        // Bound by HF name, as candle's models do with `vb.pp(..)`: a reordering of
        // `param_shapes` cannot swap two tensors.
        let by_name: HashMap<&str, &Var> = params.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let get = |name: &str| -> Result<Tensor> {
            by_name
                .get(name)
                .map(|v| v.as_tensor().clone())
                .ok_or_else(|| candle_core::Error::Msg(format!("no parameter {name}")))
        };
        let pair = |prefix: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                get(&format!("{prefix}.weight"))?,
                get(&format!("{prefix}.bias"))?,
            ))
        };
        let h = (0..cfg.n_layer)
            .map(|i| {
                let p = format!("transformer.h.{i}");
                Ok(Block {
                    ln_1: pair(&format!("{p}.ln_1"))?,
                    c_attn: pair(&format!("{p}.attn.c_attn"))?,
                    attn_c_proj: pair(&format!("{p}.attn.c_proj"))?,
                    ln_2: pair(&format!("{p}.ln_2"))?,
                    c_fc: pair(&format!("{p}.mlp.c_fc"))?,
                    mlp_c_proj: pair(&format!("{p}.mlp.c_proj"))?,
                })
            })
            .collect::<Result<Vec<Block>>>()?;
        let (wte, wpe) = (
            get("transformer.wte.weight")?,
            get("transformer.wpe.weight")?,
        );
        let ln_f = pair("transformer.ln_f")?;
        Ok(Gpt {
            cfg,
            runs,
            kernels: Kernels::for_device(device),
            matmul_dtype: DType::F32,
            params,
            wte,
            wpe,
            h,
            ln_f,
        })
    }

    /// Load `model.safetensors` (HF names; a stray `lm_head.weight` is the tied `wte`).
    pub fn load(cfg: GptConfig, path: &Path, device: &Device) -> anyhow::Result<Gpt> {
        let mut tensors = load_tensors(path)?;
        tensors.remove("lm_head.weight");
        Gpt::from_tensors(cfg, tensors, device)
            .with_context(|| format!("{}: does not match the config's model", path.display()))
    }

    /// The parameters as named tensors.
    pub fn named_tensors(&self) -> Vec<(String, Tensor)> {
        self.params
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect()
    }

    /// Write `model.safetensors` atomically.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        save_tensors(&self.named_tensors(), path)
    }

    pub fn device(&self) -> &Device {
        self.wte.device()
    }

    /// The kernels the model's ops without a CUDA kernel run (the linear layer, the head, the
    /// decoding cache): `kernels` on the CPU; elsewhere the composed ones.
    pub fn ops(&self) -> Kernels {
        if self.fused(false) {
            Kernels::Fused
        } else {
            Kernels::Composed
        }
    }

    /// Whether an op runs the lab's kernel: every op with the fused kernels on the CPU; on
    /// CUDA with `--kernels fused`, an op whose kernel `has_cuda` (LayerNorm, the linear
    /// layers, GELU with the bias add before it, the attention of packed sequences and the head
    /// with its loss so far; off by default until a GPU check has passed them).
    fn fused(&self, has_cuda: bool) -> bool {
        self.kernels == Kernels::Fused && (self.device().is_cpu() || has_cuda)
    }

    /// Train and decode in `p`. bf16 runs on the composed kernels (the fused CPU kernels are
    /// f32 only); the parameters stay f32 either way.
    pub fn set_precision(&mut self, p: Precision) {
        match p {
            Precision::Fp32 => {
                self.matmul_dtype = DType::F32;
                self.kernels = Kernels::for_device(self.device());
            }
            Precision::Bf16 => {
                self.matmul_dtype = DType::BF16;
                self.kernels = Kernels::Composed;
            }
        }
    }

    /// a · b with both inputs in the matmul dtype and the product back in f32.
    fn mm(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        ops::matmul_in(a, b, self.matmul_dtype)
    }

    /// LayerNorm of each run's rows with its weights (a pack runs the fused kernels only).
    fn layer_norm(
        &self,
        x: &Tensor,
        (w, b): &(Tensor, Tensor),
        runs: &ops::Runs,
    ) -> Result<Tensor> {
        if self.fused(true) {
            ops::layer_norm_runs(x, w, b, runs)
        } else {
            ops::reference::layer_norm(x, w, b)
        }
    }

    /// x · W + b with W in Conv1D (in, out) layout, each run's rows with its W and b.
    fn linear(&self, x: &Tensor, (w, b): &(Tensor, Tensor), runs: &ops::Runs) -> Result<Tensor> {
        match self.ops() {
            Kernels::Fused => ops::linear_runs(x, w, b, runs),
            // CUDA with the lab's kernels: one cuBLASLt product, the bias in its epilogue.
            Kernels::Composed if self.fused(true) => ops::linear_in(x, w, b, self.matmul_dtype),
            Kernels::Composed => self.mm(x, w)?.broadcast_add(b),
        }
    }

    /// GELU(x · W + b), the MLP's first layer.
    fn linear_gelu(&self, x: &Tensor, wb: &(Tensor, Tensor), runs: &ops::Runs) -> Result<Tensor> {
        let y = self.linear(x, wb, runs)?;
        if self.fused(true) {
            ops::gelu(&y)
        } else {
            ops::reference::gelu(&y)
        }
    }

    /// Causal self-attention of q|k|v rows (N, 3E) laid out as `layout` says. Returns (N, E).
    fn attention(&self, qkv: &Tensor, layer: usize, layout: &mut Layout) -> Result<Tensor> {
        let e = qkv.dim(1)? / 3;
        match layout {
            Layout::Packed(p) if self.fused(true) => {
                ops::causal_attention(qkv, &p.lens, self.cfg.n_head)
            }
            Layout::Packed(p) => {
                // Pad to (B, T, 3E), attend, keep the real rows. Padding sits after each
                // sequence, so the causal mask already hides it from every real query.
                let (b, t) = (p.lens.len(), p.max_len());
                let (pad, unpad, mask) = p.padding(qkv.device())?;
                let padded = qkv.index_select(pad, 0)?.reshape((b, t, 3 * e))?;
                let y = self
                    .attention_dense(&padded, layer, None, Some(mask))?
                    .reshape((b * t, e))?;
                y.index_select(unpad, 0)
            }
            Layout::Cached { t, cache, .. } if cache.is_host() => {
                cache.attend_host(layer, qkv, *t, self.cfg.n_head)
            }
            Layout::Cached { b, t, cache } => {
                let y =
                    self.attention_dense(&qkv.reshape((*b, *t, 3 * e))?, layer, Some(cache), None)?;
                y.reshape((*b * *t, e))
            }
        }
    }

    /// Causal self-attention of a dense (B, T, 3E) block from candle's ops, with past keys and
    /// values from `cache` when decoding, and the causal mask when the caller holds it.
    /// Returns (B, T, E).
    fn attention_dense(
        &self,
        qkv: &Tensor,
        layer: usize,
        cache: Option<&mut KvCache>,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, t, e3) = qkv.dims3()?;
        let e = e3 / 3;
        let (nh, hd) = (self.cfg.n_head, e / self.cfg.n_head);
        let heads = |i: usize| -> Result<Tensor> {
            qkv.narrow(2, i * e, e)?
                .reshape((b, t, nh, hd))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, mut k, mut v) = (heads(0)?, heads(1)?, heads(2)?);
        let mut past = 0;
        let mut key_bias = None;
        if let Some(c) = cache {
            past = c.len();
            let bias;
            (k, v, bias) = c.append_dense(layer, &k, &v)?;
            key_bias = Some(bias);
        }
        let total = past + t;
        let scale = 1.0 / (hd as f64).sqrt();
        let mut att = (self.mm(&q, &k.t()?)? * scale)?;
        if t > 1 {
            att = match mask {
                Some(m) => att.broadcast_add(m)?,
                None => att.broadcast_add(&causal_mask(t, past, att.device())?)?,
            };
        }
        if let Some(kb) = key_bias {
            // (B, total) additive bias hiding padding keys.
            att = att.broadcast_add(&kb.reshape((b, 1, 1, total))?)?;
        }
        let p = candle_nn::ops::softmax(&att, D::Minus1)?;
        self.mm(&p, &v)?.transpose(1, 2)?.reshape((b, t, e))
    }

    /// The transformer on `tokens`: embeddings, blocks, `ln_f`.
    fn run(&self, tokens: Tokens, layout: &mut Layout) -> Result<Tensor> {
        self.run_on(&self.wte, &self.wpe, tokens, layout)
    }

    /// `run` with the token and position tables `wte` and `wpe`: a pack's flattened, run r's
    /// rows offset by r·V and r·P (`pack.rs`).
    fn run_on(
        &self,
        wte: &Tensor,
        wpe: &Tensor,
        tokens: Tokens,
        layout: &mut Layout,
    ) -> Result<Tensor> {
        let mut x = match tokens {
            // On CUDA one op each way: the gathers and their add, and both tables' gradients.
            // The CPU keeps candle's, whose backward adds each row into the head's gradient of
            // the tied table (a different rounding from adding the rows' sum to it).
            Tokens::Joined(tok) if self.fused(true) && !wte.device().is_cpu() => {
                ops::embedding(wte, wpe, tok)?
            }
            Tokens::Joined(tok) => {
                let n = tok.dim(0)? / 2;
                (wte.embedding(&tok.narrow(0, 0, n)?)? + wpe.embedding(&tok.narrow(0, n, n)?)?)?
            }
            Tokens::Split(ids, pos) => (wte.embedding(ids)? + wpe.embedding(pos)?)?,
        };
        let runs = layout.runs(x.dim(0)?);
        for (i, blk) in self.h.iter().enumerate() {
            let a = self.layer_norm(&x, &blk.ln_1, &runs)?;
            let qkv = self.linear(&a, &blk.c_attn, &runs)?;
            let y = self.attention(&qkv, i, layout)?;
            x = (x + self.linear(&y, &blk.attn_c_proj, &runs)?)?;
            let m = self.layer_norm(&x, &blk.ln_2, &runs)?;
            let f = self.linear_gelu(&m, &blk.c_fc, &runs)?;
            x = (x + self.linear(&f, &blk.mlp_c_proj, &runs)?)?;
        }
        self.layer_norm(&x, &self.ln_f, &runs)
    }

    /// Hidden states after `ln_f` of packed sequences (training and validation): `tok` (2N,)
    /// holds their ids back to back, then their positions; `lens` their lengths. Returns
    /// (N, E).
    pub fn hidden(&self, tok: &Tensor, lens: &[usize]) -> Result<Tensor> {
        let mut layout = Layout::Packed(Packed::new(lens));
        self.run(Tokens::Joined(tok), &mut layout)
    }

    /// Hidden states after `ln_f` of a decoding step: ids and positions (B, T) after the
    /// positions already in `cache`. Returns (B·T, E).
    pub fn hidden_cached(&self, ids: &Tensor, pos: &Tensor, cache: &mut KvCache) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let mut layout = Layout::Cached { b, t, cache };
        let (ids, pos) = (ids.flatten_all()?, pos.flatten_all()?);
        let h = self.run(Tokens::Split(&ids, &pos), &mut layout)?;
        cache.advance(t);
        Ok(h)
    }

    /// Mean cross-entropy of the hidden rows `rows` against `targets`,
    /// over all `vocab_size` logits as HF computes it.
    pub fn loss(&self, hidden: &Tensor, rows: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let sel = hidden.index_select(rows, 0)?;
        match self.ops() {
            Kernels::Fused => ops::head_cross_entropy(&sel, &self.wte, targets),
            Kernels::Composed => {
                if self.fused(true) {
                    // CUDA with the lab's kernels: the head and its loss keep no logits.
                    return ops::head_loss(&sel, &self.wte, targets, self.matmul_dtype);
                }
                let logits = self.logits(&sel)?;
                let logp = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
                let picked = logp.gather(&targets.unsqueeze(1)?, 1)?;
                picked.mean_all()?.neg()
            }
        }
    }

    /// `loss` where nothing will differentiate it (validation): on CUDA with the lab's kernels
    /// the head's loss without the gradient products `loss` makes in its forward there; else
    /// `loss` itself (the CPU's validation bits stay as they are).
    pub fn loss_value(&self, hidden: &Tensor, rows: &Tensor, targets: &Tensor) -> Result<Tensor> {
        if self.ops() == Kernels::Composed && self.fused(true) {
            let sel = hidden.index_select(rows, 0)?;
            return ops::head_loss_value(&sel, &self.wte, targets, self.matmul_dtype);
        }
        self.loss(hidden, rows, targets)
    }

    /// Logits (n, vocab) of selected hidden rows: the head at the positions that decode.
    /// In bf16 the tied weight is cast before it is transposed: the cast of `wte.t()` would be
    /// a strided copy of the whole table every step.
    /// (In f32 the cast is a no-op clone.)
    pub fn logits(&self, hidden_rows: &Tensor) -> Result<Tensor> {
        self.mm(hidden_rows, &self.wte.to_dtype(self.matmul_dtype)?.t()?)
    }

    /// The same logits, row after row, into a buffer reused across decoding steps (on the
    /// CPU one gemm straight into it: no allocation, no zeroing, no copy).
    pub fn logits_into(&self, hidden_rows: &Tensor, out: &mut Vec<f32>) -> Result<()> {
        let (n, e) = hidden_rows.dims2()?;
        let v = self.cfg.vocab_size;
        if self.ops() == Kernels::Fused {
            let h = hidden_rows.contiguous()?;
            out.resize(n * v, 0.0);
            return ops::with_host_f32(&h, |h| {
                ops::with_host_f32(&self.wte, |w| {
                    ops::sgemm(n, v, e, out, false, h, e, 1, w, 1, e, true)
                })
            })?;
        }
        *out = self.logits(hidden_rows)?.flatten_all()?.to_vec1()?;
        Ok(())
    }

    /// A KV cache for decoding `pad.len()` rows of at most `cap` positions, the first `pad[r]`
    /// of row r being left padding; in host memory when the fused kernels run.
    pub fn kv_cache(&self, pad: Vec<usize>, cap: usize) -> KvCache {
        KvCache::new(
            self.cfg.n_layer,
            self.cfg.n_embd,
            pad,
            cap,
            self.ops() == Kernels::Fused,
        )
    }
}

/// Write named tensors as safetensors (HF's `format: pt` metadata), atomically.
pub fn save_tensors(tensors: &[(String, Tensor)], path: &Path) -> anyhow::Result<()> {
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    let cpu: Vec<(String, Tensor)> = tensors
        .iter()
        .map(|(n, t)| Ok((n.clone(), t.to_device(&Device::Cpu)?.contiguous()?)))
        .collect::<Result<_>>()?;
    let bytes = safetensors::serialize(cpu.iter().map(|(n, t)| (n.as_str(), t)), Some(meta))
        .with_context(|| format!("{}: cannot serialize", path.display()))?;
    write_atomic(path, &bytes)
}

/// Read a safetensors file fully, with a one-line error naming it.
pub fn load_tensors(path: &Path) -> anyhow::Result<HashMap<String, Tensor>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    let t = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu);
    match t {
        Ok(t) => Ok(t),
        Err(e) => bail!("{}: not a readable safetensors file ({e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every parameter lands where its HF name says, whatever the order of the tensors given.
    #[test]
    fn parameters_bind_by_name() {
        let cfg = GptConfig {
            vocab_size: 64,
            n_positions: 8,
            n_embd: 8,
            n_layer: 2,
            n_head: 2,
        };
        let shapes = cfg.param_shapes();
        let value = |name: &str| shapes.iter().position(|(n, _)| n == name).unwrap() as f32;
        let tensors: HashMap<String, Tensor> = shapes
            .iter()
            .rev()
            .map(|(n, shape)| {
                let t = Tensor::full(value(n), shape.as_slice(), &Device::Cpu).unwrap();
                (n.clone(), t)
            })
            .collect();
        let m = Gpt::from_tensors(cfg, tensors, &Device::Cpu).unwrap();
        let first = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap()[0];
        assert_eq!(first(&m.wte), value("transformer.wte.weight"));
        assert_eq!(first(&m.wpe), value("transformer.wpe.weight"));
        assert_eq!(first(&m.ln_f.1), value("transformer.ln_f.bias"));
        for (i, b) in m.h.iter().enumerate() {
            let p = |s: &str| value(&format!("transformer.h.{i}.{s}"));
            for (t, name) in [
                (&b.ln_1.0, "ln_1.weight"),
                (&b.ln_1.1, "ln_1.bias"),
                (&b.c_attn.0, "attn.c_attn.weight"),
                (&b.c_attn.1, "attn.c_attn.bias"),
                (&b.attn_c_proj.0, "attn.c_proj.weight"),
                (&b.attn_c_proj.1, "attn.c_proj.bias"),
                (&b.ln_2.0, "ln_2.weight"),
                (&b.ln_2.1, "ln_2.bias"),
                (&b.c_fc.0, "mlp.c_fc.weight"),
                (&b.c_fc.1, "mlp.c_fc.bias"),
                (&b.mlp_c_proj.0, "mlp.c_proj.weight"),
                (&b.mlp_c_proj.1, "mlp.c_proj.bias"),
            ] {
                assert_eq!(first(t), p(name), "layer {i} {name}");
            }
        }
        // The optimizer's list stays in HF order.
        let names: Vec<&str> = m.params.iter().map(|(n, _)| n.as_str()).collect();
        let want: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, want);
    }
}
