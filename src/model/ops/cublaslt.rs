//! The linear layer on CUDA as cuBLASLt products, f32 out from f32 inputs or their bf16 casts:
//! y = x·W + b with the bias in the epilogue; dx, and dW with db in its epilogue.

use std::ffi::c_void;
use std::mem::size_of;
use std::sync::{Arc, Mutex};

use candle_core::backend::BackendStorage;
use candle_core::cuda::cudarc::cublaslt::{result, sys};
use candle_core::cuda::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, DevicePtr, DevicePtrMut, SyncOnDrop,
};
use candle_core::op::ReduceOp;
use candle_core::{CudaStorage, DType, Layout, Result, bail};

use super::cuda::CudaIn;
use super::kernel::{In, Kernel};
use super::lt_layout;

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

/// The element type of a product's inputs and its compute type for `dtype`: f32 (TF32 where
/// candle's f32 products use it) or bf16 (sums in f32).
fn types(dtype: DType) -> Result<(sys::cudaDataType, sys::cublasComputeType_t)> {
    use sys::cublasComputeType_t as C;
    use sys::cudaDataType_t as T;
    Ok(match dtype {
        DType::F32 if candle_core::cuda::gemm_reduced_precision_f32() => {
            (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32)
        }
        DType::F32 => (T::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (T::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        d => bail!("{OP}: products in {d:?}; f32 or bf16"),
    })
}

/// An input of the products in their dtype: f32 or bf16 as stored, or a cast to it.
pub enum Data<'a> {
    F32(CudaView<'a, f32>),
    Bf16(CudaView<'a, half::bf16>),
    Cast(CudaStorage),
}

impl<'a> Data<'a> {
    /// `x` ready for products in `dtype`: cast to bf16 (one launch) or as it is.
    fn of(x: &CudaIn<'a>, dtype: DType) -> Result<Data<'a>> {
        Ok(match dtype {
            DType::BF16 => Data::Cast(x.s.to_dtype(x.l, DType::BF16)?),
            _ => Data::F32(x.f32(OP)?),
        })
    }

    /// Its device address, valid while the guard lives.
    fn ptr<'s>(&'s self, stream: &'s CudaStream) -> Result<(u64, SyncOnDrop<'s>)> {
        Ok(match self {
            Data::F32(v) => v.device_ptr(stream),
            Data::Bf16(v) => v.device_ptr(stream),
            Data::Cast(s) if s.dtype() == DType::F32 => {
                s.as_cuda_slice::<f32>()?.device_ptr(stream)
            }
            Data::Cast(s) => s.as_cuda_slice::<half::bf16>()?.device_ptr(stream),
        })
    }

    /// The (r × c) row-major matrix `x` read in `dtype`, and whether its storage is x
    /// contiguous (else the contiguous transpose: strides (1, r)), as `lt_layout::transposed`
    /// takes it. An x not in `dtype` is cast, and then contiguous.
    fn row_major(x: &CudaIn<'a>, dtype: DType) -> Result<(Data<'a>, bool)> {
        let (r, c) = x.shape().dims2()?;
        if x.s.dtype() != dtype {
            return Ok((Data::Cast(x.s.to_dtype(x.l, dtype)?), true));
        }
        let contiguous = x.l.is_contiguous();
        if !contiguous && x.l.stride() != [1, r] {
            bail!(
                "{OP}: a product's input of strides {:?}: contiguous or transposed",
                x.l.stride()
            )
        }
        let span = x.l.start_offset()..x.l.start_offset() + r * c;
        let data = match dtype {
            DType::F32 => Data::F32(x.s.as_cuda_slice::<f32>()?.slice(span)),
            _ => Data::Bf16(x.s.as_cuda_slice::<half::bf16>()?.slice(span)),
        };
        Ok((data, contiguous))
    }
}

/// `matmul` as a lab op, outside the graph (the head's products).
pub struct Product(pub DType);

impl Kernel for Product {
    const NAME: &'static str = "lab-product";

    fn cpu(&self, _: &[In]) -> Result<(Vec<f32>, candle_core::Shape)> {
        bail!("{}: a CUDA product (the CPU's is matmul_in)", Self::NAME)
    }

    fn cuda(&self, xs: &[CudaIn]) -> Result<(CudaStorage, candle_core::Shape)> {
        let (c, mn) = matmul(&xs[0], &xs[1], self.0)?;
        Ok((c, mn.into()))
    }
}

/// a (m × k) · b (k × n) as a row-major f32 (m × n), from inputs already in `dtype` where they
/// are (else cast), each contiguous or the transpose of a contiguous matrix: one cuBLASLt
/// product, no cast of the result. Row-major c is column-major cᵀ = bᵀ·aᵀ.
pub fn matmul(a: &CudaIn, b: &CudaIn, dtype: DType) -> Result<(CudaStorage, (usize, usize))> {
    let dev = a.device();
    let ((m, k), (k2, n)) = (a.shape().dims2()?, b.shape().dims2()?);
    if k != k2 {
        bail!("{OP}: a product of ({m} × {k}) and ({k2} × {n})");
    }
    // SAFETY: the product writes every value of c.
    let mut c = unsafe { dev.alloc::<f32>(m * n) }?;
    if m * n * k > 0 {
        let stream = dev.cuda_stream();
        let ((ad, ac), (bd, bc)) = (Data::row_major(a, dtype)?, Data::row_major(b, dtype)?);
        let ((ap, _ar), (bp, _br)) = (ad.ptr(&stream)?, bd.ptr(&stream)?);
        let (cp, _cr) = c.device_ptr_mut(&stream);
        let p = lt_layout::matmul((m, k, n), ac, bc);
        with_lt(&stream, |lt| {
            product(lt, types(dtype)?, p, [bp, ap, cp], Epilogue::Nothing).map(|_| ())
        })?;
    } else if m * n > 0 {
        dev.cuda_stream()
            .memset_zeros(&mut c)
            .map_err(candle_core::Error::wrap)?;
    }
    Ok((CudaStorage::wrap_cuda_slice(c, dev.clone()), (m, n)))
}

/// What a product does besides D = op(A)·op(B).
#[derive(Clone, Copy)]
enum Epilogue {
    Nothing,
    /// Adds the bias at this address (one f32 a row of D) to every column.
    Bias(u64),
    /// Writes the sums of A's rows over the product's inner dimension (one f32 a row of D)
    /// here: the bias gradient, when A is dy.
    BiasGradA(u64),
}

/// `p`'s D (f32, column-major, leading dimension its rows, at `d`) = op(A)·op(B) with A at
/// `a` and B at `b`, and `epilogue`, queued on the handle's stream; inputs `ty`, sums
/// `compute`. Ok(false) when cuBLASLt has no algorithm for it (an epilogue it does not take
/// with these operands).
fn product(
    lt: &mut Lt,
    (ty, compute): (sys::cudaDataType, sys::cublasComputeType_t),
    p: lt_layout::Product,
    [a, b, d]: [u64; 3],
    epilogue: Epilogue,
) -> Result<bool> {
    let (pa, pb, (rows, cols)) = (p.a, p.b, p.d);
    use sys::cublasLtEpilogue_t as E;
    use sys::cublasLtMatmulDescAttributes_t as A;
    let desc = result::create_matmul_desc(compute, sys::cudaDataType_t::CUDA_R_32F)
        .map_err(|e| lt_err("descriptor", e))?;
    let desc = Owned(desc, result::destroy_matmul_desc);
    for (attr, t) in [
        (A::CUBLASLT_MATMUL_DESC_TRANSA, pa.trans),
        (A::CUBLASLT_MATMUL_DESC_TRANSB, pb.trans),
    ] {
        set(result::set_matmul_desc_attribute, desc.0, attr, &(t as i32))?;
    }
    let (mode, vector) = match epilogue {
        Epilogue::Nothing => (E::CUBLASLT_EPILOGUE_DEFAULT, None),
        Epilogue::Bias(p) => (E::CUBLASLT_EPILOGUE_BIAS, Some(p)),
        Epilogue::BiasGradA(p) => (E::CUBLASLT_EPILOGUE_BGRADA, Some(p)),
    };
    set(
        result::set_matmul_desc_attribute,
        desc.0,
        A::CUBLASLT_MATMUL_DESC_EPILOGUE,
        &mode,
    )?;
    if let Some(p) = vector {
        set(
            result::set_matmul_desc_attribute,
            desc.0,
            A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            &p,
        )?;
        set(
            result::set_matmul_desc_attribute,
            desc.0,
            A::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
            &sys::cudaDataType_t::CUDA_R_32F,
        )?;
    }
    let la = layout(ty, pa.rows, pa.cols, pa.ld)?;
    let lb = layout(ty, pb.rows, pb.cols, pb.ld)?;
    let ld = layout(sys::cudaDataType_t::CUDA_R_32F, rows, cols, rows)?;
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
    for (attr, p) in [
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, a),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, b),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, d),
        (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, d),
    ] {
        set(
            result::set_matmul_pref_attribute,
            pref.0,
            attr,
            &alignment(p),
        )?;
    }
    // SAFETY: every descriptor is live and describes the buffers below.
    let heuristic = match unsafe {
        result::get_matmul_algo_heuristic(lt.handle, desc.0, la.0, lb.0, ld.0, ld.0, pref.0)
    } {
        Ok(h) => h,
        Err(_) if vector.is_some() && !matches!(epilogue, Epilogue::Bias(_)) => return Ok(false),
        Err(e) => return Err(lt_err("no algorithm for these shapes", e)),
    };
    let (alpha, beta) = (1f32, 0f32);
    let stream = lt.stream.clone();
    let (ws, _wsr) = lt.workspace.device_ptr_mut(&stream);
    // SAFETY: A, B and D (= C, not read: beta = 0) are the buffers their layouts describe,
    // with the epilogue's vector, all on this stream.
    unsafe {
        result::matmul(
            lt.handle,
            desc.0,
            &alpha as *const f32 as *const c_void,
            &beta as *const f32 as *const c_void,
            a as *const c_void,
            la.0,
            b as *const c_void,
            lb.0,
            d as *const c_void,
            ld.0,
            d as *mut c_void,
            ld.0,
            &heuristic.algo,
            ws as *mut c_void,
            WORKSPACE,
            stream.cu_stream() as sys::cudaStream_t,
        )
    }
    .map_err(|e| lt_err("product", e))?;
    Ok(true)
}

