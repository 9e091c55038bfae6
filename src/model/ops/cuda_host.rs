//! The CUDA LayerNorm's, GELU's and attention's arithmetic and indexing checked on the host:
//! build.rs compiles `layer_norm.cu`, `gelu.cu` and `attention.cu` for the host, and these tests run their launches
//! block by block and thread by thread against the CPU kernels, on shapes that leave a block's
//! threads or rows short (`cross_entropy.cu`'s host build is its op's CPU version, which the ops
//! tests hold against log-softmax). What only a GPU shows (threads racing, speed) is `lab kernel-check`'s.

use candle_core::Device;

use super::cuda_shape::{
    ATT_MAX_D, ATT_MAX_T, ATT_THREADS, CE_THREADS, EMB_THREADS, GELU_THREADS, LN_ROWS, LN_THREADS,
};
use super::gelu::{lab_gelu_bwd_host, lab_gelu_fwd_host};
use super::tests::{run, values};
use super::*;
use crate::model::check::{TOL_F32, rel_err};

unsafe extern "C" {
    fn lab_ln_constants(threads: *mut i32, rows: *mut i32);
    fn lab_gelu_threads() -> i32;
    fn lab_ce_threads() -> i32;
    fn lab_emb_threads() -> i32;
    fn lab_ln_fwd_host(x: *const f32, w: *const f32, b: *const f32, y: *mut f32, rows: i32, c: i32);
    fn lab_ln_bwd_host(
        x: *const f32,
        w: *const f32,
        dy: *const f32,
        dx: *mut f32,
        partials: *mut f32,
        rows: i32,
        c: i32,
    );
    fn lab_ln_bwd_sum_host(partials: *const f32, blocks: i32, c2: i32, out: *mut f32);
    fn lab_att_constants(threads: *mut i32, max_d: *mut i32, max_t: *mut i32);
    fn lab_att_fwd_host(
        qkv: *const f32,
        y: *mut f32,
        starts: *const i32,
        lens: *const i32,
        n_seq: i32,
        n_head: i32,
        e: i32,
        hd: i32,
        scale: f32,
    );
    fn lab_att_bwd_host(
        qkv: *const f32,
        dy: *const f32,
        dqkv: *mut f32,
        starts: *const i32,
        lens: *const i32,
        n_seq: i32,
        n_head: i32,
        e: i32,
        hd: i32,
        scale: f32,
    );
}

