//! The linear layer y = x·W + b in Conv1D layout as one gemm (on CUDA one cuBLASLt product
//! with the bias in its epilogue), and its backward (input, weight and bias gradients).

use super::*;

/// y = x · W + b with W in Conv1D (in, out) layout, as one gemm into rows preset to b, each
/// run's rows with its own W and b. On CUDA (a run alone) one cuBLASLt product with its
/// products in `dtype`, the bias added in its epilogue (the CPU's products are f32).
struct Linear {
    runs: Runs,
    dtype: DType,
    #[cfg(feature = "cuda")]
    kept: Kept,
}

/// The bf16 casts of x and W that a CUDA forward made, kept for its backward.
#[cfg(feature = "cuda")]
type Kept = std::sync::Mutex<Option<super::cublaslt::Casts>>;

/// What a forward kept, taken out (and no longer held there).
#[cfg(feature = "cuda")]
fn take(k: &Kept) -> Option<super::cublaslt::Casts> {
    k.lock().ok().and_then(|mut g| g.take())
}

/// The (rows, in, out) of a CUDA layer from its inputs x and W: a run alone (a pack trains
/// on the CPU), or an error naming `op`.
#[cfg(feature = "cuda")]
fn cuda_mkn(runs: &Runs, xs: &[CudaIn], op: &str) -> Result<(usize, usize, usize)> {
    if runs.len() != 1 {
        bail!("{op}: a pack trains on the CPU");
    }
    let (k, n) = in_out(xs[1].shape())?;
    Ok((xs[0].shape().elem_count() / k.max(1), k, n))
}

/// An error unless the products are f32, all the CPU kernels compute.
fn f32_products<K: Kernel>(dtype: DType) -> Result<()> {
    if dtype != DType::F32 {
        bail!(
            "{}: products in {dtype:?} on the CPU; its kernel is f32",
            K::NAME
        );
    }
    Ok(())
}

/// (in, out) of a linear layer's weight of shape ([N,] in, out).
fn in_out(w: &Shape) -> Result<(usize, usize)> {
    match w.dims() {
        [.., k, n] => Ok((*k, *n)),
        _ => bail!("lab-linear: a weight of shape {w:?}, not ([N,] in, out)"),
    }
}

