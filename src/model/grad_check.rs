//! `lab kernel-check`'s whole-model rows: one batch's loss and every parameter's gradient from
//! the model on a device and precision, against the CPU's fp32 fused model on the same values.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::config::Precision;
use crate::model::check::{Row, random, rel_err};
use crate::model::{Gpt, GptConfig, Kernels};

/// fp32 against fp32: each tensor's gradient sums a batch's worth of products in another
/// order, through every layer of the backward (TF32 off on CUDA).
pub const TOL_MODEL_F32: f64 = 1e-4;
/// bf16 matmul inputs against fp32 (8-bit mantissas): 0.7e-2 to 1.1e-2 on the CPU for the
/// small configs (`lab kernel-check --seed 1`).
pub const TOL_MODEL_BF16: f64 = 3e-2;

/// A batch as training packs one: ids, positions, lengths, loss rows and their targets.
struct Batch {
    ids: Vec<u32>,
    pos: Vec<u32>,
    lens: Vec<usize>,
    rows: Vec<u32>,
    targets: Vec<u32>,
}

fn batch(g: &GptConfig, rng: &mut ChaCha8Rng) -> Batch {
    let lens: Vec<usize> = (0..64).map(|_| rng.random_range(12..=26)).collect();
    let n: usize = lens.iter().sum();
    let v = g.vocab_size as u32;
    let ids = (0..n).map(|_| rng.random_range(0..v)).collect();
    let pos = lens.iter().flat_map(|&l| 0..l as u32).collect();
    let rows: Vec<u32> = (0..n as u32).filter(|_| rng.random_bool(0.5)).collect();
    let targets = rows.iter().map(|_| rng.random_range(0..v)).collect();
    Batch {
        ids,
        pos,
        lens,
        rows,
        targets,
    }
}

/// The loss and each parameter's gradient (host tensors, in parameter order).
fn loss_and_grads(m: &Gpt, b: &Batch) -> Result<(f64, Vec<Tensor>)> {
    let d = m.device();
    let tok = Tensor::new([b.ids.as_slice(), b.pos.as_slice()].concat(), d)?;
    let rows = Tensor::new(b.rows.as_slice(), d)?;
    let targets = Tensor::new(b.targets.as_slice(), d)?;
    let h = m.hidden(&tok, &b.lens)?;
    let loss = m.loss(&h, &rows, &targets)?;
    let grads = loss.backward()?;
    let loss = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
    let g = m
        .params
        .iter()
        .map(|(name, p)| match grads.get(p.as_tensor()) {
            Some(g) => g.to_device(&Device::Cpu)?.to_dtype(DType::F32),
            None => candle_core::bail!("no gradient for {name}"),
        })
        .collect::<Result<_>>()?;
    Ok((loss, g))
}

/// Rows for the model on `device` at `precision` (with `kernels`) against the CPU's fp32 fused
/// model: the loss, the gradient of all parameters together, and the worst single tensor's.
pub fn rows(
    config: &str,
    g: &GptConfig,
    (device, precision, kernels): (&Device, Precision, Kernels),
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Row>> {
    let values: HashMap<String, Tensor> = g
        .param_shapes()
        .into_iter()
        .map(|(n, s)| {
            let t = random(rng, &s, 0.05)?;
            // LayerNorm gains near 1, everything else small and never zero.
            let t = if n.contains("ln_") && n.ends_with("weight") {
                (t + 1.0)?
            } else {
                t
            };
            Ok((n, t))
        })
        .collect::<Result<_>>()?;
    let b = batch(g, rng);
    let on = |d: &Device| -> Result<HashMap<String, Tensor>> {
        values
            .iter()
            .map(|(n, t)| Ok((n.clone(), t.to_device(d)?)))
            .collect()
    };
    let mut reference = Gpt::from_tensors(*g, on(&Device::Cpu)?, &Device::Cpu)?;
    reference.set_precision(Precision::Fp32);
    reference.kernels = Kernels::Fused;
    let mut model = Gpt::from_tensors(*g, on(device)?, device)?;
    model.set_precision(precision);
    model.kernels = kernels;
    let (l1, g1) = loss_and_grads(&model, &b)?;
    let (l2, g2) = loss_and_grads(&reference, &b)?;
    let tol = match precision {
        Precision::Fp32 => TOL_MODEL_F32,
        Precision::Bf16 => TOL_MODEL_BF16,
    };
    let n_rows = b.rows.len();
    let row = |what: String, err: f64| Row {
        config: config.to_string(),
        op: "model",
        shape: format!(
            "{} sequences, {n_rows} loss rows; {} {:?}",
            b.lens.len(),
            precision.name(),
            kernels
        ),
        what,
        err,
        tol,
    };
    let flat = |gs: &[Tensor]| -> Result<Tensor> {
        Tensor::cat(
            &gs.iter()
                .map(|t| t.flatten_all())
                .collect::<Result<Vec<_>>>()?,
            0,
        )
    };
    let mut worst = (String::new(), -1.0);
    for ((name, _), (a, r)) in model.params.iter().zip(g1.iter().zip(&g2)) {
        let e = rel_err(a, r)?;
        // NaN is the worst of all.
        if e.is_nan() || e > worst.1 {
            worst = (name.clone(), e);
            if e.is_nan() {
                break;
            }
        }
    }
    Ok(vec![
        row("loss".into(), (l1 - l2).abs() / l2.abs()),
        row(
            "grad, all tensors".into(),
            rel_err(&flat(&g1)?, &flat(&g2)?)?,
        ),
        row(format!("grad, worst: {}", worst.0), worst.1),
    ])
}
