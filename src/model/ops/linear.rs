//! The linear layer y = x·W + b in Conv1D layout as one gemm, and its backward
//! (input, weight and bias gradients).

use super::*;

/// y = x · W + b with W in Conv1D (in, out) layout, as one gemm into rows preset to b.
struct Linear;

impl Kernel for Linear {
    const NAME: &'static str = "lab-linear";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, b) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let (k, n) = xs[1].shape().dims2()?;
        let m = x.len() / k;
        let mut y = written(m * n, |y| {
            y.par_chunks_mut(n * ROWS).for_each(|c| {
                for row in c.chunks_mut(n) {
                    row.write_copy_of_slice(b);
                }
            })
        });
        sgemm(m, n, k, &mut y, true, x, k, 1, w, n, 1, true);
        let mut dims = xs[0].shape().dims().to_vec();
        *dims.last_mut().unwrap() = n;
        Ok((y, Shape::from(dims)))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let packed = apply_no_bwd(LinearBwd, &[xs[0], xs[1], &dy.contiguous()?])?;
        Ok(unpack(&packed, xs)?.into_iter().map(Some).collect())
    }
}

/// dx = dy · Wᵀ, dW = xᵀ · dy, db = Σ_rows dy, packed.
struct LinearBwd;

impl Kernel for LinearBwd {
    const NAME: &'static str = "lab-linear-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, dy) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let (k, n) = xs[1].shape().dims2()?;
        let m = x.len() / k;
        let partials: Vec<Vec<f32>> = dy
            .par_chunks(n * ROWS)
            .map(|c| {
                let mut acc = vec![0f32; n];
                for row in c.chunks(n) {
                    for (a, v) in acc.iter_mut().zip(row) {
                        *a += v;
                    }
                }
                acc
            })
            .collect();
        let mut sums = vec![0f32; n];
        for p in partials {
            for (a, v) in sums.iter_mut().zip(p) {
                *a += v;
            }
        }
        let out = written(m * k + k * n + n, |out| {
            let (dx, rest) = out.split_at_mut(m * k);
            let (dw, db) = rest.split_at_mut(k * n);
            sgemm_into(m, k, n, dx, dy, n, 1, w, 1, n, true);
            sgemm_into(k, n, m, dw, x, 1, k, dy, n, 1, true);
            db.write_copy_of_slice(&sums);
        });
        Ok((out, Shape::from(m * k + k * n + n)))
    }
}

/// x · W + b over the last dimension of x, W (in, out).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    apply(Linear, &[&x.contiguous()?, w, b])
}
