//! The tied LM head fused with masked cross-entropy at the loss rows: on the CPU the forward
//! keeps each row's softmax; on any device `head_loss` keeps no logits (chunks, grads made early).

use super::*;

/// Rows of the head per gemm. Each gemm packs all of `wte`, and the softmax is kept for the
/// backward anyway, so chunks are as large as a batch's loss rows: 128-row chunks cost model
/// (b) a fifth of its head forward (measured with LAB_PROFILE, scripts/bench/train.sh).
pub(super) const HEAD_CHUNK: usize = 4096;

/// mean over rows of −log softmax(x · wteᵀ)[target], for each run over its own rows under its
/// own wte. The forward keeps the softmax of each row for the backward, which then needs no
/// second pass over the vocabulary.
struct HeadCrossEntropy {
    runs: Runs,
    probs: std::sync::Mutex<Vec<f32>>,
}

/// (V, E) of each run's tied head in a weight of shape (N, V, E) or (N·V, E).
fn vocab_width(w: &Shape, runs: &Runs) -> Result<(usize, usize)> {
    match w.dims() {
        [.., _, e] if *e > 0 => Ok((
            runs.width(w.elem_count(), "lab-head-cross-entropy")? / e,
            *e,
        )),
        _ => bail!("lab-head-cross-entropy: a weight of shape {w:?}, not ([N,] V, E)"),
    }
}

/// The logits of rows `x` (n×E), a gemm per `HEAD_CHUNK` rows.
fn head_logits(x: &[f32], w: &[f32], e: usize, v: usize) -> Vec<f32> {
    let n = x.len() / e.max(1);
    written(n * v, |out| {
        for (xc, oc) in x.chunks(HEAD_CHUNK * e).zip(out.chunks_mut(HEAD_CHUNK * v)) {
            sgemm_into(xc.len() / e, v, e, oc, xc, e, 1, w, 1, e, true);
        }
    })
}

/// Each row of logits turned into its softmax in place; returns the summed loss of each
/// `HEAD_CHUNK` rows. Rows run in parallel; one exp per logit.
fn head_softmax(logits: &mut [f32], v: usize, tgt: &[u32]) -> Vec<f64> {
    let losses: Vec<f64> = logits
        .par_chunks_mut(v)
        .zip(tgt.par_iter())
        .map(|(row, &t)| {
            fastmath::wide(
                #[inline(always)]
                || {
                    let target = row[t as usize];
                    let (max, sum) = fastmath::softmax_in_place(row);
                    (max + sum.ln() - target) as f64
                },
            )
        })
        .collect();
    losses.chunks(HEAD_CHUNK).map(|c| c.iter().sum()).collect()
}

impl Kernel for HeadCrossEntropy {
    const NAME: &'static str = "lab-head-cross-entropy";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, tgt) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].u32::<Self>()?,
        );
        let (v, e) = vocab_width(xs[1].shape(), &self.runs)?;
        let n = tgt.len();
        if x.len() != n * e || n != self.runs.rows() || w.len() != self.runs.len() * v * e {
            bail!(
                "{}: {n} targets for {} rows, {} runs",
                Self::NAME,
                x.len() / e.max(1),
                self.runs.len()
            );
        }
        let mut probs = Vec::with_capacity(n * v);
        let mut losses = Vec::with_capacity(self.runs.len());
        for (r, (at, rows)) in self.runs.spans().enumerate() {
            let mut p = head_logits(&x[at * e..][..rows * e], &w[r * v * e..][..v * e], e, v);
            let loss = head_softmax(&mut p, v, &tgt[at..][..rows])
                .into_iter()
                .fold(0f64, |a, c| a + c);
            losses.push((loss / rows.max(1) as f64) as f32);
            probs.extend_from_slice(&p);
        }
        *self.probs.lock().expect("head probabilities") = probs;
        let shape = match self.runs.len() {
            1 => Shape::from(()),
            n => Shape::from(n),
        };
        Ok((losses, shape))
    }

    fn bwd(&self, xs: &[&Tensor], dloss: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let grads = dloss
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let probs = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        let bwd = HeadCrossEntropyBwd {
            runs: self.runs.clone(),
            grads,
            probs: std::sync::Mutex::new(probs),
        };
        let packed = apply_no_bwd(bwd, xs)?;
        let mut g: Vec<Option<Tensor>> = unpack(&packed, &xs[..2])?.into_iter().map(Some).collect();
        // The targets have no gradient.
        g.push(None);
        Ok(g)
    }
}