impl Kernel for Linear {
    const NAME: &'static str = "lab-linear";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        f32_products::<Self>(self.dtype)?;
        let (x, w, b) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let (k, n) = in_out(xs[1].shape())?;
        self.runs.width(w.len(), Self::NAME)?;
        let m = self.runs.rows();
        if x.len() != m * k || w.len() != self.runs.len() * k * n {
            bail!(
                "{}: {} inputs and {} weights for {m} rows of {k} → {n}",
                Self::NAME,
                x.len(),
                w.len()
            );
        }
        let mut y = written(m * n, |y| {
            for (r, (at, rows)) in self.runs.spans().enumerate() {
                let b = &b[r * n..][..n];
                y[at * n..][..rows * n]
                    .par_chunks_mut(n * ROWS)
                    .for_each(|c| {
                        for row in c.chunks_mut(n) {
                            row.write_copy_of_slice(b);
                        }
                    })
            }
        });
        for (r, (at, rows)) in self.runs.spans().enumerate() {
            let (x, w) = (&x[at * k..][..rows * k], &w[r * k * n..][..k * n]);
            sgemm(rows, n, k, &mut y[at * n..], true, x, k, 1, w, n, 1, true);
        }
        let mut dims = xs[0].shape().dims().to_vec();
        *dims.last_mut().unwrap() = n;
        Ok((y, Shape::from(dims)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (m, k, n) = cuda_mkn(&self.runs, xs, Self::NAME)?;
        let (y, casts) = super::cublaslt::linear(&xs[0], &xs[1], &xs[2], (m, k, n), self.dtype)?;
        if let Ok(mut kept) = self.kept.lock() {
            *kept = casts;
        }
        let mut dims = xs[0].shape().dims().to_vec();
        *dims.last_mut().unwrap() = n;
        Ok((y, Shape::from(dims)))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let bwd = LinearBwd {
            runs: self.runs.clone(),
            dtype: self.dtype,
            #[cfg(feature = "cuda")]
            kept: std::sync::Mutex::new(take(&self.kept)),
        };
        let packed = apply_no_bwd(bwd, &[xs[0], xs[1], &dy.contiguous()?])?;
        Ok(unpack(&packed, xs)?.into_iter().map(Some).collect())
    }
}

/// dx = dy · Wᵀ, dW = xᵀ · dy, db = Σ_rows dy (each run's from its own rows), packed; on CUDA
/// (a run alone) two cuBLASLt products in `dtype`, db in the second's epilogue, from the
/// forward's casts where it `kept` them.
struct LinearBwd {
    runs: Runs,
    dtype: DType,
    #[cfg(feature = "cuda")]
    kept: Kept,
}

/// Σ over the rows (n wide) of dy, summed in blocks of `ROWS` rows.
fn column_sums(dy: &[f32], n: usize) -> Vec<f32> {
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
    sums
}

impl Kernel for LinearBwd {
    const NAME: &'static str = "lab-linear-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        f32_products::<Self>(self.dtype)?;
        let (x, w, dy) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].f32::<Self>()?,
        );
        let (k, n) = in_out(xs[1].shape())?;
        let (m, nr) = (self.runs.rows(), self.runs.len());
        let out = written(m * k + nr * (k * n + n), |out| {
            let (dx, rest) = out.split_at_mut(m * k);
            let (dw, db) = rest.split_at_mut(nr * k * n);
            for (r, (at, rows)) in self.runs.spans().enumerate() {
                let (x, dy) = (&x[at * k..][..rows * k], &dy[at * n..][..rows * n]);
                let w = &w[r * k * n..][..k * n];
                sgemm_into(
                    rows,
                    k,
                    n,
                    &mut dx[at * k..][..rows * k],
                    dy,
                    n,
                    1,
                    w,
                    1,
                    n,
                    true,
                );
                sgemm_into(
                    k,
                    n,
                    rows,
                    &mut dw[r * k * n..][..k * n],
                    x,
                    1,
                    k,
                    dy,
                    n,
                    1,
                    true,
                );
                db[r * n..][..n].write_copy_of_slice(&column_sums(dy, n));
            }
        });
        Ok((out, Shape::from(m * k + nr * (k * n + n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (m, k, n) = cuda_mkn(&self.runs, xs, Self::NAME)?;
        let casts = take(&self.kept);
        let out =
            super::cublaslt::linear_grads(&xs[0], &xs[1], &xs[2], (m, k, n), self.dtype, casts)?;
        Ok((out, Shape::from(m * k + k * n + n)))
    }
}

/// x · W + b over the last dimension of x, W (in, out).
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    linear_in(x, w, b, DType::F32)
}

/// The same with the products in `dtype` on CUDA (one cuBLASLt product, the bias in its
/// epilogue; the CPU's are f32): the CUDA model's linear layers with the lab's kernels.
pub fn linear_in(x: &Tensor, w: &Tensor, b: &Tensor, dtype: DType) -> Result<Tensor> {
    let rows = x.elem_count() / x.dims().last().copied().unwrap_or(1).max(1);
    let op = Linear {
        runs: Runs::one(rows),
        dtype,
        #[cfg(feature = "cuda")]
        kept: Kept::default(),
    };
    apply(op, &[&x.contiguous()?, &w.contiguous()?, &b.contiguous()?])
}

/// The linear layers of a pack: each run's rows of x with its W (the r-th of W (N, in, out))
/// and b (the r-th row of b (N, out)).
pub fn linear_runs(x: &Tensor, w: &Tensor, b: &Tensor, runs: &Runs) -> Result<Tensor> {
    let op = Linear {
        runs: runs.clone(),
        dtype: DType::F32,
        #[cfg(feature = "cuda")]
        kept: Kept::default(),
    };
    apply(op, &[&x.contiguous()?, &w.contiguous()?, &b.contiguous()?])
}
