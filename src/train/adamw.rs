//! AdamW that can resume (SPEC §5): PyTorch's update, decoupled weight decay on tensors of
//! rank >= 2 only, global-norm clipping folded into the update, and moments that are saved
//! to and restored from `optimizer.safetensors`. In place on CPU with the fused kernels; on a
//! CUDA GPU with the fused kernels, the multi-tensor launches of `adamw.cu`; elsewhere in
//! composed tensor ops (CUDA's default until a GPU check has passed the kernels).

use std::collections::HashMap;
use std::sync::Mutex;

use candle_core::backprop::GradStore;
use rayon::prelude::*;

use candle_core::{CpuStorage, DType, InplaceOp2, Layout, Result, Tensor, Var, bail};

use crate::config::TrainConfig;
use crate::model::Kernels;

pub mod check;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(test)]
mod host;
#[cfg(any(test, feature = "cuda"))]
mod multi_tensor;
pub mod pack;

#[derive(Clone, Copy, Debug)]
pub struct Hyper {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub grad_clip: f64,
}

impl Hyper {
    pub fn from_config(t: &TrainConfig) -> Hyper {
        Hyper {
            beta1: t.beta1,
            beta2: t.beta2,
            eps: t.eps,
            weight_decay: t.weight_decay,
            grad_clip: t.grad_clip,
        }
    }
}

/// First and second moments of one parameter: host vectors updated in place (the fused CPU
/// kernels), or tensors on the parameter's device updated by composed ops (CUDA's path, and the
/// CPU's with `--kernels composed`).
enum Moments {
    Host(Mutex<(Vec<f32>, Vec<f32>)>),
    Device(Tensor, Tensor),
}

struct Slot {
    name: String,
    decay: bool,
    moments: Moments,
}

impl Slot {
    /// This tensor's weight decay: the configured one for rank >= 2, else none.
    fn decay(&self, hp: Hyper) -> f32 {
        if self.decay {
            hp.weight_decay as f32
        } else {
            0.0
        }
    }
}

pub struct AdamW {
    hp: Hyper,
    slots: Vec<Slot>,
    /// Updates taken so far (PyTorch's `step`, used for bias correction).
    pub steps: u64,
    /// The multi-tensor kernels, where the parameters are on a CUDA GPU and the fused kernels
    /// were asked for.
    #[cfg(feature = "cuda")]
    launcher: Option<cuda::Launcher>,
}

/// The scalars of one update, shared by every parameter.
#[derive(Clone, Copy)]
struct Update {
    lr: f32,
    decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
    clip: f32,
}

/// The in-place CPU update of one parameter from its gradient.
struct InPlace<'a> {
    u: Update,
    moments: &'a Mutex<(Vec<f32>, Vec<f32>)>,
    /// Where this parameter's moments start in `moments`: 0 alone, r·len for run r of a pack.
    at: usize,
}

impl InplaceOp2 for InPlace<'_> {
    fn name(&self) -> &'static str {
        "lab-adamw"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        gs: &CpuStorage,
        gl: &Layout,
    ) -> Result<()> {
        let (CpuStorage::F32(p), CpuStorage::F32(g)) = (dst, gs) else {
            bail!("lab-adamw: f32 only");
        };
        let (Some((p0, p1)), Some((g0, g1))) = (dl.contiguous_offsets(), gl.contiguous_offsets())
        else {
            bail!("lab-adamw: contiguous tensors only");
        };
        let (p, g) = (&mut p[p0..p1], &g[g0..g1]);
        let mut guard = self.moments.lock().expect("moments lock");
        let (m, v) = &mut *guard;
        let (m, v) = (&mut m[self.at..][..p.len()], &mut v[self.at..][..p.len()]);
        let u = self.u;
        const CHUNK: usize = 1 << 14;
        p.par_chunks_mut(CHUNK)
            .zip(m.par_chunks_mut(CHUNK))
            .zip(v.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)))
            .for_each(|((p, m), (v, g))| {
                for i in 0..p.len() {
                    let gi = g[i] * u.clip;
                    m[i] = u.beta1 * m[i] + (1.0 - u.beta1) * gi;
                    v[i] = u.beta2 * v[i] + (1.0 - u.beta2) * gi * gi;
                    p[i] *= 1.0 - u.lr * u.decay;
                    p[i] -= u.step_size * m[i] / (v[i].sqrt() / u.bc2_sqrt + u.eps);
                }
            });
        Ok(())
    }
}