/// The head backward from the saved softmax: dlogits = (p − onehot)·g/n for each run's rows
/// (g its loss's gradient, n its rows), then dx (n×E) and each run's dwte (V×E), packed.
struct HeadCrossEntropyBwd {
    runs: Runs,
    grads: Vec<f32>,
    probs: std::sync::Mutex<Vec<f32>>,
}

impl Kernel for HeadCrossEntropyBwd {
    const NAME: &'static str = "lab-head-cross-entropy-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, tgt) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].u32::<Self>()?,
        );
        let (v, e) = vocab_width(xs[1].shape(), &self.runs)?;
        let (n, nr) = (tgt.len(), self.runs.len());
        let mut dl = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        if dl.len() != n * v || self.grads.len() != nr {
            bail!(
                "{}: the forward's probabilities are gone (backward run twice?)",
                Self::NAME
            );
        }
        for ((at, rows), &grad) in self.runs.spans().zip(&self.grads) {
            let g = grad / rows.max(1) as f32;
            dl[at * v..][..rows * v]
                .par_chunks_mut(v)
                .zip(tgt[at..][..rows].par_iter())
                .for_each(|(row, &t)| {
                    for z in row.iter_mut() {
                        *z *= g;
                    }
                    row[t as usize] -= g;
                });
        }
        // dx = dlogits · W ; dW = dlogitsᵀ · x, each run's own.
        let out = written(n * e + nr * v * e, |out| {
            let (dx, dw) = out.split_at_mut(n * e);
            for (r, (at, rows)) in self.runs.spans().enumerate() {
                let (dl, w) = (&dl[at * v..][..rows * v], &w[r * v * e..][..v * e]);
                let (dx, dw) = (&mut dx[at * e..][..rows * e], &mut dw[r * v * e..][..v * e]);
                sgemm_into(rows, e, v, dx, dl, v, 1, w, e, 1, true);
                sgemm_into(
                    v,
                    e,
                    rows,
                    dw,
                    dl,
                    1,
                    v,
                    &x[at * e..][..rows * e],
                    e,
                    1,
                    true,
                );
            }
        });
        Ok((out, Shape::from(n * e + nr * v * e)))
    }
}

/// Mean cross-entropy of the rows of `x` (n×E) against `targets` (n, u32) under the tied head
/// `wte` (V×E).
pub fn head_cross_entropy(x: &Tensor, wte: &Tensor, targets: &Tensor) -> Result<Tensor> {
    head_cross_entropy_runs(x, wte, targets, &Runs::one(targets.elem_count()))
}

/// The losses of a pack, (N,): run r's mean cross-entropy over its rows of x against its
/// targets under its tied head, the r-th of wte (N, V, E). A pack of one gives a scalar.
pub fn head_cross_entropy_runs(
    x: &Tensor,
    wte: &Tensor,
    targets: &Tensor,
    runs: &Runs,
) -> Result<Tensor> {
    let op = HeadCrossEntropy {
        runs: runs.clone(),
        probs: Default::default(),
    };
    apply(op, &[&x.contiguous()?, &wte.contiguous()?, targets])
}

/// The mean cross-entropy of the rows of `x` (n×E) against `targets` under the tied head `wte`
/// (V×E) on any device, its products in `dtype`, with no logits kept for the backward: each
/// chunk of `HEAD_CHUNK` rows makes its logits, turns them into their gradient and its losses
/// in one pass (`cross_entropy.cu`), and then into its share of dx and dwte; the backward only
/// scales those by the loss's gradient. On CUDA the model's loss with the lab's kernels.
pub fn head_loss(x: &Tensor, wte: &Tensor, targets: &Tensor, dtype: DType) -> Result<Tensor> {
    head_loss_chunked(x, wte, targets, dtype, HEAD_CHUNK)
}

/// The rows of x (n×E) under a head (V×E) with n targets, or an error saying what is amiss.
fn head_rows(x: &Tensor, wte: &Tensor, targets: &Tensor) -> Result<usize> {
    let (n, e) = x.dims2()?;
    let (_, we) = wte.dims2()?;
    if n == 0 || we != e || targets.elem_count() != n {
        bail!(
            "lab-head-loss: rows {:?} of a head {:?} against {} targets",
            x.dims(),
            wte.dims(),
            targets.elem_count()
        );
    }
    Ok(n)
}

