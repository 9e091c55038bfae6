//! AdamW for a pack (SPEC §8 Revision, packs): each run's gradient norm, clipping, learning
//! rate and hyperparameters its own, weight decay by each tensor's rank without the run
//! dimension, and a run whose loss failed left as it is. Each run's update is its update alone,
//! to the bit: the same per-tensor sums in the same order, the same in-place kernel on its slice.

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::backprop::GradStore;
use candle_core::{DType, Result, Tensor, Var, bail};

use super::{Hyper, InPlace, Moments, Slot, Update};

/// The optimizer of a pack of `hps.len()` runs: one set of moments a tensor, run r's the r-th
/// slice, as the fused CPU kernels keep them.
pub struct PackAdamW {
    hps: Vec<Hyper>,
    slots: Vec<Slot>,
    /// Updates taken so far, the same for every run of the pack.
    pub steps: u64,
}

impl PackAdamW {
    pub fn new(params: &[(String, Var)], hps: Vec<Hyper>) -> Result<PackAdamW> {
        let n = hps.len();
        let slots = params
            .iter()
            .map(|(name, var)| {
                let t = var.as_tensor();
                if t.dim(0)? != n {
                    bail!("{name}: a leading dimension of {} for {n} runs", t.dim(0)?);
                }
                let len = t.elem_count();
                Ok(Slot {
                    name: name.clone(),
                    // The rank each run's tensor has alone.
                    decay: t.rank() > 2,
                    moments: Moments::Host(Mutex::new((vec![0.0; len], vec![0.0; len]))),
                })
            })
            .collect::<Result<_>>()?;
        Ok(PackAdamW {
            hps,
            slots,
            steps: 0,
        })
    }

    /// Run r's global gradient norm, summed as `AdamW::grad_norm` sums a run alone's.
    fn norm(params: &[(String, Var)], grads: &GradStore, r: usize) -> Result<f64> {
        let mut total = 0f64;
        for (name, var) in params {
            let Some(g) = grads.get(var.as_tensor()) else {
                bail!("no gradient for {name}");
            };
            total += g
                .get(r)?
                .sqr()?
                .sum_all()?
                .to_dtype(DType::F64)?
                .to_scalar::<f64>()?;
        }
        Ok(total.sqrt())
    }

    /// One update of every run whose `live` is true, run r at learning rate `lrs[r]`. Returns
    /// each run's gradient norm before clipping (NaN for a run left as it was).
    pub fn step(
        &mut self,
        params: &[(String, Var)],
        grads: &GradStore,
        lrs: &[f64],
        live: &[bool],
    ) -> Result<Vec<f64>> {
        if lrs.len() != self.hps.len() || live.len() != self.hps.len() {
            bail!(
                "{} learning rates for a pack of {} runs",
                lrs.len(),
                self.hps.len()
            );
        }
        self.steps += 1;
        let t = self.steps as i32;
        let mut norms = vec![f64::NAN; self.hps.len()];
        for (r, (&hp, &lr)) in self.hps.iter().zip(lrs).enumerate() {
            if !live[r] {
                continue;
            }
            let n = PackAdamW::norm(params, grads, r)?;
            norms[r] = n;
            let (bc1, bc2) = (1.0 - hp.beta1.powi(t), 1.0 - hp.beta2.powi(t));
            let clip = (hp.grad_clip / (n + 1e-6)).min(1.0);
            for (slot, (_, var)) in self.slots.iter().zip(params) {
                let Moments::Host(m) = &slot.moments else {
                    bail!("{}: a pack keeps its moments on the host", slot.name);
                };
                let grad = grads.get(var.as_tensor()).expect("checked in norm");
                let u = Update {
                    lr: lr as f32,
                    decay: slot.decay(hp),
                    beta1: hp.beta1 as f32,
                    beta2: hp.beta2 as f32,
                    eps: hp.eps as f32,
                    step_size: (lr / bc1) as f32,
                    bc2_sqrt: bc2.sqrt() as f32,
                    clip: clip as f32,
                };
                let p = var.as_tensor().get(r)?;
                let op = InPlace {
                    u,
                    moments: m,
                    at: r * p.elem_count(),
                };
                p.inplace_op2(&grad.get(r)?.contiguous()?, &op)?;
            }
        }
        Ok(norms)
    }

    /// Run r's moments as named tensors, as its `optimizer.safetensors` alone holds them.
    pub fn run_state(&self, r: usize) -> Result<Vec<(String, Tensor)>> {
        let n = self.hps.len();
        let mut out = Vec::new();
        for s in &self.slots {
            let Moments::Host(mv) = &s.moments else {
                bail!("{}: a pack keeps its moments on the host", s.name);
            };
            let g = mv.lock().expect("moments lock");
            let len = g.0.len() / n;
            let dev = &candle_core::Device::Cpu;
            out.push((
                format!("exp_avg.{}", s.name),
                Tensor::new(&g.0[r * len..][..len], dev)?,
            ));
            out.push((
                format!("exp_avg_sq.{}", s.name),
                Tensor::new(&g.1[r * len..][..len], dev)?,
            ));
        }
        Ok(out)
    }

