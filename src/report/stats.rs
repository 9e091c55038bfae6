//! Statistics over seeds for the report and the findings: means with Student-t 95% intervals,
//! log-FLOPs interpolation of a run's curve, and a seeded bootstrap of which setting is best.

use rand::Rng;

use crate::rng::{Purpose, stream};

/// The 97.5% quantile of Student's t with `df` degrees of freedom, fractional ones included
/// (Welch–Satterthwaite's): the t at which the distribution function reaches 0.975, by
/// bisection on `t_cdf` to 1e-12 (NaN for df ≤ 0). SPEC §9 Revision: never 1.96 for a small
/// sample.
pub fn t975(df: f64) -> f64 {
    if df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    while t_cdf(hi, df) < 0.975 {
        hi *= 2.0;
    }
    while hi - lo > 1e-12 * hi {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < 0.975 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Student's t distribution function at t ≥ 0: 1 − I_x(df/2, 1/2) / 2 with x = df/(df + t²).
fn t_cdf(t: f64, df: f64) -> f64 {
    1.0 - 0.5 * inc_beta(df / (df + t * t), df / 2.0, 0.5)
}

/// The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's
/// method, as Numerical Recipes' `betai`).
fn inc_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(1.0 - x, b, a) / b
    }
}

/// The continued fraction of the incomplete beta function.
fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    d = 1.0 / if d.abs() < TINY { TINY } else { d };
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        for aa in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + aa * d;
            d = 1.0 / if d.abs() < TINY { TINY } else { d };
            c = 1.0 + aa / c;
            c = if c.abs() < TINY { TINY } else { c };
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: about 15 digits).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let t = x + 7.5;
    let s = G[1..]
        .iter()
        .enumerate()
        .fold(G[0], |s, (i, g)| s + g / (x + i as f64 + 1.0));
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

/// A sample mean with its 95% interval (half-width NaN for fewer than two values).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct MeanCi {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    pub n: usize,
}

impl MeanCi {
    pub fn of(v: &[f64]) -> MeanCi {
        let n = v.len();
        let mean = v.iter().sum::<f64>() / n.max(1) as f64;
        let half = if n < 2 {
            f64::NAN
        } else {
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            t975((n - 1) as f64) * (var / n as f64).sqrt()
        };
        MeanCi {
            mean,
            lo: mean - half,
            hi: mean + half,
            n,
        }
    }

    /// The interval lies wholly above zero.
    pub fn above_zero(&self) -> bool {
        self.lo > 0.0
    }

    /// The interval lies wholly below zero.
    pub fn below_zero(&self) -> bool {
        self.hi < 0.0
    }

    pub fn half(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }
}

/// The difference of two means, a − b, with its 95% Welch interval (`n` is the smaller
/// group's).
pub fn welch_diff(a: &[f64], b: &[f64]) -> MeanCi {
    welch_of(&[(a, 1.0), (b, -1.0)]).0
}

/// [`welch_diff`] with its Welch–Satterthwaite degrees of freedom.
pub fn welch(a: &[f64], b: &[f64]) -> (MeanCi, f64) {
    welch_of(&[(a, 1.0), (b, -1.0)])
}

/// Σ sign·mean over groups with a 95% interval from their summed variances of the mean, on
/// the Welch–Satterthwaite degrees of freedom: a difference, or a difference of differences.
/// The interval's t is taken at those degrees of freedom, fractional as they are; they are
/// returned beside it (NaN under two values a group).
pub fn welch_of(groups: &[(&[f64], f64)]) -> (MeanCi, f64) {
    let mean_var = |v: &[f64]| {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
        (m, var / n)
    };
    let n = groups.iter().map(|(v, _)| v.len()).min().unwrap_or(0);
    if n < 2 {
        let mean = groups
            .iter()
            .map(|(v, s)| s * v.iter().sum::<f64>() / v.len().max(1) as f64)
            .sum();
        let nan = f64::NAN;
        let m = MeanCi {
            mean,
            lo: nan,
            hi: nan,
            n,
        };
        return (m, nan);
    }
    let parts: Vec<(f64, f64, f64)> = groups
        .iter()
        .map(|(v, s)| {
            let (m, w) = mean_var(v);
            (s * m, w, v.len() as f64 - 1.0)
        })
        .collect();
    let mean: f64 = parts.iter().map(|p| p.0).sum();
    let w: f64 = parts.iter().map(|p| p.1).sum();
    let df_den: f64 = parts.iter().map(|p| p.1 * p.1 / p.2).sum();
    let df = if df_den > 0.0 { w * w / df_den } else { 1.0 };
    let half = t975(df) * w.sqrt();
    let m = MeanCi {
        mean,
        lo: mean - half,
        hi: mean + half,
        n,
    };
    (m, df)
}