impl AdamW {
    pub fn new(params: &[(String, Var)], hp: Hyper, kernels: Kernels) -> Result<AdamW> {
        let slots = params
            .iter()
            .map(|(name, var)| {
                let t = var.as_tensor();
                let moments = if t.device().is_cpu() && kernels == Kernels::Fused {
                    let n = t.elem_count();
                    Moments::Host(Mutex::new((vec![0.0; n], vec![0.0; n])))
                } else {
                    Moments::Device(t.zeros_like()?, t.zeros_like()?)
                };
                Ok(Slot {
                    name: name.clone(),
                    decay: t.rank() >= 2,
                    moments,
                })
            })
            .collect::<Result<_>>()?;
        #[cfg(feature = "cuda")]
        let launcher = match params.first().map(|(_, v)| v.device()) {
            Some(candle_core::Device::Cuda(dev)) if kernels == Kernels::Fused => Some(
                cuda::Launcher::new(dev, params.iter().map(|(_, v)| v.elem_count()))?,
            ),
            _ => None,
        };
        Ok(AdamW {
            hp,
            slots,
            steps: 0,
            #[cfg(feature = "cuda")]
            launcher,
        })
    }

    /// The global L2 norm of the gradients (before clipping): each tensor's sum of squares on
    /// its device, all of them brought to the host at once (one sync a step on a GPU, not one a
    /// tensor), then summed in parameter order in f64.
    pub fn grad_norm(params: &[(String, Var)], grads: &GradStore) -> Result<f64> {
        let mut sums = Vec::with_capacity(params.len());
        for (name, var) in params {
            let Some(g) = grads.get(var.as_tensor()) else {
                bail!("no gradient for {name}");
            };
            sums.push(g.sqr()?.sum_all()?.to_dtype(DType::F64)?);
        }
        let total: f64 = Tensor::stack(&sums, 0)?.to_vec1::<f64>()?.iter().sum();
        Ok(total.sqrt())
    }

    /// [`AdamW::grad_norm`] left on the parameters' device as an f64 scalar, so that nothing
    /// waits for it.
    fn grad_norm_on_device(params: &[(String, Var)], grads: &GradStore) -> Result<Tensor> {
        let mut sums = Vec::with_capacity(params.len());
        for (name, var) in params {
            let Some(g) = grads.get(var.as_tensor()) else {
                bail!("no gradient for {name}");
            };
            // Detached, as the moments' gradients are: the clip factor built from it must not
            // carry the step's graph into the moments.
            sums.push(g.detach().sqr()?.sum_all()?.to_dtype(DType::F64)?);
        }
        Tensor::stack(&sums, 0)?.sum_all()?.sqrt()
    }

