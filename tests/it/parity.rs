//! Parity with PyTorch, the llm.c way: `scripts/make_parity_fixture.py` saved a tiny GPT-2's
//! weights, batch, logits, masked loss, every gradient and 5 AdamW steps from transformers;
//! here the lab recomputes each with both kernel sets and checks it with an explicit
//! tolerance, printing the first values on a mismatch.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use lab::model::{Gpt, GptConfig, Kernels};
use lab::train::adamw::{AdamW, Hyper};
use lab::train::schedule::Schedule;

const FIXTURE: &str = "tests/fixtures/parity.safetensors";
/// f32 forward values: PyTorch and the lab sum in different orders.
const TOL_VALUES: f32 = 2e-5;
/// Gradients, relative to the largest magnitude of each tensor itself (no floor of 1: every
/// gradient here is below 1, and the blocks' LayerNorm gradients peak at 1.5e-4 to 7e-4, so a
/// floor made this an absolute 1e-4 that a 14–67% error in them passed). The worst f32
/// difference against PyTorch is about 1e-5 of a tensor's scale.
const TOL_GRADS: f32 = 1e-4;
/// Losses after AdamW steps.
const TOL_STEPS: f64 = 1e-4;

pub struct Fixture {
    pub t: HashMap<String, Tensor>,
    pub meta: HashMap<String, String>,
}

impl Fixture {
    pub fn load() -> Fixture {
        let path = crate::util::root().join(FIXTURE);
        let bytes = std::fs::read(&path).expect("fixture (scripts/make_parity_fixture.py)");
        let (_, st) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let meta = st.metadata().clone().unwrap_or_default();
        let t = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
        Fixture { t, meta }
    }

    pub fn num<T: std::str::FromStr>(&self, k: &str) -> T
    where
        T::Err: std::fmt::Debug,
    {
        self.meta[k].parse().unwrap()
    }

    pub fn config(&self) -> GptConfig {
        GptConfig {
            vocab_size: self.num("vocab_size"),
            n_positions: self.num("n_positions"),
            n_embd: self.num("n_embd"),
            n_layer: self.num("n_layer"),
            n_head: self.num("n_head"),
        }
    }

    pub fn model(&self, kernels: Kernels) -> Gpt {
        let params: HashMap<String, Tensor> = self
            .t
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("param.").map(|n| (n.to_string(), v.clone())))
            .collect();
        let mut m = Gpt::from_tensors(self.config(), params, &Device::Cpu).unwrap();
        m.kernels = kernels;
        m
    }

    pub fn u32s(&self, k: &str) -> Tensor {
        self.t[k].to_dtype(DType::U32).unwrap()
    }
}

/// The fixture's padded (B, T) batch packed as the lab feeds it: ids and positions of the
/// real tokens back to back, the lengths, and the loss rows mapped from b·T + t to packed rows.
pub struct PackedBatch {
    pub ids: Tensor,
    pub pos: Tensor,
    pub lens: Vec<usize>,
    pub rows: Tensor,
    /// For each packed row, its b·T + t slot in the fixture.
    pub slots: Vec<usize>,
}

pub fn pack(f: &Fixture, ids_key: &str) -> PackedBatch {
    let ids: Vec<Vec<u32>> = f.u32s(ids_key).to_vec2().unwrap();
    let lens: Vec<usize> = f
        .u32s("lengths")
        .to_vec1::<u32>()
        .unwrap()
        .iter()
        .map(|&l| l as usize)
        .collect();
    let t = ids[0].len();
    let (mut flat, mut pos, mut slots, mut start) = (vec![], vec![], vec![], vec![]);
    for (b, row) in ids.iter().enumerate() {
        start.push(flat.len());
        for (j, &id) in row[..lens[b]].iter().enumerate() {
            flat.push(id);
            pos.push(j as u32);
            slots.push(b * t + j);
        }
    }
    let rows: Vec<u32> = f
        .u32s("rows")
        .to_vec1::<u32>()
        .unwrap()
        .iter()
        .map(|&r| (start[r as usize / t] + r as usize % t) as u32)
        .collect();
    let n = flat.len();
    PackedBatch {
        ids: Tensor::from_vec(flat, n, &Device::Cpu).unwrap(),
        pos: Tensor::from_vec(pos, n, &Device::Cpu).unwrap(),
        rows: Tensor::from_vec(rows.clone(), rows.len(), &Device::Cpu).unwrap(),
        lens,
        slots,
    }
}