    /// Restore run r's moments from the tensors `run_state` gives (a checkpoint's
    /// `optimizer.safetensors`), every run of the pack after `steps` updates.
    pub fn load_run(
        &mut self,
        r: usize,
        mut t: HashMap<String, Tensor>,
        steps: u64,
    ) -> anyhow::Result<()> {
        let n = self.hps.len();
        for s in &self.slots {
            let Moments::Host(mv) = &s.moments else {
                anyhow::bail!("{}: a pack keeps its moments on the host", s.name);
            };
            let mut g = mv.lock().expect("moments lock");
            let (m, v) = &mut *g;
            let len = m.len() / n;
            for (k, dst) in [("exp_avg", m), ("exp_avg_sq", v)] {
                let key = format!("{k}.{}", s.name);
                let v = t
                    .remove(&key)
                    .ok_or_else(|| anyhow::anyhow!("missing {key}"))?
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                if v.len() != len {
                    anyhow::bail!("moments of {} have the wrong size", s.name);
                }
                dst[r * len..][..len].copy_from_slice(&v);
            }
        }
        self.steps = steps;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use candle_core::Device;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::super::AdamW;
    use super::*;
    use crate::model::Kernels;

    fn random(rng: &mut ChaCha8Rng, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    fn hyper(weight_decay: f64, grad_clip: f64) -> Hyper {
        Hyper {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay,
            grad_clip,
        }
    }

    /// Three runs with their own decay, clipping (one clipped, one not) and learning rates, a
    /// matrix and a bias each, over three steps, run 1 failed before the third: every run's
    /// parameters, norms and moments are its own alone, to the bit, and the failed run's stay
    /// as they were.
    #[test]
    fn each_run_of_a_pack_steps_as_it_would_alone() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let shapes = [vec![5usize, 3], vec![3]];
        let hps = vec![hyper(0.1, 1.0), hyper(0.0, 1e9), hyper(0.3, 0.5)];
        let init: Vec<Tensor> = shapes
            .iter()
            .map(|s| random(&mut rng, &[&[3], s.as_slice()].concat()))
            .collect();
        let var = |t: &Tensor| Var::from_tensor(t).unwrap();
        let named = |ts: Vec<Var>| -> Vec<(String, Var)> {
            ["w", "b"].iter().map(|n| n.to_string()).zip(ts).collect()
        };
        let pack = named(init.iter().map(var).collect());
        let alone: Vec<Vec<(String, Var)>> = (0..3)
            .map(|r| named(init.iter().map(|t| var(&t.get(r).unwrap())).collect()))
            .collect();
        let mut po = PackAdamW::new(&pack, hps.clone()).unwrap();
        let mut ao: Vec<AdamW> = alone
            .iter()
            .zip(&hps)
            .map(|(p, &hp)| AdamW::new(p, hp, Kernels::Fused).unwrap())
            .collect();
        let lrs = [1e-2, 3e-3, 2e-2];
        for step in 0..3 {
            let grads: Vec<Tensor> = init
                .iter()
                .map(|t| (random(&mut rng, t.dims()) * 4.0).unwrap())
                .collect();
            let mut store = GradStore::default();
            for ((_, v), g) in pack.iter().zip(&grads) {
                store.insert(v.as_tensor(), g.clone());
            }
            let live = [true, step < 2, true];
            let norms = po.step(&pack, &store, &lrs, &live).unwrap();
            for r in 0..3 {
                if !live[r] {
                    assert!(norms[r].is_nan());
                    continue;
                }
                let mut own = GradStore::default();
                for ((_, v), g) in alone[r].iter().zip(&grads) {
                    own.insert(v.as_tensor(), g.get(r).unwrap());
                }
                let n = ao[r].step(&alone[r], &own, lrs[r]).unwrap();
                assert_eq!(norms[r].to_bits(), n.to_scalar::<f64>().unwrap().to_bits());
            }
        }
        for r in 0..3 {
            for ((name, p), (_, a)) in pack.iter().zip(&alone[r]) {
                let packed = p.as_tensor().get(r).unwrap();
                assert_eq!(bits(&packed), bits(a.as_tensor()), "run {r}'s {name}");
            }
            let (mine, own) = (po.run_state(r).unwrap(), ao[r].state_tensors().unwrap());
            for ((n1, a), (n2, b)) in mine.iter().zip(&own) {
                assert_eq!((n1, bits(a)), (n2, bits(b)), "run {r}'s moments");
            }
        }
        // The failed run 1 took two steps, not three: its parameters differ from a third step's.
        assert_eq!(ao[1].steps, 2);
        // A pack resumed from the runs' own moments holds each run's, and refuses a wrong size.
        let mut resumed = PackAdamW::new(&pack, hps.clone()).unwrap();
        for r in (0..3).rev() {
            let own = ao[r].state_tensors().unwrap().into_iter().collect();
            resumed.load_run(r, own, 3).unwrap();
        }
        assert_eq!(resumed.steps, 3);
        for r in 0..3 {
            let (a, b) = (resumed.run_state(r).unwrap(), po.run_state(r).unwrap());
            for ((n1, a), (n2, b)) in a.iter().zip(&b) {
                assert_eq!((n1, bits(a)), (n2, bits(b)), "run {r}'s resumed moments");
            }
        }
        let mut short: HashMap<String, Tensor> =
            ao[0].state_tensors().unwrap().into_iter().collect();
        short.insert(
            "exp_avg.w".into(),
            Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap(),
        );
        let err = resumed.load_run(0, short, 3).unwrap_err().to_string();
        assert!(err.contains("wrong size"), "{err}");
    }
}
