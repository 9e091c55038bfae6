//! `lab kernel-check`'s AdamW rows: two clipped steps of the lab's AdamW kernels (in place on
//! the CPU, multi-tensor on CUDA) against their reference at a config's parameter shapes.

use candle_core::backprop::GradStore;
use candle_core::{Device, Result, Tensor, Var};
use rand_chacha::ChaCha8Rng;

use super::{AdamW, Hyper};
use crate::model::check::{Row, TOL_F32, random, rel_err};
use crate::model::{GptConfig, Kernels};

/// Parameters and moments on `device`, updated by `kernels`.
struct Side {
    params: Vec<(String, Var)>,
    opt: AdamW,
}

impl Side {
    fn new(values: &[(String, Tensor)], device: &Device, kernels: Kernels) -> Result<Side> {
        let params = values
            .iter()
            .map(|(n, t)| Ok((n.clone(), Var::from_tensor(&t.to_device(device)?)?)))
            .collect::<Result<Vec<_>>>()?;
        let hp = Hyper {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
        };
        let opt = AdamW::new(&params, hp, kernels)?;
        Ok(Side { params, opt })
    }

    /// One step on `grads` (host tensors, in parameter order); the norm it reports.
    fn step(&mut self, grads: &[Tensor], lr: f64) -> Result<f64> {
        let mut store = GradStore::default();
        for ((_, p), g) in self.params.iter().zip(grads) {
            store.insert(p.as_tensor(), g.to_device(p.device())?);
        }
        self.opt
            .step(&self.params, &store, lr)?
            .to_device(&Device::Cpu)?
            .to_scalar::<f64>()
    }

    /// Every parameter, then every first and second moment, each flattened on the host.
    fn flat(&self) -> Result<[Tensor; 3]> {
        let cat = |ts: Vec<Tensor>| Tensor::cat(&ts, 0);
        let p = self
            .params
            .iter()
            .map(|(_, v)| v.as_tensor().flatten_all()?.to_device(&Device::Cpu))
            .collect::<Result<Vec<_>>>()?;
        let state = self.opt.state_tensors()?;
        let moments = |kind: &str| {
            state
                .iter()
                .filter(|(n, _)| n.starts_with(kind))
                .map(|(_, t)| t.to_device(&Device::Cpu))
                .collect::<Result<Vec<_>>>()
        };
        Ok([
            cat(p)?,
            cat(moments("exp_avg.")?)?,
            cat(moments("exp_avg_sq.")?)?,
        ])
    }
}

/// Two steps (gradients of norm far above the clip of 1, so both clip) of the lab's AdamW on
/// `device` against the reference: on the CPU the composed update, on CUDA the CPU's fused one.
/// Rows: each step's norm, the parameters' change, and both moments after the second step.
pub fn rows(
    config: &str,
    g: &GptConfig,
    device: &Device,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Row>> {
    let shapes = g.param_shapes();
    let values = shapes
        .iter()
        .map(|(n, s)| Ok((n.clone(), random(rng, s, 0.1)?)))
        .collect::<Result<Vec<_>>>()?;
    let (kernel, reference) = if device.is_cpu() {
        (Kernels::Fused, (Device::Cpu, Kernels::Composed))
    } else {
        (Kernels::Fused, (Device::Cpu, Kernels::Fused))
    };
    let mut a = Side::new(&values, device, kernel)?;
    let mut b = Side::new(&values, &reference.0, reference.1)?;
    let before = a.flat()?[0].clone();
    let n: usize = shapes
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    let shape = format!("{} tensors, {n} values", shapes.len());
    let row = |what: &str, err: f64| Row {
        config: config.to_string(),
        op: "adamw",
        shape: shape.clone(),
        what: what.to_string(),
        err,
        tol: TOL_F32,
    };
    let mut out = Vec::new();
    for (step, lr) in [(1, 1e-3), (2, 3e-4)] {
        let grads = shapes
            .iter()
            .map(|(_, s)| random(rng, s, 1.0))
            .collect::<Result<Vec<_>>>()?;
        let (na, nb) = (a.step(&grads, lr)?, b.step(&grads, lr)?);
        out.push(row(
            &format!("norm, step {step}"),
            (na - nb).abs() / nb.abs(),
        ));
    }
    let ([pa, ma, va], [pb, mb, vb]) = (a.flat()?, b.flat()?);
    out.push(row(
        "parameter change",
        rel_err(&(pa - &before)?, &(pb - &before)?)?,
    ));
    out.push(row("exp_avg", rel_err(&ma, &mb)?));
    out.push(row("exp_avg_sq", rel_err(&va, &vb)?));
    Ok(out)
}
