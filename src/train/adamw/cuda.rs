//! The multi-tensor AdamW on a CUDA GPU: the launches of `src/train/adamw.cu` (the gradient
//! norm in 1 + ⌈n/64⌉ launches, the update in ⌈n/64⌉), the clip factor kept on the GPU.

use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::WrapErr;
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Result, Storage, Tensor, Var, bail};

use super::multi_tensor::{self, Entry, Scalars, Table};

// SAFETY: `Table` and `Scalars` are #[repr(C)] mirrors of the kernels' argument structs
// (checked in size by the host tests), passed by value.
unsafe impl candle_core::cuda::cudarc::driver::DeviceRepr for Table {}
unsafe impl candle_core::cuda::cudarc::driver::DeviceRepr for Scalars {}

const MODULE: &str = "lab-adamw";

static PTX: crate::device::Ptx = crate::device::Ptx {
    sm_90a: include_str!(concat!(env!("OUT_DIR"), "/adamw.sm_90a.ptx")),
    compute_80: include_str!(concat!(env!("OUT_DIR"), "/adamw.compute_80.ptx")),
};

/// The partial sums of the norm, one per block of all the launches, kept across steps.
pub struct Launcher {
    dev: CudaDevice,
    partials: CudaSlice<f64>,
}

/// A CUDA tensor's address at its first element (f32, contiguous).
fn address(t: &Tensor, dev: &CudaDevice) -> Result<u64> {
    let (s, l) = t.storage_and_layout();
    let Storage::Cuda(c) = &*s else {
        bail!("lab-adamw: a tensor not on the GPU")
    };
    let Some((start, _)) = l.contiguous_offsets() else {
        bail!("lab-adamw: a tensor not contiguous")
    };
    let stream = dev.cuda_stream();
    let (ptr, _sync) = c.as_cuda_slice::<f32>()?.device_ptr(&stream);
    Ok(ptr + (start * std::mem::size_of::<f32>()) as u64)
}

impl Launcher {
    /// Partial sums for tensors of `lens` elements.
    pub fn new(dev: &CudaDevice, lens: impl IntoIterator<Item = usize>) -> Result<Launcher> {
        let n = multi_tensor::total_blocks(lens).max(1);
        // NaN until a block writes its sum: a block that never does makes the norm NaN.
        let mut partials = unsafe { dev.alloc::<f64>(n) }?;
        dev.memcpy_htod(&vec![f64::NAN; n], &mut partials)?;
        Ok(Launcher {
            dev: dev.clone(),
            partials,
        })
    }

    /// One update of `params` from `grads` with moments `(m, v)` and each tensor's decay.
    /// Returns the gradient norm before clipping, an f64 scalar on the GPU.
    pub fn step(
        &mut self,
        tensors: &[(&Var, &Tensor, &Tensor, &Tensor, f32)],
        grad_clip: f64,
        s: Scalars,
    ) -> Result<Tensor> {
        let dev = &self.dev;
        let entries = tensors
            .iter()
            .map(|&(p, g, m, v, decay)| {
                Ok(Entry {
                    p: address(p.as_tensor(), dev)? as *mut f32,
                    m: address(m, dev)? as *mut f32,
                    v: address(v, dev)? as *mut f32,
                    g: address(g, dev)? as *const f32,
                    len: p.elem_count(),
                    decay,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let launches = multi_tensor::tables(&entries);
        let ptx = crate::device::ptx(dev, MODULE, &PTX)?;
        let sumsq = dev.get_or_load_custom_func("lab_sumsq", MODULE, ptx)?;
        let finish = dev.get_or_load_custom_func("lab_norm_finish", MODULE, ptx)?;
        let adamw = dev.get_or_load_custom_func("lab_adamw", MODULE, ptx)?;
        let cfg = |blocks: i32| LaunchConfig {
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (multi_tensor::THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY (all three launches): each table addresses live f32 tensors of the lengths it
        // records (the caller holds them until the step's work is done: every later use and
        // free is ordered after it on the one stream), parameters and moments are written by
        // no other work of this step, and the partial sums hold a value per block.
        for (t, base) in &launches {
            let base = *base as i32;
            let mut b = sumsq.builder();
            b.arg(t).arg(&mut self.partials).arg(&base);
            unsafe { b.launch(cfg(t.first_block[t.n as usize])) }.w()?;
        }
        // SAFETY: lab_norm_finish writes both (its thread 0), before anything reads them.
        let (mut norm, mut clip) = unsafe { (dev.alloc::<f64>(1)?, dev.alloc::<f32>(1)?) };
        let n = multi_tensor::total_blocks(entries.iter().map(|e| e.len)) as i32;
        let mut b = finish.builder();
        b.arg(&self.partials)
            .arg(&n)
            .arg(&grad_clip)
            .arg(&mut norm)
            .arg(&mut clip);
        unsafe { b.launch(cfg(1)) }.w()?;
        for (t, _) in &launches {
            let mut b = adamw.builder();
            b.arg(t).arg(&clip).arg(&s);
            unsafe { b.launch(cfg(t.first_block[t.n as usize])) }.w()?;
        }
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(norm, dev.clone()));
        Ok(Tensor::from_storage(storage, (), BackpropOp::none(), false))
    }
}