/// A curve's value at `x`, linear in log x between its points (sorted by x); None outside.
pub fn at_log_x(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let (i, j) = around(points, x)?;
    let ((x0, y0), (x1, y1)) = (points[i], points[j]);
    if i == j {
        return Some(y0);
    }
    let (a, b) = (x0.ln(), x1.ln());
    let t = if b > a { (x.ln() - a) / (b - a) } else { 1.0 };
    Some(y0 + t * (y1 - y0))
}

/// The points [`at_log_x`] reads at `x`: the first window of two that holds it, else a point
/// at `x` alone (twice).
pub fn around(points: &[(f64, f64)], x: f64) -> Option<(usize, usize)> {
    points
        .windows(2)
        .position(|w| w[0].0 <= x && x <= w[1].0)
        .map(|i| (i, i + 1))
        .or_else(|| points.iter().position(|p| p.0 == x).map(|i| (i, i)))
}

/// Bootstrap over seeds: resample each setting's values with replacement `b` times and count
/// how often each setting has the highest mean (a tie shares the win). Returns the fraction per
/// setting. Seeded, so the same values give the same fractions.
pub fn bootstrap_best(groups: &[Vec<f64>], b: usize, seed: u64) -> Vec<f64> {
    let cells: Vec<Vec<Vec<f64>>> = groups.iter().map(|g| vec![g.clone()]).collect();
    bootstrap_best_of(&cells, b, seed)
}

/// [`bootstrap_best`] where a setting holds several cells (a depth's head counts), each
/// resampled alone, and the setting scores its best cell's mean.
pub fn bootstrap_best_of(settings: &[Vec<Vec<f64>>], b: usize, seed: u64) -> Vec<f64> {
    let mut rng = stream(seed, Purpose::Sampling, 0);
    let mut wins = vec![0f64; settings.len()];
    let mut means = vec![f64::NEG_INFINITY; settings.len()];
    for _ in 0..b {
        for (m, cells) in means.iter_mut().zip(settings) {
            *m = f64::NEG_INFINITY;
            for g in cells.iter().filter(|g| !g.is_empty()) {
                let mean = (0..g.len())
                    .map(|_| g[rng.random_range(0..g.len())])
                    .sum::<f64>()
                    / g.len() as f64;
                *m = m.max(mean);
            }
        }
        let top = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let tied = means.iter().filter(|&&m| m == top).count() as f64;
        for (w, &m) in wins.iter_mut().zip(&means) {
            if m == top && top > f64::NEG_INFINITY {
                *w += 1.0 / tied;
            }
        }
    }
    wins.iter().map(|&w| w / b as f64).collect()
}

