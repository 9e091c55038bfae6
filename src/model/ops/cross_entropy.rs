//! Cross-entropy of logits rows against targets, a loss per row: on a GPU the kernel of
//! `cross_entropy.cu`, on the CPU the host build of the same file (the CPU model's head fuses it).

use super::*;

unsafe extern "C" {
    fn lab_ce_fwd_host(x: *const f32, targets: *const u32, loss: *mut f32, n: i32, v: i32);
    fn lab_ce_bwd_host(
        x: *const f32,
        targets: *const u32,
        dloss: *const f32,
        scale: f32,
        dx: *mut f32,
        loss: *mut f32,
        n: i32,
        v: i32,
    );
}

/// The rows and width of logits (n, v) with n targets below v, or an error naming `op`.
fn rows(logits: &Shape, targets: &[u32], op: &str) -> Result<(usize, usize)> {
    let (n, v) = logits.dims2()?;
    if targets.len() != n {
        bail!("{op}: {} targets for {n} rows", targets.len());
    }
    if let Some(t) = targets.iter().find(|&&t| t as usize >= v) {
        bail!("{op}: target {t} is not below the {v} logits");
    }
    Ok((n, v))
}

/// The loss of each row: log Σ exp(x) − x[target].
struct CrossEntropy;

impl Kernel for CrossEntropy {
    const NAME: &'static str = "lab-cross-entropy";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, t) = (xs[0].f32::<Self>()?, xs[1].u32::<Self>()?);
        let (n, v) = rows(xs[0].shape(), t, Self::NAME)?;
        let mut loss = vec![0f32; n];
        // SAFETY: x holds n rows of v, t and loss n values, every target below v.
        unsafe {
            lab_ce_fwd_host(
                x.as_ptr(),
                t.as_ptr(),
                loss.as_mut_ptr(),
                n as i32,
                v as i32,
            )
        };
        Ok((loss, Shape::from(n)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let n = xs[0].shape().dims2()?.0;
        Ok((
            cuda::cross_entropy(&xs[0], &xs[1], cuda::Ce::Loss)?,
            Shape::from(n),
        ))
    }

    fn bwd(&self, xs: &[&Tensor], dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let bwd = CrossEntropyBwd { scaled: None };
        let dx = apply_no_bwd(bwd, &[xs[0], xs[1], &dy.contiguous()?])?;
        Ok(vec![Some(dx), None])
    }
}

/// The logits' gradient from each row's loss gradient dloss (the third input):
/// (softmax − one-hot)·dloss (n, v). `scaled`: from one loss gradient for every row instead
/// (two inputs), and each row's loss times it after the gradient (n·v + n values), from the
/// same pass over the row.
struct CrossEntropyBwd {
    scaled: Option<f32>,
}

impl Kernel for CrossEntropyBwd {
    const NAME: &'static str = "lab-cross-entropy-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (x, t) = (xs[0].f32::<Self>()?, xs[1].u32::<Self>()?);
        let (n, v) = rows(xs[0].shape(), t, Self::NAME)?;
        let (g, scale) = match self.scaled {
            Some(s) => (std::ptr::null(), s),
            None => {
                let g = xs[2].f32::<Self>()?;
                if g.len() != n {
                    bail!("{}: {} loss gradients for {n} rows", Self::NAME, g.len());
                }
                (g.as_ptr(), 0.0)
            }
        };
        let mut out = vec![0f32; n * v + if self.scaled.is_some() { n } else { 0 }];
        let (dx, loss) = out.split_at_mut(n * v);
        let loss = if self.scaled.is_some() {
            loss.as_mut_ptr()
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: x and dx hold n rows of v, t n values, every target below v; g is null or
        // holds n values, as loss does where it is not null.
        unsafe {
            lab_ce_bwd_host(
                x.as_ptr(),
                t.as_ptr(),
                g,
                scale,
                dx.as_mut_ptr(),
                loss,
                n as i32,
                v as i32,
            )
        };
        Ok((out, self.shape(n, v)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (n, v) = xs[0].shape().dims2()?;
        let how = match self.scaled {
            Some(s) => cuda::Ce::GradAndLoss(s),
            None => cuda::Ce::Grad(&xs[2]),
        };
        Ok((cuda::cross_entropy(&xs[0], &xs[1], how)?, self.shape(n, v)))
    }
}

impl CrossEntropyBwd {
    fn shape(&self, n: usize, v: usize) -> Shape {
        if self.scaled.is_some() {
            Shape::from(n * v + n)
        } else {
            Shape::from((n, v))
        }
    }
}

/// The gradient of Σ_r g·loss_r with respect to logits (n, v), and each row's g·loss_r (n),
/// in one pass over the logits: what the head's loss needs of a chunk's logits.
pub(super) fn cross_entropy_grad_and_loss(
    logits: &Tensor,
    targets: &Tensor,
    g: f32,
) -> Result<(Tensor, Tensor)> {
    let (n, v) = logits.dims2()?;
    let both = apply_no_bwd(
        CrossEntropyBwd { scaled: Some(g) },
        &[&logits.contiguous()?, &targets.contiguous()?],
    )?;
    Ok((
        both.narrow(0, 0, n * v)?.reshape((n, v))?,
        both.narrow(0, n * v, n)?,
    ))
}

/// The cross-entropy of each row of logits (n, v) against its target (n, u32): a loss (n).
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    apply(
        CrossEntropy,
        &[&logits.contiguous()?, &targets.contiguous()?],
    )
}
