//! tanh-GELU (HF `gelu_new`): the forward keeps each tanh, so the backward computes
//! none of its own; on CUDA the kernels of `gelu.cu`.

use super::*;

// The host build of `gelu.cu` (build.rs): this op's CPU version, and the host tests' runs.
unsafe extern "C" {
    #[cfg(test)]
    pub(super) fn lab_gelu_fwd_host(x: *const f32, y: *mut f32, n: i64);
    #[cfg(test)]
    pub(super) fn lab_gelu_bwd_host(x: *const f32, dy: *const f32, dx: *mut f32, n: i64);
}

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

impl Kernel for Gelu {
    const NAME: &'static str = "lab-gelu";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let x = xs[0].f32::<Self>()?;
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
        Ok((y, xs[0].shape().clone()))
    }

    /// On a GPU the tanh is computed again by the backward (one thread an element).
    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda::gelu(&xs[0], None)?, xs[0].shape().clone()))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let tanh = std::mem::take(&mut *self.tanh.lock().expect("gelu tanh"));
        let bwd = GeluBwd {
            tanh: std::sync::Mutex::new(tanh),
        };
        Ok(vec![Some(apply_no_bwd(bwd, &[xs[0], &dy.contiguous()?])?)])
    }
}

/// dx from dy and the forward's tanh (computed again if it is gone: a second backward).
struct GeluBwd {
    tanh: std::sync::Mutex<Vec<f32>>,
}

impl Kernel for GeluBwd {
    const NAME: &'static str = "lab-gelu-bwd";

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((cuda::gelu(&xs[0], Some(&xs[1]))?, xs[0].shape().clone()))
    }

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, dy) = (xs[0].f32::<Self>()?, xs[1].f32::<Self>()?);
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
        Ok((dx, xs[0].shape().clone()))
    }
}

pub fn gelu(x: &Tensor) -> Result<Tensor> {
    apply(Gelu::default(), &[&x.contiguous()?])
}