/// The least-squares slope of `y` on `x`, every point weighted equally (None under two
/// distinct x).
pub fn slope(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The least-squares slope of `y` on `x` over every point (one per run), with its 95%
/// t-interval on n − 2 degrees of freedom (None under three points or two distinct x).
pub fn slope_ci(x: &[f64], y: &[f64]) -> Option<MeanCi> {
    let n = x.len();
    let b = slope(x, y).filter(|_| n >= 3)?;
    let (mx, my) = (
        x.iter().sum::<f64>() / n as f64,
        y.iter().sum::<f64>() / n as f64,
    );
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let sse: f64 = x
        .iter()
        .zip(y)
        .map(|(a, c)| (c - my - b * (a - mx)).powi(2))
        .sum();
    let half = t975((n - 2) as f64) * (sse / (n - 2) as f64 / sxx).sqrt();
    Some(MeanCi {
        mean: b,
        lo: b - half,
        hi: b + half,
        n,
    })
}

/// Spearman's rank correlation of two equal-length samples (ties get mean ranks).
pub fn spearman(x: &[f64], y: &[f64]) -> f64 {
    fn ranks(v: &[f64]) -> Vec<f64> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < idx.len() {
            let mut j = i;
            while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
                j += 1;
            }
            for k in i..=j {
                r[idx[k]] = (i + j) as f64 / 2.0;
            }
            i = j + 1;
        }
        r
    }
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_ci_matches_a_hand_computed_regression() {
        // y = 1, 3, 2, 5 at x = 0..3: slope 1.1, SSE 2.7, Sxx 5, t(2) = 4.303.
        let m = slope_ci(&[0.0, 1.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 5.0]).unwrap();
        assert!((m.mean - 1.1).abs() < 1e-12, "{m:?}");
        let half = 4.303 * (2.7f64 / 2.0 / 5.0).sqrt();
        assert!((m.hi - m.mean - half).abs() < 1e-3, "{m:?}");
        assert_eq!(m.n, 4);
        assert!(slope_ci(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]).is_none());
        assert!(slope_ci(&[1.0, 2.0], &[1.0, 2.0]).is_none());
    }

    #[test]
    fn mean_ci_matches_a_hand_computed_t_interval() {
        // mean 2, sd 1, n 3: half-width 4.303 · 1/√3 = 2.4844.
        let m = MeanCi::of(&[1.0, 2.0, 3.0]);
        assert_eq!(m.mean, 2.0);
        assert!((m.half() - 2.4844).abs() < 1e-3, "{m:?}");
        assert!(MeanCi::of(&[5.0]).lo.is_nan());
    }

    /// Student's t at 97.5%, against the published table (Abramowitz & Stegun 26.10, 4
    /// digits) at integer degrees of freedom, and the normal 1.95996 in the limit; between
    /// integers it falls between its neighbours.
    #[test]
    fn t975_matches_the_table_and_takes_fractional_degrees_of_freedom() {
        for (df, t) in [
            (1.0, 12.7062),
            (2.0, 4.3027),
            (3.0, 3.1824),
            (5.0, 2.5706),
            (10.0, 2.2281),
            (25.0, 2.0595),
            (30.0, 2.0423),
            (120.0, 1.9799),
            (1e7, 1.9600),
        ] {
            assert!((t975(df) - t).abs() < 1e-4, "df {df}: {} vs {t}", t975(df));
        }
        let mid = t975(2.5);
        assert!(t975(3.0) < mid && mid < t975(2.0), "{mid}");
        assert!(t975(0.0).is_nan());
    }

    #[test]
    fn log_interpolation_is_exact_at_points_and_none_outside() {
        let p = [(1.0, 0.0), (100.0, 2.0)];
        assert_eq!(at_log_x(&p, 1.0), Some(0.0));
        assert!((at_log_x(&p, 10.0).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(at_log_x(&p, 100.0), Some(2.0));
        assert_eq!(at_log_x(&p, 1000.0), None);
        assert_eq!(at_log_x(&[(5.0, 3.0)], 5.0), Some(3.0));
    }

    #[test]
    fn bootstrap_finds_a_clear_winner_and_splits_a_tie() {
        let clear = bootstrap_best(&[vec![1.0, 1.1, 0.9], vec![5.0, 5.1, 4.9]], 2000, 1);
        assert_eq!(clear, vec![0.0, 1.0]);
        let tie = bootstrap_best(&[vec![1.0, 2.0, 3.0], vec![1.0, 2.0, 3.0]], 4000, 1);
        assert!(tie[0] > 0.3 && tie[1] > 0.3, "{tie:?}");
        // Settings that never differ share every win.
        let flat = bootstrap_best(&[vec![0.0, 0.0], vec![0.0, 0.0], vec![0.0, 0.0]], 300, 1);
        assert!(
            flat.iter().all(|p| (p - 1.0 / 3.0).abs() < 1e-9),
            "{flat:?}"
        );
        assert_eq!(
            tie,
            bootstrap_best(&[vec![1.0, 2.0, 3.0], vec![1.0, 2.0, 3.0]], 4000, 1)
        );
    }

    #[test]
    fn spearman_of_monotone_and_reversed() {
        let x = [1.0, 2.0, 3.0, 4.0];
        assert!((spearman(&x, &[10.0, 20.0, 25.0, 100.0]) - 1.0).abs() < 1e-12);
        assert!((spearman(&x, &[4.0, 3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
    }
}