/// Assert |a − b| ≤ tol·max(1, max|b|) elementwise, showing the first values if not.
pub fn close(what: &str, a: &Tensor, b: &Tensor, tol: f32) {
    close_to_scale(what, a, b, tol, 1.0)
}

/// Assert |a − b| ≤ tol·max(floor, max|b|) elementwise, showing the first values if not.
pub fn close_to_scale(what: &str, a: &Tensor, b: &Tensor, tol: f32, floor: f32) {
    let a: Vec<f32> = a
        .flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap();
    let b: Vec<f32> = b
        .flatten_all()
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(a.len(), b.len(), "{what}: sizes");
    let scale = b.iter().fold(floor, |m, v| m.max(v.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= tol * scale,
        "{what}: max |diff| {worst:e} > {tol:e} × {scale}\n  lab:     {:?}\n  pytorch: {:?}",
        &a[..a.len().min(6)],
        &b[..b.len().min(6)]
    );
}

/// The masked loss and its gradients for `ids_key`'s inputs, checked against the fixture.
pub fn check_loss_and_grads(f: &Fixture, kernels: Kernels, ids_key: &str, prefix: &str) {
    let m = f.model(kernels);
    let p = pack(f, ids_key);
    let h = m
        .hidden(&Tensor::cat(&[&p.ids, &p.pos], 0).unwrap(), &p.lens)
        .unwrap();
    let loss = m.loss(&h, &p.rows, &f.u32s("targets")).unwrap();
    close(
        &format!("{kernels:?} {prefix}loss"),
        &loss.reshape(1).unwrap(),
        &f.t[&format!("{prefix}loss")],
        TOL_VALUES,
    );
    let grads = loss.backward().unwrap();
    for (name, var) in &m.params {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("{kernels:?}: no gradient for {name}"));
        close_to_scale(
            &format!("{kernels:?} {prefix}grad.{name}"),
            g,
            &f.t[&format!("{prefix}grad.{name}")],
            TOL_GRADS,
            f32::MIN_POSITIVE,
        );
    }
}

#[test]
fn logits_match_pytorch() {
    let f = Fixture::load();
    for k in [Kernels::Fused, Kernels::Composed] {
        let m = f.model(k);
        let p = pack(&f, "ids");
        let h = m
            .hidden(&Tensor::cat(&[&p.ids, &p.pos], 0).unwrap(), &p.lens)
            .unwrap();
        let logits = m.logits(&h).unwrap();
        let v = logits.dim(1).unwrap();
        let slots: Vec<u32> = p.slots.iter().map(|&s| s as u32).collect();
        let idx = Tensor::from_vec(slots, p.slots.len(), &Device::Cpu).unwrap();
        let want = f.t["logits"]
            .reshape(((), v))
            .unwrap()
            .index_select(&idx, 0)
            .unwrap();
        close(&format!("{k:?} logits"), &logits, &want, TOL_VALUES);
    }
}

#[test]
fn loss_and_every_gradient_match_pytorch() {
    let f = Fixture::load();
    for k in [Kernels::Fused, Kernels::Composed] {
        check_loss_and_grads(&f, k, "ids", "");
    }
}

#[test]
fn teacherless_loss_and_gradients_match_pytorch() {
    // Path inputs replaced by the fixture's dummy id, labels unchanged.
    let f = Fixture::load();
    for k in [Kernels::Fused, Kernels::Composed] {
        check_loss_and_grads(&f, k, "teacherless.ids", "teacherless.");
    }
}

