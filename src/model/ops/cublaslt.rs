//! The linear layer's forward on CUDA as one cuBLASLt product: y = x·W + b with the bias added
//! in the product's epilogue and y in f32, from f32 inputs or their bf16 casts.

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::cublaslt::{result, sys};
use candle_core::cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use candle_core::{CudaStorage, DType, Result, bail};

use super::cuda::CudaIn;

const OP: &str = "lab-linear";

/// cuBLASLt's workspace: 32 MiB, NVIDIA's advice for Hopper (4 MiB before it).
const WORKSPACE: usize = 32 << 20;

/// A cuBLASLt handle and its workspace, made once for the device's stream.
struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
}

// SAFETY: the handle is used only under `LT`'s lock, on the stream it was made for.
unsafe impl Send for Lt {}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: made by create_handle and destroyed once, here.
        let _ = unsafe { result::destroy_handle(self.handle) };
    }
}

static LT: Mutex<Option<Lt>> = Mutex::new(None);

fn lt_err(what: &str, e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("{OP}: cuBLASLt {what}: {e:?}"))
}

/// A descriptor, destroyed when dropped.
struct Owned<T: Copy>(
    T,
    unsafe fn(T) -> std::result::Result<(), result::CublasError>,
);

impl<T: Copy> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: made by the matching create call and destroyed once, here.
        let _ = unsafe { (self.1)(self.0) };
    }
}

/// A column-major (rows × cols) matrix of `ty` with leading dimension `ld`.
fn layout(
    ty: sys::cudaDataType,
    rows: usize,
    cols: usize,
    ld: usize,
) -> Result<Owned<sys::cublasLtMatrixLayout_t>> {
    let l = result::create_matrix_layout(ty, rows as u64, cols as u64, ld as i64)
        .map_err(|e| lt_err("matrix layout", e))?;
    Ok(Owned(l, result::destroy_matrix_layout))
}

/// A cuBLASLt attribute setter: of a matmul descriptor or of a preference.
type Setter<H, A> =
    unsafe fn(H, A, *const c_void, usize) -> std::result::Result<(), result::CublasError>;

/// Sets attribute `attr` of the live object `h` to `v` through `set`.
fn set<H, A, V>(set: Setter<H, A>, h: H, attr: A, v: &V) -> Result<()> {
    // SAFETY: h is live, and v is the attribute's type and size.
    unsafe { set(h, attr, v as *const V as *const c_void, size_of::<V>()) }
        .map_err(|e| lt_err("attribute", e))
}

/// The alignment of a device address in bytes, as cuBLASLt's preferences take it: the largest
/// power of two that divides it, at most 256.
fn alignment(p: u64) -> u32 {
    1u32 << p.trailing_zeros().min(8)
}