/// Runs `f` with the cuBLASLt handle of `stream`, made (with its workspace) on first use.
fn with_lt<R>(stream: &Arc<CudaStream>, f: impl FnOnce(&mut Lt) -> Result<R>) -> Result<R> {
    let mut guard = LT.lock().map_err(|_| lt_err("handle", "poisoned"))?;
    if guard
        .as_ref()
        .is_none_or(|lt| !Arc::ptr_eq(&lt.stream, stream))
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
    f(guard.as_mut().expect("made above"))
}

/// The bf16 casts of x and W that a bf16 forward made, kept for its backward.
pub struct Casts {
    x: CudaStorage,
    w: CudaStorage,
}

/// y (m × n, f32, row-major) = x (m × k) · W (k × n) + b (n), the inputs f32 and the product
/// in `dtype`. Row-major y is column-major yᵀ = Wᵀ·xᵀ, so W is cuBLASLt's A and x its B, and
/// the bias, one value a row of yᵀ, is its epilogue's. Returns y and, in bf16, the casts.
pub fn linear(
    x: &CudaIn,
    w: &CudaIn,
    b: &CudaIn,
    (m, k, n): (usize, usize, usize),
    dtype: DType,
) -> Result<(CudaStorage, Option<Casts>)> {
    let dev = x.device();
    let bv = b.f32(OP)?;
    if x.shape().elem_count() != m * k || w.shape().elem_count() != k * n || bv.len() != n {
        bail!(
            "{OP}: {} inputs, {} weights and {} biases for {m} rows of {k} → {n}",
            x.shape().elem_count(),
            w.shape().elem_count(),
            bv.len()
        );
    }
    // SAFETY: the product writes every value of y.
    let mut y = unsafe { dev.alloc::<f32>(m * n) }?;
    if m * n == 0 {
        return Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), None));
    }
    let stream = dev.cuda_stream();
    let (xd, wd) = (Data::of(x, dtype)?, Data::of(w, dtype)?);
    {
        let ((xp, _xr), (wp, _wr)) = (xd.ptr(&stream)?, wd.ptr(&stream)?);
        let (bp, _br) = bv.device_ptr(&stream);
        let (yp, _yr) = y.device_ptr_mut(&stream);
        let p = lt_layout::linear((m, k, n));
        with_lt(&stream, |lt| {
            product(lt, types(dtype)?, p, [wp, xp, yp], Epilogue::Bias(bp)).map(|_| ())
        })?;
    }
    let casts = match (xd, wd) {
        (Data::Cast(x), Data::Cast(w)) => Some(Casts { x, w }),
        _ => None,
    };
    Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), casts))
}

