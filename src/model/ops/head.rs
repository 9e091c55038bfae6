//! The tied LM head fused with masked cross-entropy at the loss rows: the forward
//! keeps each row's softmax, so the backward needs no second pass over the vocabulary.

use super::*;

/// Rows of the head per gemm. Each gemm packs all of `wte`, and the softmax is kept for the
/// backward anyway, so chunks are as large as a batch's loss rows: 128-row chunks cost model
/// (b) a fifth of its head forward (measured with LAB_PROFILE, scripts/bench/train.sh).
pub(super) const HEAD_CHUNK: usize = 4096;

/// mean over rows of −log softmax(x · wteᵀ)[target]. The forward keeps the softmax of each
/// row for the backward, which then needs no second pass over the vocabulary.
#[derive(Default)]
struct HeadCrossEntropy {
    probs: std::sync::Mutex<Vec<f32>>,
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
        let (v, e) = xs[1].shape().dims2()?;
        let n = tgt.len();
        if x.len() != n * e {
            bail!(
                "{}: {n} targets for {} rows",
                Self::NAME,
                x.len() / e.max(1)
            );
        }
        let mut probs = head_logits(x, w, e, v);
        let loss = head_softmax(&mut probs, v, tgt)
            .into_iter()
            .fold(0f64, |a, c| a + c);
        *self.probs.lock().expect("head probabilities") = probs;
        Ok((vec![(loss / n.max(1) as f64) as f32], Shape::from(())))
    }

    fn bwd(&self, xs: &[&Tensor], dloss: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let g = dloss.to_dtype(DType::F32)?.to_vec0::<f32>()?;
        let probs = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        let bwd = HeadCrossEntropyBwd {
            grad: g,
            probs: std::sync::Mutex::new(probs),
        };
        let packed = apply_no_bwd(bwd, xs)?;
        let mut g: Vec<Option<Tensor>> = unpack(&packed, &xs[..2])?.into_iter().map(Some).collect();
        // The targets have no gradient.
        g.push(None);
        Ok(g)
    }
}

/// The head backward from the saved softmax: dlogits = (p − onehot)·g/n, then dx (n×E) and
/// dwte (V×E), packed.
struct HeadCrossEntropyBwd {
    grad: f32,
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
        let (v, e) = xs[1].shape().dims2()?;
        let n = tgt.len();
        let mut dl = std::mem::take(&mut *self.probs.lock().expect("head probabilities"));
        if dl.len() != n * v {
            bail!(
                "{}: the forward's probabilities are gone (backward run twice?)",
                Self::NAME
            );
        }
        let g = self.grad / n.max(1) as f32;
        dl.par_chunks_mut(v)
            .zip(tgt.par_iter())
            .for_each(|(row, &t)| {
                for z in row.iter_mut() {
                    *z *= g;
                }
                row[t as usize] -= g;
            });
        // dx = dlogits · W ; dW = dlogitsᵀ · x
        let out = written(n * e + v * e, |out| {
            let (dx, dw) = out.split_at_mut(n * e);
            sgemm_into(n, e, v, dx, &dl, v, 1, w, e, 1, true);
            sgemm_into(v, e, n, dw, &dl, 1, v, x, e, 1, true);
        });
        Ok((out, Shape::from(n * e + v * e)))
    }
}

/// Mean cross-entropy of the rows of `x` (n×E) against `targets` (n, u32) under the tied head
/// `wte` (V×E).
pub fn head_cross_entropy(x: &Tensor, wte: &Tensor, targets: &Tensor) -> Result<Tensor> {
    apply(
        HeadCrossEntropy::default(),
        &[&x.contiguous()?, wte, targets],
    )
}
