//! The CUDA AdamW's arithmetic and indexing checked on the host: build.rs compiles
//! `src/train/adamw.cu` for the host, and these tests run its launches block by block against
//! the CPU AdamW. What only a GPU shows (threads racing, speed) waits for `lab kernel-check`.

use std::sync::Mutex;

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::multi_tensor::{CHUNK, Entry, Scalars, TENSORS, THREADS, Table, tables, total_blocks};
use super::{InPlace, Update};

unsafe extern "C" {
    fn lab_mt_table_size() -> std::ffi::c_ulong;
    fn lab_mt_constants(tensors: *mut i32, chunk: *mut i32, threads: *mut i32);
    fn lab_sumsq_host(t: *const Table, partials: *mut f64, base: i32);
    fn lab_norm_finish_host(
        partials: *const f64,
        n: i32,
        max_norm: f64,
        norm: *mut f64,
        clip: *mut f32,
    );
    fn lab_adamw_host(t: *const Table, clip: *const f32, s: Scalars);
}

/// One tensor's values: parameter, moments (v ≥ 0) and gradient.
#[derive(Clone, PartialEq, Debug)]
struct Slot {
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    decay: f32,
}

fn slots(lens: &[usize], seed: u64) -> Vec<Slot> {
    let mut r = ChaCha8Rng::seed_from_u64(seed);
    let mut draw = |n: usize, lo: f32, hi: f32| (0..n).map(|_| r.random_range(lo..hi)).collect();
    lens.iter()
        .enumerate()
        .map(|(i, &n)| Slot {
            p: draw(n, -1.0, 1.0),
            m: draw(n, -0.1, 0.1),
            v: draw(n, 0.0, 0.01),
            g: draw(n, -0.5, 0.5),
            decay: if i % 2 == 0 { 0.1 } else { 0.0 },
        })
        .collect()
}

fn update(clip: f32) -> Update {
    let (lr, b1, b2, t) = (3e-3f64, 0.9f64, 0.95f64, 7);
    Update {
        lr: lr as f32,
        decay: 0.0,
        beta1: b1 as f32,
        beta2: b2 as f32,
        eps: 1e-8,
        step_size: (lr / (1.0 - b1.powi(t))) as f32,
        bc2_sqrt: (1.0 - b2.powi(t)).sqrt() as f32,
        clip,
    }
}

/// The host runs of the three launches over `s`, in place; returns the norm and clip factor.
fn host_step(s: &mut [Slot], max_norm: f64, u: Update) -> (f64, f32) {
    let entries: Vec<Entry> = s
        .iter_mut()
        .map(|x| Entry {
            p: x.p.as_mut_ptr(),
            m: x.m.as_mut_ptr(),
            v: x.v.as_mut_ptr(),
            g: x.g.as_ptr(),
            len: x.p.len(),
            decay: x.decay,
        })
        .collect();
    let n = total_blocks(s.iter().map(|x| x.p.len()));
    let mut partials = vec![f64::NAN; n];
    let (mut norm, mut clip) = (f64::NAN, f32::NAN);
    let launches = tables(&entries);
    // SAFETY: every table's pointers address the slots' vectors, of the lengths it records,
    // and the partial sums hold one value per block of all the launches.
    unsafe {
        for (t, base) in &launches {
            lab_sumsq_host(t, partials.as_mut_ptr(), *base as i32);
        }
        lab_norm_finish_host(partials.as_ptr(), n as i32, max_norm, &mut norm, &mut clip);
        for (t, _) in &launches {
            lab_adamw_host(t, &clip, u.into());
        }
    }
    (norm, clip)
}

/// The CPU AdamW's in-place update of each slot at clip factor `clip`.
fn cpu_step(s: &mut [Slot], u: Update) {
    for x in s {
        let p = candle_core::Var::new(x.p.as_slice(), &Device::Cpu).unwrap();
        let g = Tensor::new(x.g.as_slice(), &Device::Cpu).unwrap();
        let moments = Mutex::new((x.m.clone(), x.v.clone()));
        let u = Update {
            decay: x.decay,
            ..u
        };
        p.as_tensor()
            .inplace_op2(
                &g,
                &InPlace {
                    u,
                    moments: &moments,
                    at: 0,
                },
            )
            .unwrap();
        x.p = p.as_tensor().to_vec1().unwrap();
        (x.m, x.v) = moments.into_inner().unwrap();
    }
}

#[test]
fn the_table_and_its_constants_are_the_kernels_own() {
    // SAFETY: a plain function of no arguments.
    let c = unsafe { lab_mt_table_size() } as usize;
    assert_eq!(c, std::mem::size_of::<Table>());
    assert!(c + std::mem::size_of::<Scalars>() + 16 <= 4096, "{c} bytes");
    let (mut t, mut k, mut th) = (0, 0, 0);
    // SAFETY: three i32 out-parameters.
    unsafe { lab_mt_constants(&mut t, &mut k, &mut th) };
    assert_eq!(
        (t as usize, k as usize, th as u32),
        (TENSORS, CHUNK, THREADS)
    );
}

/// Tensors of sizes on both sides of a block's 65,536 elements, and more of them than one
/// launch takes (so that the tables split and the partial sums follow each other): the norm is
/// the f64 norm of all gradients, the clip factor the CPU's rule, and the update the CPU
/// AdamW's bit for bit, decay on every other tensor.
#[test]
fn the_launches_match_the_cpu_adamw_bit_for_bit() {
    let mut lens = vec![1, 3, 65_535, 65_536, 65_537, 200_003, 7];
    lens.extend((0..70).map(|i| 1 + i * 37));
    for (max_norm, clipped) in [(1.0, true), (1e9, false)] {
        let mut gpu = slots(&lens, 5);
        let mut cpu = gpu.clone();
        let (norm, clip) = host_step(&mut gpu, max_norm, update(f32::NAN));
        let want: f64 = cpu
            .iter()
            .flat_map(|x| &x.g)
            .map(|&g| g as f64 * g as f64)
            .sum::<f64>()
            .sqrt();
        assert!((norm - want).abs() <= 1e-12 * want, "{norm} vs {want}");
        assert_eq!(clip, ((max_norm / (norm + 1e-6)).min(1.0)) as f32);
        assert_eq!(clip < 1.0, clipped, "clip {clip} at norm {norm}");
        cpu_step(&mut cpu, update(clip));
        let bits = |x: &Slot| {
            let all = [&x.p, &x.m, &x.v].into_iter().flatten();
            all.map(|f| f.to_bits()).collect::<Vec<_>>()
        };
        for (i, (a, b)) in gpu.iter().zip(&cpu).enumerate() {
            assert!(
                bits(a) == bits(b),
                "tensor {i} of {} elements differs",
                lens[i]
            );
        }
    }
}