    /// One update at learning rate `lr`. Returns the gradient norm before clipping as an f64
    /// scalar: computed on the host by the fused CPU kernels, and on the parameters' device by
    /// the composed path (CUDA's), where the clip factor stays too, so that the step enqueues
    /// without waiting and the caller reads the norm when it reads the loss.
    pub fn step(&mut self, params: &[(String, Var)], grads: &GradStore, lr: f64) -> Result<Tensor> {
        self.steps += 1;
        let hp = self.hp;
        let t = self.steps as i32;
        let bc1 = 1.0 - hp.beta1.powi(t);
        let bc2 = 1.0 - hp.beta2.powi(t);
        // Decay and clip factor are set per tensor and per path below.
        let shared = Update {
            lr: lr as f32,
            decay: 0.0,
            beta1: hp.beta1 as f32,
            beta2: hp.beta2 as f32,
            eps: hp.eps as f32,
            step_size: (lr / bc1) as f32,
            bc2_sqrt: bc2.sqrt() as f32,
            clip: 1.0,
        };
        #[cfg(feature = "cuda")]
        if let Some(l) = &mut self.launcher {
            return cuda_step(l, &self.slots, params, grads, hp, shared);
        }
        let on_host = self
            .slots
            .iter()
            .all(|s| matches!(s.moments, Moments::Host(_)));
        let (norm, clip, clip_on_device) = if on_host {
            let n = AdamW::grad_norm(params, grads)?;
            let clip = (hp.grad_clip / (n + 1e-6)).min(1.0);
            (Tensor::new(n, &candle_core::Device::Cpu)?, clip, None)
        } else {
            let n = AdamW::grad_norm_on_device(params, grads)?;
            let c = Tensor::new(hp.grad_clip, n.device())?
                .div(&(&n + 1e-6)?)?
                .minimum(1.0)?
                .to_dtype(DType::F32)?;
            (n, 1.0, Some(c))
        };
        for (slot, (_, var)) in self.slots.iter_mut().zip(params) {
            let grad = grads.get(var.as_tensor()).expect("checked in grad_norm");
            let u = Update {
                decay: slot.decay(hp),
                clip: clip as f32,
                ..shared
            };
            match &mut slot.moments {
                Moments::Host(m) => {
                    let op = InPlace {
                        u,
                        moments: m,
                        at: 0,
                    };
                    var.as_tensor().inplace_op2(&grad.contiguous()?, &op)?;
                }
                Moments::Device(m, v) => {
                    // candle leaves a variable's gradient undetached: built from the step's
                    // activations, it holds their graph, and moments built from it would keep
                    // every earlier step's graph alive (out of memory at step 21 of 100m-L8 in
                    // fp32 on an H200). Detached, the moments hold values only.
                    let clip = clip_on_device
                        .as_ref()
                        .expect("device moments clip on the device");
                    let g = grad.detach().broadcast_mul(clip)?;
                    *m = ((&*m * hp.beta1)? + (&g * (1.0 - hp.beta1))?)?;
                    *v = ((&*v * hp.beta2)? + (g.sqr()? * (1.0 - hp.beta2))?)?;
                    let p = (var.as_tensor() * (1.0 - lr * u.decay as f64))?;
                    let denom = ((v.sqrt()? / bc2.sqrt())? + hp.eps)?;
                    var.set(&(p - (m.div(&denom)? * (lr / bc1))?)?)?;
                }
            }
        }
        Ok(norm)
    }

    /// The moments as named tensors, for `optimizer.safetensors`.
    pub fn state_tensors(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for s in &self.slots {
            let (m, v) = match &s.moments {
                Moments::Host(mv) => {
                    let g = mv.lock().expect("moments lock");
                    (
                        Tensor::new(g.0.as_slice(), &candle_core::Device::Cpu)?,
                        Tensor::new(g.1.as_slice(), &candle_core::Device::Cpu)?,
                    )
                }
                Moments::Device(m, v) => (m.flatten_all()?, v.flatten_all()?),
            };
            out.push((format!("exp_avg.{}", s.name), m));
            out.push((format!("exp_avg_sq.{}", s.name), v));
        }
        Ok(out)
    }

    /// Restore moments saved by `state_tensors` and the step count.
    pub fn load_state(&mut self, mut t: HashMap<String, Tensor>, steps: u64) -> anyhow::Result<()> {
        for s in &mut self.slots {
            let mut take = |k: String| {
                t.remove(&k)
                    .ok_or_else(|| anyhow::anyhow!("missing {k}"))
                    .and_then(|x| Ok(x.to_dtype(DType::F32)?.flatten_all()?))
            };
            let m = take(format!("exp_avg.{}", s.name))?;
            let v = take(format!("exp_avg_sq.{}", s.name))?;
            match &mut s.moments {
                Moments::Host(mv) => {
                    let g = mv.get_mut().expect("moments lock");
                    let (mm, vv) = (m.to_vec1::<f32>()?, v.to_vec1::<f32>()?);
                    if mm.len() != g.0.len() || vv.len() != g.1.len() {
                        anyhow::bail!("moments of {} have the wrong size", s.name);
                    }
                    *g = (mm, vv);
                }
                Moments::Device(dm, dv) => {
                    *dm = m.to_device(dm.device())?.reshape(dm.shape())?;
                    *dv = v.to_device(dv.device())?.reshape(dv.shape())?;
                }
            }
        }
        self.steps = steps;
        Ok(())
    }
}

