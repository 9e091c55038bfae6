//! Branch-free f32 exp and tanh that the compiler vectorizes, for the fused kernels' hot
//! loops (libm's calls dominated the profile), the slice reductions, and `wide`, which runs a
//! kernel's body with the CPU's 256-bit vectors. Accurate to a few ulp; tested against std.

/// Run `f` compiled for AVX2 when the CPU has it (the baseline x86-64 target has only 128-bit
/// SSE2). Rust never contracts a·b + c into an FMA, and every reduction here sums in a fixed
/// lane order, so both paths give the same bits; only the speed differs. `f` is a single-use
/// closure, which LLVM inlines into the AVX2 copy along with the `#[inline]` helpers it calls.
#[inline]
pub fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { avx2(f) };
        }
    }
    f()
}

/// e^x, for x ≤ 88.7 (inputs below −87.3 give about 1e-38 instead of a denormal).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding and subtracting it rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.7);
    let k = x * LOG2E + ROUND;
    let n = k - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Cephes expf polynomial on [−ln2/2, ln2/2].
    let mut p = 1.987_569_1e-4_f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5e-1;
    let e = p * r * r + r + 1.0;
    // 2^n from k's bits: k is 1.5·2^23 + n exactly (its ulp is 1), so its low bits count n.
    // Integer arithmetic vectorizes; `n as i32` saturates, which the compiler did lane by lane.
    let n_int = k.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    e * f32::from_bits(((n_int + 127) << 23) as u32)
}

/// tanh(x) by Eigen's rational approximation (exact 1.0 beyond ±7.9).
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let x = x.clamp(-7.905_311, 7.905_311);
    let x2 = x * x;
    let mut p = -2.760_768_5e-16_f32;
    p = p * x2 + 2.000_188e-13;
    p = p * x2 - 8.604_672e-11;
    p = p * x2 + 5.122_297e-8;
    p = p * x2 + 1.485_722_4e-5;
    p = p * x2 + 6.372_619_3e-4;
    p = p * x2 + 4.893_524_6e-3;
    let mut q = 1.198_258_4e-6_f32;
    q = q * x2 + 1.185_347_1e-4;
    q = q * x2 + 2.268_434_6e-3;
    q = q * x2 + 4.893_525e-3;
    x * p / q
}

/// Lanes of the slice reductions below: independent accumulators the compiler can keep in one
/// vector register, summed in a fixed order (so results do not depend on threads).
pub const LANES: usize = 8;

/// Σ a_i b_i.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

/// Σ (a_i − m)², summed exactly as `dot(d, d)` sums the deviations d = a − m.
#[inline(always)]
pub fn dot_sq_dev(a: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let ca = a.chunks_exact(LANES);
    let tail: f32 = ca.remainder().iter().map(|x| (x - m) * (x - m)).sum();
    for x in ca {
        for i in 0..LANES {
            let d = x[i] - m;
            acc[i] += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ a_i.
#[inline(always)]
pub fn sum(a: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let c = a.chunks_exact(LANES);
    let tail: f32 = c.remainder().iter().sum();
    for x in c {
        for i in 0..LANES {
            acc[i] += x[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// max_i a_i (−∞ for an empty slice).
#[inline(always)]
pub fn max(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let c = a.chunks_exact(LANES);
    let tail = c
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for x in c {
        for i in 0..LANES {
            acc[i] = if x[i] > acc[i] { x[i] } else { acc[i] };
        }
    }
    acc.iter().copied().fold(tail, f32::max)
}

/// The index of the first maximum (0 for an empty slice): a vectorized max, then a search.
#[inline]
pub fn argmax(a: &[f32]) -> usize {
    let m = max(a);
    a.iter().position(|&x| x == m).unwrap_or(0)
}

/// Softmax of a row in place; returns (max, Σ exp(z − max)) for the log-sum-exp.
#[inline(always)]
pub fn softmax_in_place(row: &mut [f32]) -> (f32, f32) {
    let m = max(row);
    for z in row.iter_mut() {
        *z = exp(*z - m);
    }
    let s = sum(row);
    let inv = 1.0 / s;
    for z in row.iter_mut() {
        *z *= inv;
    }
    (m, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std() {
        let mut worst = 0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 / 1000.0;
            let (a, b) = (exp(x) as f64, (x as f64).exp());
            worst = worst.max(((a - b) / b).abs());
        }
        assert!(worst < 3e-7, "max relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
    }

    /// exp with 2^n from k's bits gives the same bits as the saturating `n as i32` it replaced,
    /// on every input from −90 to 90 in steps of 0.001 (the clamp's edges included).
    #[test]
    fn exp_gives_the_bits_of_the_saturating_cast_version() {
        fn by_cast(x: f32) -> f32 {
            let x = x.clamp(-87.3, 88.7);
            let n = (x * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
            let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
            let mut p = 1.987_569_1e-4_f32;
            for c in [
                1.398_199_9e-3,
                8.333_452e-3,
                4.166_579_6e-2,
                1.666_666_5e-1,
                5e-1,
            ] {
                p = p * r + c;
            }
            (p * r * r + r + 1.0) * f32::from_bits(((n as i32 + 127) << 23) as u32)
        }
        for i in -90_000..=90_000 {
            let x = i as f32 / 1000.0;
            assert_eq!(exp(x).to_bits(), by_cast(x).to_bits(), "x = {x}");
        }
    }

    #[test]
    fn reductions() {
        let a: Vec<f32> = (0..37).map(|i| (i as f32 - 17.0) * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| i as f32 * 0.25).collect();
        let naive_dot: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive_dot).abs() < 1e-3);
        assert_eq!(sum(&b), b.iter().sum::<f32>());
        let m = 0.3;
        let d: Vec<f32> = a.iter().map(|x| x - m).collect();
        assert_eq!(dot_sq_dev(&a, m).to_bits(), dot(&d, &d).to_bits());
        assert_eq!(max(&a), 9.5);
        assert_eq!(argmax(&a), 36);
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -2.0]), 1);
        let mut row = vec![1.0f32, 2.0, 3.0];
        let (m, s) = softmax_in_place(&mut row);
        assert_eq!(m, 3.0);
        let want: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|z| (z - 3.0).exp()).collect();
        let total: f64 = want.iter().sum();
        assert!((s as f64 - total).abs() < 1e-6);
        for (r, w) in row.iter().zip(&want) {
            assert!((*r as f64 - w / total).abs() < 1e-6);
        }
    }

    #[test]
    fn tanh_matches_std() {
        let mut worst = 0f64;
        for i in -10_000..=10_000 {
            let x = i as f32 / 1000.0;
            let (a, b) = (tanh(x) as f64, (x as f64).tanh());
            worst = worst.max((a - b).abs());
        }
        assert!(worst < 1e-6, "max absolute error {worst:e}");
        assert_eq!(tanh(20.0), 1.0);
        assert_eq!(tanh(-20.0), -1.0);
    }
}