#[test]
fn every_parameter_gets_a_nonzero_gradient() {
    // The trap of candle-nn's fused LayerNorm: gradients silently stop at every norm.
    let f = Fixture::load();
    for k in [Kernels::Fused, Kernels::Composed] {
        let m = f.model(k);
        let p = pack(&f, "ids");
        let h = m
            .hidden(&Tensor::cat(&[&p.ids, &p.pos], 0).unwrap(), &p.lens)
            .unwrap();
        let grads = m
            .loss(&h, &p.rows, &f.u32s("targets"))
            .unwrap()
            .backward()
            .unwrap();
        for (name, var) in &m.params {
            let g = grads
                .get(var.as_tensor())
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            let norm = g
                .sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            assert!(norm > 0.0, "{k:?}: zero gradient for {name}");
        }
    }
}

#[test]
fn five_adamw_steps_match_pytorch() {
    let f = Fixture::load();
    let want: Vec<f64> = f.t["adamw_losses"].to_vec1().unwrap();
    let hp = Hyper {
        beta1: f.num("beta1"),
        beta2: f.num("beta2"),
        eps: f.num("eps"),
        weight_decay: f.num("weight_decay"),
        grad_clip: f.num("grad_clip"),
    };
    let sched = Schedule::new(
        f.num("lr"),
        f.num("min_lr_frac"),
        f.num("warmup_frac"),
        f.num("total_steps"),
    );
    for k in [Kernels::Fused, Kernels::Composed] {
        let m = f.model(k);
        let mut opt = AdamW::new(&m.params, hp, k).unwrap();
        let p = pack(&f, "ids");
        let mut got = Vec::new();
        for step in 0..want.len() as u64 {
            let h = m
                .hidden(&Tensor::cat(&[&p.ids, &p.pos], 0).unwrap(), &p.lens)
                .unwrap();
            let loss = m.loss(&h, &p.rows, &f.u32s("targets")).unwrap();
            got.push(loss.to_scalar::<f32>().unwrap() as f64);
            let grads = loss.backward().unwrap();
            opt.step(&m.params, &grads, sched.lr(step)).unwrap();
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() < TOL_STEPS,
                "{k:?} step {i}: lab {g} vs pytorch {w} (all: {got:?} vs {want:?})"
            );
        }
    }
}

/// `scripts/make_attention_fixture.py`: the causal attention of packed sequences in float64
/// PyTorch at head sizes 1, 3, 6, 8 and 88 and lengths 1 to 64.
const ATTENTION_FIXTURE: &str = "tests/fixtures/attention.safetensors";
/// The fused attention against float64, relative to each tensor's largest magnitude (all
/// above 1 here, so `close`'s floor of 1 does not loosen it).
const TOL_ATTENTION: f32 = 1e-5;

#[test]
fn attention_matches_pytorch_at_every_head_size_and_length() {
    let bytes = std::fs::read(crate::util::root().join(ATTENTION_FIXTURE)).unwrap();
    let (_, st) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = st.metadata().clone().unwrap_or_default();
    let t = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
    let mut cases: Vec<&String> = meta.keys().collect();
    cases.sort();
    assert_eq!(cases.len(), 6, "cases in {ATTENTION_FIXTURE}: {cases:?}");
    for key in cases {
        let c = key.strip_suffix(".n_head").expect("only .n_head metadata");
        let n_head: usize = meta[key].parse().unwrap();
        let lens: Vec<usize> = t[&format!("{c}.lens")]
            .to_vec1::<i64>()
            .unwrap()
            .iter()
            .map(|&l| l as usize)
            .collect();
        assert_eq!(
            lens.iter().max(),
            Some(&64),
            "{c}: the longest sequence a config allows"
        );
        let qkv = candle_core::Var::from_tensor(&t[&format!("{c}.qkv")]).unwrap();
        let y = lab::model::ops::causal_attention(qkv.as_tensor(), &lens, n_head).unwrap();
        close(&format!("{c} y"), &y, &t[&format!("{c}.y")], TOL_ATTENTION);
        let grads = (y * &t[&format!("{c}.dy")])
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        let d = grads.get(qkv.as_tensor()).expect("a gradient for qkv");
        close(
            &format!("{c} dqkv"),
            d,
            &t[&format!("{c}.dqkv")],
            TOL_ATTENTION,
        );
    }
}
