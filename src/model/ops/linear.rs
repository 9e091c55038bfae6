//! The linear layer y = x·W + b in Conv1D layout as one gemm, and its backward
//! (input, weight and bias gradients).

use super::*;

/// y = x · W + b with W in Conv1D (in, out) layout, as one gemm into rows preset to b.
struct Linear;

impl CustomOp3 for Linear {
    fn name(&self) -> &'static str {
        "lab-linear"
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
        let (k, n) = wl.shape().dims2()?;
        let m = x.len() / k;
        let mut y = written(m * n, |y| {
            y.par_chunks_mut(n * ROWS).for_each(|c| {
                for row in c.chunks_mut(n) {
                    row.write_copy_of_slice(b);
                }
            })
        });
        sgemm(m, n, k, &mut y, true, x, k, 1, w, n, 1, true);
        let mut dims = xl.shape().dims().to_vec();
        *dims.last_mut().unwrap() = n;
        Ok((CpuStorage::F32(y), Shape::from(dims)))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let packed = x.apply_op3_no_bwd(w, &dy.contiguous()?, &LinearBwd)?;
        let mut g = unpack(&packed, &[x, w, b])?.into_iter();
        Ok((g.next(), g.next(), g.next()))
    }
}

/// dx = dy · Wᵀ, dW = xᵀ · dy, db = Σ_rows dy, packed.
struct LinearBwd;

impl CustomOp3 for LinearBwd {
    fn name(&self) -> &'static str {
        "lab-linear-bwd"
    }

    fn cpu_fwd(
        &self,
        xs: &CpuStorage,
        xl: &Layout,
        ws: &CpuStorage,
        wl: &Layout,
        ds: &CpuStorage,
        dl: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(self.name());
        let x = f32s(xs, xl, self.name())?;
        let w = f32s(ws, wl, self.name())?;
        let dy = f32s(ds, dl, self.name())?;
        let (k, n) = wl.shape().dims2()?;
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
        Ok((CpuStorage::F32(out), Shape::from(m * k + k * n + n)))
    }
}

/// x · W + b over the last dimension of x, W (in, out).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.contiguous()?.apply_op3(w, b, Linear)
}
