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

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "lab-layer-norm"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        bs: &CpuStorage,
        bl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let b = f32s(bs, bl, self.name())?;
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
        Ok((CpuStorage::F32(y), xl.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let packed = x.apply_op3_no_bwd(w, &dy.contiguous()?, &LayerNormBwd)?;
        let mut g = unpack(&packed, &[x, w, b])?.into_iter();
        Ok((g.next(), g.next(), g.next()))
    }
}

/// The LayerNorm backward as one pass: dx, then dw and db, packed in one flat tensor.
struct LayerNormBwd;

impl CustomOp3 for LayerNormBwd {
    fn name(&self) -> &'static str {
        "lab-layer-norm-bwd"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        dys: &CpuStorage,
        dyl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let dy = f32s(dys, dyl, self.name())?;
        let c = w.len();
        let n = x.len();
        let out = written(n + 2 * c, |out| {
            let (dx, tail) = out.split_at_mut(n);
            ln_bwd_rows(dx, tail, x, w, dy)
        });
        Ok((CpuStorage::F32(out), Shape::from(n + 2 * c)))
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
    x.contiguous()?.apply_op3(w, b, LayerNorm)
}