/// y (m × n, f32, row-major) = x (m × k) · W (k × n) + b (n), the inputs f32 and the product
/// in `dtype` (f32: TF32 where candle's f32 products use it; bf16: the inputs cast first, the
/// sums in f32). Row-major y is column-major yᵀ = Wᵀ·xᵀ, so W is cuBLASLt's A and x its B, and
/// the bias, one value a row of yᵀ, is its epilogue's.
pub fn linear(
    x: &CudaIn,
    w: &CudaIn,
    b: &CudaIn,
    (m, k, n): (usize, usize, usize),
    dtype: DType,
) -> Result<CudaStorage> {
    let dev = x.device();
    let (xv, wv, bv) = (x.f32(OP)?, w.f32(OP)?, b.f32(OP)?);
    if xv.len() != m * k || wv.len() != k * n || bv.len() != n {
        bail!(
            "{OP}: {} inputs, {} weights and {} biases for {m} rows of {k} → {n}",
            xv.len(),
            wv.len(),
            bv.len()
        );
    }
    // SAFETY: the product writes every value of y.
    let mut y = unsafe { dev.alloc::<f32>(m * n) }?;
    if m * n == 0 {
        return Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()));
    }
    let stream = dev.cuda_stream();
    let (input, compute) = match dtype {
        DType::F32 if candle_core::cuda::gemm_reduced_precision_f32() => (
            sys::cudaDataType_t::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        ),
        DType::F32 => (
            sys::cudaDataType_t::CUDA_R_32F,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        DType::BF16 => (
            sys::cudaDataType_t::CUDA_R_16BF,
            sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        ),
        d => bail!("{OP}: products in {d:?}; f32 or bf16"),
    };
    // The bf16 casts, kept alive until the product is queued.
    let casts = match dtype {
        DType::BF16 => Some((
            x.s.to_dtype(x.l, DType::BF16)?,
            w.s.to_dtype(w.l, DType::BF16)?,
        )),
        _ => None,
    };
    let (xp, _xr, wp, _wr);
    match &casts {
        Some((xb, wb)) => {
            (xp, _xr) = xb.as_cuda_slice::<half::bf16>()?.device_ptr(&stream);
            (wp, _wr) = wb.as_cuda_slice::<half::bf16>()?.device_ptr(&stream);
        }
        None => {
            (xp, _xr) = xv.device_ptr(&stream);
            (wp, _wr) = wv.device_ptr(&stream);
        }
    }
    let (bp, _br) = bv.device_ptr(&stream);

    let mut guard = LT.lock().map_err(|_| lt_err("handle", "poisoned"))?;
    if guard
        .as_ref()
        .is_none_or(|lt| !Arc::ptr_eq(&lt.stream, &stream))
    {
        let handle = result::create_handle().map_err(|e| lt_err("handle", e))?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE)
            .map_err(|e| lt_err("workspace", e))?;
        *guard = Some(Lt {
            handle,
            workspace,
            stream: stream.clone(),
        });
    }
    let lt = guard.as_mut().expect("made above");

    let desc = result::create_matmul_desc(compute, sys::cudaDataType_t::CUDA_R_32F)
        .map_err(|e| lt_err("descriptor", e))?;
    let desc = Owned(desc, result::destroy_matmul_desc);
    use sys::cublasLtMatmulDescAttributes_t as A;
    set(
        result::set_matmul_desc_attribute,
        desc.0,
        A::CUBLASLT_MATMUL_DESC_EPILOGUE,
        &sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
    )?;
    set(
        result::set_matmul_desc_attribute,
        desc.0,
        A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
        &bp,
    )?;
    set(
        result::set_matmul_desc_attribute,
        desc.0,
        A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
        &sys::cudaDataType_t::CUDA_R_32F,
    )?;
    let a = layout(input, n, k, n)?;
    let bl = layout(input, k, m, k)?;
    let d = layout(sys::cudaDataType_t::CUDA_R_32F, n, m, n)?;
    let pref = result::create_matmul_pref().map_err(|e| lt_err("preference", e))?;
    let pref = Owned(pref, result::destroy_matmul_pref);
    use sys::cublasLtMatmulPreferenceAttributes_t as P;
    set(
        result::set_matmul_pref_attribute,
        pref.0,
        P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
        &WORKSPACE,
    )?;
    // The heuristic assumes 256-byte aligned buffers unless told (a view may start anywhere).
    let (yp, _yr) = y.device_ptr_mut(&stream);
    for (attr, p) in [
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, wp),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, xp),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, yp),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, yp),
    ] {
        set(
            result::set_matmul_pref_attribute,
            pref.0,
            attr,
            &alignment(p),
        )?;
    }
    // SAFETY: every descriptor is live and describes the buffers below.
    let heuristic = unsafe {
        result::get_matmul_algo_heuristic(lt.handle, desc.0, a.0, bl.0, d.0, d.0, pref.0)
    }
    .map_err(|e| lt_err("no algorithm for these shapes", e))?;
    let (alpha, beta) = (1f32, 0f32);
    let (ws, _wsr) = lt.workspace.device_ptr_mut(&stream);
    // SAFETY: A is W (n × k column-major, ld n), B is x (k × m, ld k), C = D is y (n × m, ld
    // n) and the bias n values, all on this stream; beta = 0, so C is not read.
    unsafe {
        result::matmul(
            lt.handle,
            desc.0,
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
            wp as *const c_void,
            a.0,
            xp as *const c_void,
            bl.0,
            yp as *const c_void,
            d.0,
            yp as *mut c_void,
            d.0,
            &heuristic.algo,
            ws as *mut c_void,
            WORKSPACE,
            stream.cu_stream() as sys::cudaStream_t,
        )
    }
    .map_err(|e| lt_err("product", e))?;
    drop((_yr, _wsr));
    Ok(CudaStorage::wrap_cuda_slice(y, dev.clone()))
}