/// The gradients of y = x·W + b from dy (m × n), packed as the CPU's backward packs them: dx
/// (m × k), dW (k × n), db (n), f32, from products in `dtype` with x and W the forward's casts
/// where it kept them (else cast here). dx = dy·Wᵀ is column-major dxᵀ = W·dyᵀ; dW = xᵀ·dy is
/// column-major dWᵀ = dyᵀ·x, whose epilogue sums A = dyᵀ's rows over the m rows of the batch:
/// db. Where cuBLASLt takes no such epilogue, db is dy's column sums, copied in.
pub fn linear_grads(
    x: &CudaIn,
    w: &CudaIn,
    dy: &CudaIn,
    mkn: (usize, usize, usize),
    dtype: DType,
    casts: Option<Casts>,
) -> Result<CudaStorage> {
    let (m, k, n) = mkn;
    let dev = x.device();
    let len = m * k + k * n + n;
    if m * n * k == 0 {
        let zeros = dev.alloc_zeros::<f32>(len)?;
        return Ok(CudaStorage::wrap_cuda_slice(zeros, dev.clone()));
    }
    // SAFETY: the products write dx and dW in full, and db is the epilogue's or copied in.
    let mut out = unsafe { dev.alloc::<f32>(len) }?;
    let stream = dev.cuda_stream();
    let (xd, wd) = match casts {
        Some(Casts { x, w }) => (Data::Cast(x), Data::Cast(w)),
        None => (Data::of(x, dtype)?, Data::of(w, dtype)?),
    };
    let dyd = Data::of(dy, dtype)?;
    let fused = {
        let ((xp, _xr), (wp, _wr)) = (xd.ptr(&stream)?, wd.ptr(&stream)?);
        let (dyp, _dyr) = dyd.ptr(&stream)?;
        let (op, _or) = out.device_ptr_mut(&stream);
        let (dx, dw, db) = (op, op + 4 * (m * k) as u64, op + 4 * (m * k + k * n) as u64);
        let ty = types(dtype)?;
        with_lt(&stream, |lt| {
            product(
                lt,
                ty,
                lt_layout::linear_dx(mkn),
                [wp, dyp, dx],
                Epilogue::Nothing,
            )?;
            let p = lt_layout::linear_dw(mkn);
            if product(lt, ty, p, [dyp, xp, dw], Epilogue::BiasGradA(db))? {
                return Ok(true);
            }
            product(lt, ty, p, [dyp, xp, dw], Epilogue::Nothing)?;
            Ok(false)
        })?
    };
    if !fused {
        note_unfused(m, k, n);
        let rows = Layout::contiguous_with_offset((m, n), dy.l.start_offset());
        let sums = dy.s.reduce_op(ReduceOp::Sum, &rows, &[0])?;
        let sums = sums.as_cuda_slice::<f32>()?;
        let mut db = out.slice_mut(m * k + k * n..);
        stream
            .memcpy_dtod(sums, &mut db)
            .map_err(candle_core::Error::wrap)?;
    }
    Ok(CudaStorage::wrap_cuda_slice(out, dev.clone()))
}

/// Says once on stderr that the bias gradient is summed apart from its product.
fn note_unfused(m: usize, k: usize, n: usize) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "{OP}: cuBLASLt has no bias-gradient epilogue for dW of {m} rows of {k} → {n}; \
             summing db apart"
        )
    });
}