/// The chunks of n rows, `chunk` at most each: (first row, rows).
fn chunks(n: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let c = chunk.max(1);
    (0..n).step_by(c).map(move |at| (at, c.min(n - at)))
}

/// Rows `at..at + rows` of x (detached) cast to `dtype`, and their logits (f32) under `w`
/// (V×E, already in `dtype`): each chunk's start in both head losses.
fn chunk_logits(
    x: &Tensor,
    w: &Tensor,
    (at, rows): (usize, usize),
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let hc = x.detach().narrow(0, at, rows)?.to_dtype(dtype)?;
    let logits = matmul_f32(&hc, &w.t()?, dtype)?;
    Ok((hc, logits))
}

/// `head_loss` with chunks of `chunk` rows.
pub(super) fn head_loss_chunked(
    x: &Tensor,
    wte: &Tensor,
    targets: &Tensor,
    dtype: DType,
    chunk: usize,
) -> Result<Tensor> {
    let n = head_rows(x, wte, targets)?;
    let mm = |a: &Tensor, b: &Tensor| matmul_f32(a, b, dtype);
    // Outside the graph: this op's backward is the gradients made here.
    let w = wte.detach().to_dtype(dtype)?;
    let (mut losses, mut dxs, mut dw) = (Vec::new(), Vec::new(), None);
    for (at, rows) in chunks(n, chunk) {
        // hc cast once for both of its products.
        let (hc, logits) = chunk_logits(x, &w, (at, rows), dtype)?;
        let (dl, loss) = super::cross_entropy::cross_entropy_grad_and_loss(
            &logits,
            &targets.narrow(0, at, rows)?,
            1.0 / n as f32,
        )?;
        drop(logits);
        // Cast once for both of its products.
        let dl = dl.to_dtype(dtype)?;
        dxs.push(mm(&dl, &w)?);
        let dwc = mm(&dl.t()?, &hc)?;
        dw = Some(match dw {
            None => dwc,
            Some(d) => (d + dwc)?,
        });
        losses.push(loss);
    }
    // Each row's loss came weighted by g = 1/n: their sum is the mean.
    let loss = Tensor::cat(&losses, 0)?.sum_all()?;
    let grads = HeadGrads {
        dx: Tensor::cat(&dxs, 0)?,
        dw: dw.expect("at least one chunk"),
    };
    apply(grads, &[x, wte, &loss])
}

/// `head_loss` for a loss nothing differentiates (validation): each chunk's logits and their
/// rows' losses (`ops::cross_entropy`'s kernel), none of the two products a gradient takes.
pub fn head_loss_value(x: &Tensor, wte: &Tensor, targets: &Tensor, dtype: DType) -> Result<Tensor> {
    head_loss_value_chunked(x, wte, targets, dtype, HEAD_CHUNK)
}

/// `head_loss_value` with chunks of `chunk` rows.
pub(super) fn head_loss_value_chunked(
    x: &Tensor,
    wte: &Tensor,
    targets: &Tensor,
    dtype: DType,
    chunk: usize,
) -> Result<Tensor> {
    let n = head_rows(x, wte, targets)?;
    let w = wte.detach().to_dtype(dtype)?;
    let mut losses = Vec::new();
    for (at, rows) in chunks(n, chunk) {
        let (_, logits) = chunk_logits(x, &w, (at, rows), dtype)?;
        losses.push(super::cross_entropy::cross_entropy(
            &logits,
            &targets.narrow(0, at, rows)?,
        )?);
    }
    Tensor::cat(&losses, 0)?.mean_all()
}

/// The head loss in the graph: its forward passes the loss on, its backward scales the
/// gradients of x and wte made in the forward by the loss's gradient.
struct HeadGrads {
    dx: Tensor,
    dw: Tensor,
}

impl Kernel for HeadGrads {
    const NAME: &'static str = "lab-head-loss";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        Ok((xs[2].f32::<Self>()?.to_vec(), xs[2].shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        use candle_core::backend::BackendStorage;
        Ok((xs[2].s.try_clone(xs[2].l)?, xs[2].shape().clone()))
    }

    fn bwd(&self, _xs: &[&Tensor], dloss: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = dloss.to_dtype(DType::F32)?;
        Ok(vec![
            Some(self.dx.broadcast_mul(&g)?),
            Some(self.dw.broadcast_mul(&g)?),
            None,
        ])
    }
}
