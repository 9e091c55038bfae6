//! LayerNorm: one pass over a row for its statistics and output; the backward with
//! the weight and bias gradients reduced in fixed-size row blocks.

use super::*;

/// y = (x − mean) / √(var + ε) · w + b over the last dimension.
struct LayerNorm;

#[inline(always)]
fn ln_row_stats(x: &[f32]) -> (f32, f32) {
    let c = x.len() as f32;
    let mean = fastmath::sum(x) / c;
    // Σ (x − mean)² in runs of 128, each summed as `fastmath::dot` sums (the bits of a buffer
    // of deviations dotted with itself, without the buffer: its stores held each row up).
    let mut var = 0f32;
    for chunk in x.chunks(128) {
        var += fastmath::dot_sq_dev(chunk, mean);
    }
    let var = var / c;
    (mean, 1.0 / (var + LN_EPS).sqrt())
}

impl Kernel for LayerNorm {
    const NAME: &'static str = "lab-layer-norm";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, b) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let c = w.len();
        let y = written(x.len(), |y| {
            y.par_chunks_mut(c * ROWS)
                .zip(x.par_chunks(c * ROWS))
                .for_each(|(yc, xc)| {
                    fastmath::wide(
                        #[inline(always)]
                        || {
                            for (yr, xr) in yc.chunks_mut(c).zip(xc.chunks(c)) {
                                let (mean, rstd) = ln_row_stats(xr);
                                for (((y, x), w), b) in yr.iter_mut().zip(xr).zip(w).zip(b) {
                                    y.write((x - mean) * rstd * w + b);
                                }
                            }
                        },
                    )
                })
        });
        Ok((y, xs[0].shape().clone()))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let packed = apply_no_bwd(LayerNormBwd, &[xs[0], xs[1], &dy.contiguous()?])?;
        Ok(unpack(&packed, xs)?.into_iter().map(Some).collect())
    }
}

/// The LayerNorm backward as one pass: dx, then dw and db, packed in one flat tensor.
struct LayerNormBwd;

impl Kernel for LayerNormBwd {
    const NAME: &'static str = "lab-layer-norm-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, dy) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let c = w.len();
        let n = x.len();
        let out = written(n + 2 * c, |out| {
            let (dx, tail) = out.split_at_mut(n);
            ln_bwd_rows(dx, tail, x, w, dy)
        });
        Ok((out, Shape::from(n + 2 * c)))
    }
}

/// dx of every row into `dx`, and Σ_rows dy·x̂ then Σ_rows dy into `dwb` (2C).
fn ln_bwd_rows(
    dx: &mut [MaybeUninit<f32>],
    dwb: &mut [MaybeUninit<f32>],
    x: &[f32],
    w: &[f32],
    dy: &[f32],
) {
    let c = w.len();
    let partials: Vec<Vec<f32>> = dx
        .par_chunks_mut(c * ROWS)
        .zip(x.par_chunks(c * ROWS).zip(dy.par_chunks(c * ROWS)))
        .map(|(dxc, (xc, dyc))| {
            fastmath::wide(
                #[inline(always)]
                || {
                    let mut acc = vec![0f32; 2 * c];
                    let mut xhat = vec![0f32; c];
                    for ((dxr, xr), dyr) in dxc.chunks_mut(c).zip(xc.chunks(c)).zip(dyc.chunks(c)) {
                        let (mean, rstd) = ln_row_stats(xr);
                        // Zipped slices, not indices: bounds checks kept these loops
                        // scalar. The sums m1, m2 run in index order, on their own.
                        let (dw, db) = acc.split_at_mut(c);
                        for ((((xh, x), g), dw), db) in
                            xhat.iter_mut().zip(xr).zip(dyr).zip(dw).zip(db)
                        {
                            *xh = (x - mean) * rstd;
                            *dw += g * *xh;
                            *db += g;
                        }
                        let (mut m1, mut m2) = (0f32, 0f32);
                        for ((g, w), xh) in dyr.iter().zip(w).zip(&xhat) {
                            let g = g * w;
                            m1 += g;
                            m2 += g * xh;
                        }
                        let (m1, m2) = (m1 / c as f32, m2 / c as f32);
                        for (((dx, g), w), xh) in dxr.iter_mut().zip(dyr).zip(w).zip(&xhat) {
                            dx.write((g * w - m1 - xh * m2) * rstd);
                        }
                    }
                    acc
                },
            )
        })
        .collect();
    let mut sums = vec![0f32; 2 * c];
    for p in partials {
        for (t, v) in sums.iter_mut().zip(p) {
            *t += v;
        }
    }
    dwb.write_copy_of_slice(&sums);
}

pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    apply(LayerNorm, &[&x.contiguous()?, w, b])
}
