//! LayerNorm: one pass over a row for its statistics and output; the backward with
//! the weight and bias gradients reduced in fixed-size row blocks.

use super::*;

/// y = (x − mean) / √(var + ε) · w + b over the last dimension, each run's rows with its own
/// w and b.
struct LayerNorm {
    runs: Runs,
}

#[cfg(feature = "cuda")]
impl LayerNorm {
    /// The rows and width of x for the CUDA kernels, which take a run alone (a pack trains on
    /// the CPU).
    fn cuda_rows(runs: &Runs, x: &Shape, w: &Shape) -> Result<(usize, usize)> {
        if runs.len() != 1 {
            bail!(
                "{}: a pack of {} runs on a GPU; packs train on the CPU",
                Self::NAME,
                runs.len()
            );
        }
        let c = w.elem_count();
        if c == 0 || !x.elem_count().is_multiple_of(c) {
            bail!(
                "{}: {} values are not rows of {c}",
                Self::NAME,
                x.elem_count()
            );
        }
        Ok((x.elem_count() / c, c))
    }
}

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
        let c = self.runs.width(w.len(), Self::NAME)?;
        if x.len() != self.runs.rows() * c {
            bail!(
                "{}: {} values are not {} rows of {c}",
                Self::NAME,
                x.len(),
                self.runs.rows()
            );
        }
        let y = written(x.len(), |mut y| {
            for (r, (at, n)) in self.runs.spans().enumerate() {
                let (yr, rest) = y.split_at_mut(n * c);
                y = rest;
                let (w, b) = (&w[r * c..][..c], &b[r * c..][..c]);
                ln_rows(yr, &x[at * c..][..n * c], w, b);
            }
        });
        Ok((y, xs[0].shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (rows, c) = Self::cuda_rows(&self.runs, xs[0].shape(), xs[1].shape())?;
        let y = cuda::layer_norm(&xs[0], &xs[1], &xs[2], rows, c)?;
        Ok((y, xs[0].shape().clone()))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let bwd = LayerNormBwd {
            runs: self.runs.clone(),
        };
        let packed = apply_no_bwd(bwd, &[xs[0], xs[1], &dy.contiguous()?])?;
        Ok(unpack(&packed, xs)?.into_iter().map(Some).collect())
    }
}

/// The LayerNorm of rows `x` with weights `w` and `b` into `y`.
fn ln_rows(y: &mut [MaybeUninit<f32>], x: &[f32], w: &[f32], b: &[f32]) {
    let c = w.len();
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
}

/// The LayerNorm backward as one pass: dx, then dw and db (each run's in turn), packed in one
/// flat tensor.
struct LayerNormBwd {
    runs: Runs,
}

impl Kernel for LayerNormBwd {
    const NAME: &'static str = "lab-layer-norm-bwd";

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (rows, c) = LayerNorm::cuda_rows(&self.runs, xs[0].shape(), xs[1].shape())?;
        let out = cuda::layer_norm_bwd(&xs[0], &xs[1], &xs[2], rows, c)?;
        Ok((out, Shape::from(rows * c + 2 * c)))
    }

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, dy) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let c = self.runs.width(w.len(), Self::NAME)?;
        let (n, wn) = (x.len(), w.len());
        let out = written(n + 2 * wn, |out| {
            let (mut dx, tail) = out.split_at_mut(n);
            let (dw, db) = tail.split_at_mut(wn);
            for (r, (at, rows)) in self.runs.spans().enumerate() {
                let (dxr, rest) = dx.split_at_mut(rows * c);
                dx = rest;
                let rows = at * c..(at + rows) * c;
                let sums = ln_bwd_rows(dxr, &x[rows.clone()], &w[r * c..][..c], &dy[rows]);
                dw[r * c..][..c].write_copy_of_slice(&sums[..c]);
                db[r * c..][..c].write_copy_of_slice(&sums[c..]);
            }
        });
        Ok((out, Shape::from(n + 2 * wn)))
    }
}

/// dx of every row into `dx`; returns Σ_rows dy·x̂ then Σ_rows dy (2C).
fn ln_bwd_rows(dx: &mut [MaybeUninit<f32>], x: &[f32], w: &[f32], dy: &[f32]) -> Vec<f32> {
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
    sums
}

/// LayerNorm over the last dimension of x (rows of C), w and b of C.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let rows = x.elem_count() / w.elem_count().max(1);
    layer_norm_runs(x, w, b, &Runs::one(rows))
}

/// LayerNorm of the rows of a pack: each run's rows of x (C each) with its w and b, the r-th
/// rows of w and b (N, C).
pub fn layer_norm_runs(x: &Tensor, w: &Tensor, b: &Tensor, runs: &Runs) -> Result<Tensor> {
    let op = LayerNorm { runs: runs.clone() };
    apply(op, &[&x.contiguous()?, &w.contiguous()?, &b.contiguous()?])
}