/// One update through the multi-tensor kernels: the norm, the clip factor and the update in
/// a few launches for all tensors, nothing read back.
#[cfg(feature = "cuda")]
fn cuda_step(
    l: &mut cuda::Launcher,
    slots: &[Slot],
    params: &[(String, Var)],
    grads: &GradStore,
    hp: Hyper,
    shared: Update,
) -> Result<Tensor> {
    let mut held = Vec::with_capacity(params.len());
    for (slot, (name, var)) in slots.iter().zip(params) {
        let Some(g) = grads.get(var.as_tensor()) else {
            bail!("no gradient for {name}");
        };
        let Moments::Device(m, v) = &slot.moments else {
            bail!("{name}: the CUDA optimizer keeps its moments on the GPU");
        };
        held.push((var, g.contiguous()?, m, v, slot.decay(hp)));
    }
    let tensors: Vec<_> = held
        .iter()
        .map(|(p, g, m, v, d)| (*p, g, *m, *v, *d))
        .collect();
    l.step(&tensors, hp.grad_clip, shared.into())
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    /// Parameters [1, 2] and [[0.5]] with the gradients of Σ a·[3, 4]·s + Σ b·12·s: norm 13·s.
    fn grads(params: &[(String, Var)], s: f64) -> GradStore {
        let coef = Tensor::new(&[3f32, 4.0], &Device::Cpu).unwrap();
        let a = params[0]
            .1
            .as_tensor()
            .mul(&coef)
            .unwrap()
            .sum_all()
            .unwrap();
        let b = (params[1].1.as_tensor() * 12.0).unwrap().sum_all().unwrap();
        ((a + b).unwrap() * s).unwrap().backward().unwrap()
    }

    fn params() -> Vec<(String, Var)> {
        vec![
            ("a".into(), Var::new(&[1f32, 2.0], &Device::Cpu).unwrap()),
            ("b".into(), Var::new(&[[0.5f32]], &Device::Cpu).unwrap()),
        ]
    }

    fn values(params: &[(String, Var)]) -> Vec<f32> {
        params
            .iter()
            .flat_map(|(_, v)| v.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    }

    fn hyper(grad_clip: f64) -> Hyper {
        Hyper {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip,
        }
    }

    /// The norm is the global L2 norm (13 by hand), and clipping scales each step's gradients
    /// to norm `grad_clip` before the moments see them: two clipped steps of norms 13 and 130
    /// equal two unclipped steps fed the same gradients at norm 1, and differ from two
    /// unclipped steps of the raw gradients (whose second step outweighs the first tenfold).
    #[test]
    fn the_norm_is_global_and_clipping_scales_each_step() {
        let p = params();
        assert!((AdamW::grad_norm(&p, &grads(&p, 1.0)).unwrap() - 13.0).abs() < 1e-9);
        let (clipped, by_hand, raw) = (params(), params(), params());
        let mut o1 = AdamW::new(&clipped, hyper(1.0), Kernels::Fused).unwrap();
        let mut o2 = AdamW::new(&by_hand, hyper(f64::INFINITY), Kernels::Fused).unwrap();
        let mut o3 = AdamW::new(&raw, hyper(f64::INFINITY), Kernels::Fused).unwrap();
        for s in [1.0, 10.0] {
            let norm = o1
                .step(&clipped, &grads(&clipped, s), 1e-2)
                .unwrap()
                .to_scalar::<f64>()
                .unwrap();
            assert!((norm - 13.0 * s).abs() < 1e-6 * s, "{norm}");
            o2.step(&by_hand, &grads(&by_hand, 1.0 / 13.0), 1e-2)
                .unwrap();
            o3.step(&raw, &grads(&raw, s), 1e-2).unwrap();
        }
        let (c, h, r) = (values(&clipped), values(&by_hand), values(&raw));
        for (x, y) in c.iter().zip(&h) {
            assert!((x - y).abs() < 1e-6, "clipped {c:?} vs by hand {h:?}");
        }
        assert!(
            c.iter().zip(&r).any(|(x, y)| (x - y).abs() > 1e-4),
            "clipping changed nothing: {c:?} vs {r:?}"
        );
    }

    /// ε adds to the denominator: gradients of 3e-11 to 1.2e-10, far below ε = 1e-8, move each
    /// (undecayed) weight by lr·g/(|g| + ε) against its gradient on both kernels. With ε
    /// subtracted, the first step would move every weight the wrong way.
    #[test]
    fn epsilon_damps_tiny_gradients_without_turning_them() {
        for kernels in [Kernels::Fused, Kernels::Composed] {
            let p = params();
            let before = values(&p);
            let mut o = AdamW::new(&p, hyper(f64::INFINITY), kernels).unwrap();
            let s = 1e-11;
            o.step(&p, &grads(&p, s), 1e-2).unwrap();
            // b is a matrix, so it also decays: 0.5·(1 − lr·0.1).
            let decayed = [1.0, 1.0, 1.0 - 1e-2 * 0.1];
            for (((x, b), g), d) in values(&p)
                .iter()
                .zip(&before)
                .zip([3.0, 4.0, 12.0])
                .zip(decayed)
            {
                let g = g * s;
                let want = *b as f64 * d - 1e-2 * g / (g + 1e-8);
                let moved = *b as f64 * d - *x as f64;
                assert!(
                    moved > 0.0 && (*x as f64 - want).abs() < 0.02 * moved,
                    "{kernels:?}: {b} -> {x}, want {want}"
                );
            }
        }
    }

    /// The composed update keeps no graph across steps. A variable's gradient computed from
    /// tracked tensors (here a·coef·a) is left tracked by candle, and moments built from it
    /// held every earlier step's activations: 250 MB a step at 1m-L4 in fp32, out of memory at
    /// step 21 of 100m-L8 on an H200 (bf16 was spared: its gradients pass through a cast).
    #[test]
    fn the_composed_moments_hold_no_graph() {
        let p = params();
        let coef = Tensor::new(&[3f32, 4.0], &Device::Cpu).unwrap();
        let a = p[0].1.as_tensor();
        let aa = a.mul(&coef).unwrap().mul(a).unwrap().sum_all().unwrap();
        let b = (p[1].1.as_tensor() * 12.0).unwrap().sum_all().unwrap();
        let g = (aa + b).unwrap().backward().unwrap();
        assert!(
            g.get(a).unwrap().track_op(),
            "the premise: a tracked gradient"
        );
        let mut o = AdamW::new(&p, hyper(1.0), Kernels::Composed).unwrap();
        o.step(&p, &g, 1e-2).unwrap();
        for s in &o.slots {
            let Moments::Device(m, v) = &s.moments else {
                panic!("{}: composed moments live on the device", s.name)
            };
            assert!(!m.track_op() && !v.track_op(), "{} holds a graph", s.name);
        }
    }

    /// The composed update (CUDA's) against the fused in-place one, over three steps with decay
    /// on the matrix and clipping on every step; and the moments saved after two steps and
    /// loaded into a fresh optimizer continue to the same third step, while moments of the
    /// wrong size are refused.
    #[test]
    fn the_composed_update_and_a_restored_state_match_the_fused_update() {
        let (fused, composed, restored) = (params(), params(), params());
        let mut of = AdamW::new(&fused, hyper(1.0), Kernels::Fused).unwrap();
        let mut oc = AdamW::new(&composed, hyper(1.0), Kernels::Composed).unwrap();
        for s in [1.0, 10.0] {
            of.step(&fused, &grads(&fused, s), 1e-2).unwrap();
            oc.step(&composed, &grads(&composed, s), 1e-2).unwrap();
        }
        let saved: HashMap<String, Tensor> = of.state_tensors().unwrap().into_iter().collect();
        assert_eq!(saved.len(), 4);
        for ((_, to), (_, from)) in restored.iter().zip(&fused) {
            to.set(from.as_tensor()).unwrap();
        }
        let mut or = AdamW::new(&restored, hyper(1.0), Kernels::Fused).unwrap();
        or.load_state(saved.clone(), of.steps).unwrap();
        for (p, o) in [
            (&fused, &mut of),
            (&composed, &mut oc),
            (&restored, &mut or),
        ] {
            o.step(p, &grads(p, 3.0), 1e-2).unwrap();
        }
        let (f, c, r) = (values(&fused), values(&composed), values(&restored));
        for ((x, y), z) in f.iter().zip(&c).zip(&r) {
            assert!((x - y).abs() < 1e-6, "fused {f:?} vs composed {c:?}");
            assert_eq!(x, z, "fused {f:?} vs restored {r:?}");
        }
        let mut wrong = saved;
        wrong.insert(
            "exp_avg.a".into(),
            Tensor::new(&[1f32], &Device::Cpu).unwrap(),
        );
        let mut o = AdamW::new(&params(), hyper(1.0), Kernels::Fused).unwrap();
        assert!(o.load_state(wrong, 2).is_err());
    }
}
