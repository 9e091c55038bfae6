//! The one adapter every lab op goes through: a `Kernel` gives its name, its CPU forward over
//! contiguous inputs (and its CUDA one, where it has one) and its backward; `apply` and
//! `apply_no_bwd` run it as a candle op.

use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result, Shape, Tensor, bail,
};

#[cfg(feature = "cuda")]
use super::cuda::CudaIn;
use super::{f32s, u32s};
use crate::model::profile;

/// One contiguous host input of a kernel.
pub struct In<'a> {
    s: &'a CpuStorage,
    l: &'a Layout,
}

impl<'a> In<'a> {
    pub fn f32<K: Kernel>(&self) -> Result<&'a [f32]> {
        f32s(self.s, self.l, K::NAME)
    }

    pub fn u32<K: Kernel>(&self) -> Result<&'a [u32]> {
        u32s(self.s, self.l, K::NAME)
    }

    pub fn shape(&self) -> &'a Shape {
        self.l.shape()
    }
}

/// A lab op: what it computes on the CPU and how its inputs' gradients follow.
pub trait Kernel: Send + Sync {
    /// The op's name, in its errors and in the profile.
    const NAME: &'static str;

    /// The output and its shape from the inputs, in `apply`'s order.
    fn cpu(&self, xs: &[In]) -> Result<(Vec<f32>, Shape)>;

    /// The output and its shape from the inputs on a GPU, where the kernel has a CUDA version.
    #[cfg(feature = "cuda")]
    fn cuda(&self, _xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        bail!("{}: no CUDA version", Self::NAME)
    }

    /// The inputs' gradients (None for one without) from the inputs and the output's
    /// gradient. Asked only of a kernel run by `apply`.
    fn bwd(&self, _xs: &[&Tensor], _dy: &Tensor) -> Result<Vec<Option<Tensor>>> {
        bail!("{}: no backward", Self::NAME)
    }
}

/// A kernel as a candle op of its arity.
struct Op<K>(K);

impl<K: Kernel> Op<K> {
    fn run(&self, xs: &[In]) -> Result<(CpuStorage, Shape)> {
        let _t = profile::span(K::NAME);
        let (y, shape) = self.0.cpu(xs)?;
        Ok((CpuStorage::F32(y), shape))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(&self, xs: &[CudaIn]) -> Result<(candle_core::CudaStorage, Shape)> {
        let _t = profile::span(K::NAME);
        self.0.cuda(xs)
    }

    fn grads<const N: usize>(&self, xs: [&Tensor; N], dy: &Tensor) -> Result<[Option<Tensor>; N]> {
        let mut g = self.0.bwd(&xs, dy)?.into_iter();
        Ok(std::array::from_fn(|_| g.next().flatten()))
    }
}

impl<K: Kernel> CustomOp1 for Op<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.run(&[In { s, l }])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.run_cuda(&[CudaIn { s, l }])
    }

    fn bwd(&self, x: &Tensor, _y: &Tensor, dy: &Tensor) -> Result<Option<Tensor>> {
        let [g] = self.grads([x], dy)?;
        Ok(g)
    }
}

impl<K: Kernel> CustomOp2 for Op<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.run(&[In { s: s1, l: l1 }, In { s: s2, l: l2 }])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.run_cuda(&[CudaIn { s: s1, l: l1 }, CudaIn { s: s2, l: l2 }])
    }

    fn bwd(
        &self,
        x1: &Tensor,
        x2: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let [g1, g2] = self.grads([x1, x2], dy)?;
        Ok((g1, g2))
    }
}

impl<K: Kernel> CustomOp3 for Op<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.run(&[
            In { s: s1, l: l1 },
            In { s: s2, l: l2 },
            In { s: s3, l: l3 },
        ])
    }

    #[cfg(feature = "cuda")]
    #[allow(clippy::too_many_arguments)]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        self.run_cuda(&[
            CudaIn { s: s1, l: l1 },
            CudaIn { s: s2, l: l2 },
            CudaIn { s: s3, l: l3 },
        ])
    }

    fn bwd(
        &self,
        x1: &Tensor,
        x2: &Tensor,
        x3: &Tensor,
        _y: &Tensor,
        dy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [g1, g2, g3] = self.grads([x1, x2, x3], dy)?;
        Ok((g1, g2, g3))
    }
}

/// `k` on one to three inputs, with its backward in the graph.
pub fn apply<K: Kernel + 'static>(k: K, xs: &[&Tensor]) -> Result<Tensor> {
    match xs {
        [a] => a.apply_op1(Op(k)),
        [a, b] => a.apply_op2(b, Op(k)),
        [a, b, c] => a.apply_op3(b, c, Op(k)),
        _ => bail!("{}: {} inputs; a kernel takes 1 to 3", K::NAME, xs.len()),
    }
}

/// `k` on one to three inputs, outside the graph (a backward's own kernel).
pub fn apply_no_bwd<K: Kernel>(k: K, xs: &[&Tensor]) -> Result<Tensor> {
    let op = Op(k);
    match xs {
        [a] => a.apply_op1_no_bwd(&op),
        [a, b] => a.apply_op2_no_bwd(b, &op),
        [a, b, c] => a.apply_op3_no_bwd(b, c, &op),
        _ => bail!("{}: {} inputs; a kernel takes 1 to 3", K::NAME, xs.len()),
    }
}