fn host(t: &Tensor) -> Vec<f32> {
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn tensor(v: Vec<f32>, like: &Tensor) -> Tensor {
    Tensor::from_vec(v, like.shape(), &Device::Cpu).unwrap()
}

#[test]
fn the_launch_shapes_match_the_kernels() {
    let (mut threads, mut rows) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { lab_ln_constants(&mut threads, &mut rows) };
    assert_eq!((threads as u32, rows as usize), (LN_THREADS, LN_ROWS));
    assert_eq!(unsafe { lab_gelu_threads() } as u32, GELU_THREADS);
    assert_eq!(unsafe { lab_ce_threads() } as u32, CE_THREADS);
    assert_eq!(unsafe { lab_emb_threads() } as u32, EMB_THREADS);
    let (mut d, mut t) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { lab_att_constants(&mut threads, &mut d, &mut t) };
    assert_eq!(
        (threads as u32, d as usize, t as usize),
        (ATT_THREADS, ATT_MAX_D, ATT_MAX_T)
    );
}

/// The host run of the CUDA LayerNorm, forward and backward (dx, then dw and db packed as the
/// CPU kernel packs them), on `rows` rows of `c`.
fn ln_host(x: &Tensor, w: &Tensor, b: &Tensor, dy: &Tensor) -> (Vec<f32>, Vec<f32>) {
    let c = w.elem_count();
    let rows = x.elem_count() / c;
    let (x, w, b, dy) = (host(x), host(w), host(b), host(dy));
    let mut y = vec![f32::NAN; rows * c];
    let blocks = rows.div_ceil(LN_ROWS);
    let mut grads = vec![f32::NAN; rows * c + 2 * c];
    let mut partials = vec![f32::NAN; blocks * 2 * c];
    // SAFETY: every pointer addresses a vector of the length the launch reads or writes: rows
    // of c, c weights, blocks of 2c partial sums, and 2c sums after dx.
    unsafe {
        let (r, c) = (rows as i32, c as i32);
        lab_ln_fwd_host(x.as_ptr(), w.as_ptr(), b.as_ptr(), y.as_mut_ptr(), r, c);
        let (dx, dwdb) = grads.split_at_mut(rows * c as usize);
        lab_ln_bwd_host(
            x.as_ptr(),
            w.as_ptr(),
            dy.as_ptr(),
            dx.as_mut_ptr(),
            partials.as_mut_ptr(),
            r,
            c,
        );
        lab_ln_bwd_sum_host(partials.as_ptr(), blocks as i32, 2 * c, dwdb.as_mut_ptr());
    }
    (y, grads)
}

#[test]
fn the_cuda_layer_norm_computes_the_cpu_kernels_values() {
    // Widths below, at and above a block's threads, one not a multiple of anything; rows that
    // leave the last block of rows short, and a single row.
    for (rows, c) in [(70, 24), (1, 128), (33, 288), (65, 1000)] {
        let x = (values(&[rows, c], 1) * 2.0).unwrap();
        let (w, b) = (values(&[c], 2), values(&[c], 3));
        let (y, grads) = run(
            &|t| layer_norm(&t[0], &t[1], &t[2]),
            &[x.clone(), w.clone(), b.clone()],
        );
        // `run` takes the gradients of Σ y·r with r = values(y's shape, 99): dy is r.
        let dy = values(&[rows, c], 99);
        let (hy, hgrads) = ln_host(&x, &w, &b, &dy);
        let err = rel_err(&tensor(hy, &y), &y).unwrap();
        assert!(err <= TOL_F32, "{rows}x{c} forward: {err:e}");
        let mut at = 0;
        for (name, g) in ["dx", "dw", "db"].iter().zip(&grads) {
            let n = g.elem_count();
            let err = rel_err(&tensor(hgrads[at..at + n].to_vec(), g), g).unwrap();
            assert!(err <= TOL_F32, "{rows}x{c} {name}: {err:e}");
            at += n;
        }
        assert_eq!(at, hgrads.len(), "{rows}x{c}: every value written once");
    }
}

#[test]
fn the_cuda_gelu_computes_the_cpu_kernels_values() {
    let n = 3 * GELU_THREADS as usize + 7;
    let x = (values(&[n], 4) * 4.0).unwrap();
    let (y, grads) = run(&|t| gelu(&t[0]), std::slice::from_ref(&x));
    let dy = values(&[n], 99);
    let (xs, dys) = (host(&x), host(&dy));
    let (mut hy, mut hdx) = (vec![f32::NAN; n], vec![f32::NAN; n]);
    // SAFETY: every vector holds n values.
    unsafe {
        lab_gelu_fwd_host(xs.as_ptr(), hy.as_mut_ptr(), n as i64);
        lab_gelu_bwd_host(xs.as_ptr(), dys.as_ptr(), hdx.as_mut_ptr(), n as i64);
    }
    let err = rel_err(&tensor(hy, &y), &y).unwrap();
    assert!(err <= TOL_F32, "forward: {err:e}");
    let err = rel_err(&tensor(hdx, &grads[0]), &grads[0]).unwrap();
    assert!(err <= TOL_F32, "dx: {err:e}");
}

#[test]
fn the_cuda_attention_computes_the_cpu_kernels_values() {
    // Sequences of 1 token, of more tokens than a block has threads, and between; odd head
    // sizes (5) and the studies' (32).
    for (lens, n_head, hd) in [
        (vec![1usize, 7, 70, 12], 3usize, 5usize),
        (vec![26, 12, 19], 4, 32),
    ] {
        let (n, e) = (lens.iter().sum::<usize>(), n_head * hd);
        let qkv = values(&[n, 3 * e], 5);
        let (y, grads) = run(
            &|t| causal_attention(&t[0], &lens, n_head),
            std::slice::from_ref(&qkv),
        );
        let dy = values(&[n, e], 99);
        let starts: Vec<i32> = lens
            .iter()
            .scan(0, |at, &l| {
                let s = *at;
                *at += l as i32;
                Some(s)
            })
            .collect();
        let lens32: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        let (q, g) = (host(&qkv), host(&dy));
        let (mut hy, mut hdq) = (vec![f32::NAN; n * e], vec![f32::NAN; n * 3 * e]);
        let scale = 1.0 / (hd as f32).sqrt();
        let k = lens.len() as i32;
        // SAFETY: qkv and dqkv hold n rows of 3e, y and dy n rows of e, and the sequences
        // (starts and lengths) cover the n rows.
        unsafe {
            let (h, e, d) = (n_head as i32, e as i32, hd as i32);
            let (s, l) = (starts.as_ptr(), lens32.as_ptr());
            lab_att_fwd_host(q.as_ptr(), hy.as_mut_ptr(), s, l, k, h, e, d, scale);
            lab_att_bwd_host(
                q.as_ptr(),
                g.as_ptr(),
                hdq.as_mut_ptr(),
                s,
                l,
                k,
                h,
                e,
                d,
                scale,
            );
        }
        let err = rel_err(&tensor(hy, &y), &y).unwrap();
        assert!(err <= TOL_F32, "{lens:?} H {n_head}: forward {err:e}");
        let err = rel_err(&tensor(hdq, &grads[0]), &grads[0]).unwrap();
        assert!(err <= TOL_F32, "{lens:?} H {n_head}: dqkv {err:e}");
    }
}
