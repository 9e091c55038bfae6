//! The token and position embeddings in one op: x = wte[ids] + wpe[pos] forward, and both
//! tables' gradients in one pass back (`embedding.cu`, whose host build is the CPU version).

use super::*;

// The host build of `embedding.cu` (build.rs): this op's CPU version.
unsafe extern "C" {
    fn lab_emb_fwd_host(
        wte: *const f32,
        wpe: *const f32,
        tok: *const u32,
        x: *mut f32,
        n: i64,
        e: i32,
    );
    fn lab_emb_bwd_host(
        dx: *const f32,
        tok: *const u32,
        dwte: *mut f32,
        dwpe: *mut f32,
        n: i64,
        e: i32,
    );
}

/// The rows n and width e of an embedding of `tok` (2n: ids, then positions) from tables of
/// shapes `wte` and `wpe` (rows of width e), or an error naming `op`; every index in range.
fn rows_and_width(wte: &Shape, wpe: &Shape, tok: &[u32], op: &str) -> Result<(usize, usize)> {
    let ((v, e), (p, e2)) = (wte.dims2()?, wpe.dims2()?);
    if e != e2 || !tok.len().is_multiple_of(2) || e == 0 || e > i32::MAX as usize {
        bail!(
            "{op}: tables {:?} and {:?} for {} ids and positions",
            wte.dims(),
            wpe.dims(),
            tok.len()
        );
    }
    let n = tok.len() / 2;
    let (ids, pos) = tok.split_at(n);
    if let Some(t) = ids.iter().find(|&&t| t as usize >= v) {
        bail!("{op}: id {t} of a table of {v}");
    }
    if let Some(t) = pos.iter().find(|&&t| t as usize >= p) {
        bail!("{op}: position {t} of a table of {p}");
    }
    Ok((n, e))
}

/// wte[ids] + wpe[pos] for `tok` = ids then positions (2n, u32).
struct Embedding;

impl Kernel for Embedding {
    const NAME: &'static str = "lab-embedding";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (wte, wpe, tok) = (
            xs[0].f32::<Self>()?,
            xs[1].f32::<Self>()?,
            xs[2].u32::<Self>()?,
        );
        let (n, e) = rows_and_width(xs[0].shape(), xs[1].shape(), tok, Self::NAME)?;
        let mut x = vec![0f32; n * e];
        // SAFETY: x holds n·e values; every index is in its table (checked above).
        unsafe {
            lab_emb_fwd_host(
                wte.as_ptr(),
                wpe.as_ptr(),
                tok.as_ptr(),
                x.as_mut_ptr(),
                n as i64,
                e as i32,
            )
        };
        Ok((x, Shape::from((n, e))))
    }

    /// The ids are the lab's own on a GPU, not checked there (that would wait for the device).
    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (n, e) = (xs[2].shape().elem_count() / 2, xs[0].shape().dims2()?.1);
        Ok((
            cuda::embedding(&xs[0], &xs[1], &xs[2], n, e)?,
            Shape::from((n, e)),
        ))
    }

    fn bwd(&self, xs: &[&Tensor], dx: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let bwd = EmbeddingBwd {
            wte: xs[0].shape().clone(),
            wpe: xs[1].shape().clone(),
        };
        let packed = apply_no_bwd(bwd, &[xs[2], &dx.contiguous()?])?;
        let mut g: Vec<_> = unpack(&packed, &xs[..2])?.into_iter().map(Some).collect();
        g.push(None);
        Ok(g)
    }
}

/// dwte and dwpe (packed) from `tok` and dx, for tables of these shapes.
struct EmbeddingBwd {
    wte: Shape,
    wpe: Shape,
}

impl Kernel for EmbeddingBwd {
    const NAME: &'static str = "lab-embedding-bwd";

    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)> {
        let (tok, dx) = (xs[0].u32::<Self>()?, xs[1].f32::<Self>()?);
        let (n, e) = rows_and_width(&self.wte, &self.wpe, tok, Self::NAME)?;
        let (v, p) = (self.wte.elem_count(), self.wpe.elem_count());
        if dx.len() != n * e {
            bail!("{}: {} gradients for {n} rows of {e}", Self::NAME, dx.len());
        }
        let mut out = vec![0f32; v + p];
        let (dwte, dwpe) = out.split_at_mut(v);
        // SAFETY: dx holds n·e values, dwte and dwpe their tables' sizes, zeroed; every index
        // is in its table (checked above).
        unsafe {
            lab_emb_bwd_host(
                dx.as_ptr(),
                tok.as_ptr(),
                dwte.as_mut_ptr(),
                dwpe.as_mut_ptr(),
                n as i64,
                e as i32,
            )
        };
        Ok((out, Shape::from(v + p)))
    }

    #[cfg(feature = "cuda")]
    fn cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let (v, p) = (self.wte.elem_count(), self.wpe.elem_count());
        let e = self.wte.dims2()?.1;
        let out = cuda::embedding_grads(&xs[0], &xs[1], (v, p), e)?;
        Ok((out, Shape::from(v + p)))
    }
}

/// wte[ids] + wpe[pos] (n, E) for `tok` (2n, u32: the ids, then the positions), as
/// `wte.embedding(ids) + wpe.embedding(pos)` computes it, to the bit, each way.
pub fn embedding(wte: &Tensor, wpe: &Tensor, tok: &Tensor) -> Result<Tensor> {
    apply(
        Embedding,
        &[&wte.contiguous()?, &wpe.contiguous()?, &tok.contiguous()?],
    )
}
