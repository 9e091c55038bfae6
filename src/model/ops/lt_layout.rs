//! How the lab's row-major products become cuBLASLt's column-major ones: which buffer is
//! operand A and which B, stored how, transposed or not, and D's shape (`cublaslt.rs` runs them).
//! Pure arithmetic on shapes, so the tests check every mapping on the CPU against a gemm that
//! reads operands as cuBLASLt does.

/// An operand as cuBLASLt reads it: a `rows × cols` column-major matrix with leading
/// dimension `ld`, used as stored or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub rows: usize,
    pub cols: usize,
    pub ld: usize,
    pub trans: bool,
}

/// A product D = op(A)·op(B), D `d.0 × d.1` column-major with leading dimension d.0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Product {
    pub a: Stored,
    pub b: Stored,
    pub d: (usize, usize),
}

/// A row-major (r × c) matrix as the column-major xᵀ (c × r) it is in memory: as stored when
/// x is contiguous, and its storage transposed when x is the transpose of a contiguous (c × r)
/// matrix.
pub fn transposed(r: usize, c: usize, contiguous: bool) -> Stored {
    if contiguous {
        Stored {
            rows: c,
            cols: r,
            ld: c,
            trans: false,
        }
    } else {
        Stored {
            rows: r,
            cols: c,
            ld: r,
            trans: true,
        }
    }
}

/// Row-major c (m × n) = a (m × k) · b (k × n) is column-major cᵀ = bᵀ·aᵀ: b's storage is A,
/// a's is B (each as `transposed` says).
pub fn matmul((m, k, n): (usize, usize, usize), a_contiguous: bool, b_contiguous: bool) -> Product {
    Product {
        a: transposed(k, n, b_contiguous),
        b: transposed(m, k, a_contiguous),
        d: (n, m),
    }
}

/// y (m × n) = x (m × k) · W (k × n) + b: yᵀ = Wᵀ·xᵀ, the bias one value a row of yᵀ (D).
pub fn linear(mkn: (usize, usize, usize)) -> Product {
    matmul(mkn, true, true)
}

/// dx (m × k) = dy (m × n) · Wᵀ: dxᵀ = W·dyᵀ, W read transposed from its storage.
pub fn linear_dx((m, k, n): (usize, usize, usize)) -> Product {
    matmul((m, n, k), true, false)
}

/// dW (k × n) = xᵀ · dy: dWᵀ = dyᵀ·x with A = dyᵀ (n × m, as stored), so the sums of A's rows
/// over the inner dimension (the batch's m rows: cuBLASLt's BGRADA epilogue) are db.
pub fn linear_dw((m, k, n): (usize, usize, usize)) -> Product {
    matmul((k, m, n), false, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element (i, j) of op(X) for X at `x` as cuBLASLt reads it.
    fn at(x: &[f32], s: Stored, i: usize, j: usize) -> f32 {
        let (r, c) = if s.trans { (j, i) } else { (i, j) };
        x[r + c * s.ld]
    }

    /// D = op(A)·op(B) as cuBLASLt computes it, and the sums of op(A)'s rows (BGRADA), after
    /// checking that the operands' shapes agree and fit their buffers.
    fn lt(a: &[f32], b: &[f32], p: Product) -> (Vec<f32>, Vec<f32>) {
        let dims = |s: Stored| {
            if s.trans {
                (s.cols, s.rows)
            } else {
                (s.rows, s.cols)
            }
        };
        let ((ar, ak), (bk, bc)) = (dims(p.a), dims(p.b));
        assert_eq!((ar, bc), p.d, "D's shape");
        assert_eq!(ak, bk, "inner dimensions");
        for (x, s) in [(a, p.a), (b, p.b)] {
            assert!(
                s.ld >= s.rows && x.len() >= s.ld * (s.cols - 1) + s.rows,
                "{s:?}"
            );
        }
        let mut d = vec![0f32; ar * bc];
        for j in 0..bc {
            for i in 0..ar {
                d[i + j * ar] = (0..ak).map(|q| at(a, p.a, i, q) * at(b, p.b, q, j)).sum();
            }
        }
        let grad = (0..ar)
            .map(|i| (0..ak).map(|q| at(a, p.a, i, q)).sum())
            .collect();
        (d, grad)
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 97) as f32 / 13.0 - 3.0)
            .collect()
    }

    /// Row-major (r × c) from a product's column-major D (d.0 = c rows, d.1 = r columns).
    fn close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{what}[{i}]: {g} vs {w}"
            );
        }
    }

    /// Row-major a (m × k) · b (k × n).
    fn mm(a: &[f32], b: &[f32], (m, k, n): (usize, usize, usize)) -> Vec<f32> {
        let mut c = vec![0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|q| a[i * k + q] * b[q * n + j]).sum();
            }
        }
        c
    }

    /// The transpose of row-major x (r × c).
    fn t(x: &[f32], r: usize, c: usize) -> Vec<f32> {
        (0..c * r).map(|i| x[(i % r) * c + i / r]).collect()
    }

    const SHAPES: [(usize, usize, usize); 3] = [(5, 3, 7), (1, 4, 2), (9, 8, 1)];

    #[test]
    fn the_linear_layer_forward_and_backward_map_to_the_cpu_products() {
        for (m, k, n) in SHAPES {
            let (x, w, dy) = (values(m * k, 1), values(k * n, 2), values(m * n, 3));
            // Forward: W is A, x is B; D is y (row-major m × n).
            let (y, _) = lt(&w, &x, linear((m, k, n)));
            close(&y, &mm(&x, &w, (m, k, n)), "y");
            // dx = dy · Wᵀ: W's storage read transposed, dy as stored.
            let (dx, _) = lt(&w, &dy, linear_dx((m, k, n)));
            close(&dx, &mm(&dy, &t(&w, k, n), (m, n, k)), "dx");
            // dW = xᵀ · dy, and db = Σ_rows dy from the epilogue's sums of A's rows.
            let (dw, db) = lt(&dy, &x, linear_dw((m, k, n)));
            close(&dw, &mm(&t(&x, m, k), &dy, (k, m, n)), "dW");
            let want: Vec<f32> = (0..n)
                .map(|j| (0..m).map(|i| dy[i * n + j]).sum())
                .collect();
            close(&db, &want, "db");
        }
    }

    #[test]
    fn products_of_transposed_views_read_the_storage_transposed() {
        for (m, k, n) in SHAPES {
            let (a, b) = (values(m * k, 4), values(k * n, 5));
            let want = mm(&a, &b, (m, k, n));
            for (ac, bc) in [(true, true), (false, true), (true, false), (false, false)] {
                // A transposed view's storage is the contiguous transpose.
                let sa = if ac { a.clone() } else { t(&a, m, k) };
                let sb = if bc { b.clone() } else { t(&b, k, n) };
                let (c, _) = lt(&sb, &sa, matmul((m, k, n), ac, bc));
                close(
                    &c,
                    &want,
                    &format!("{m}×{k}×{n}, contiguous a {ac}, b {bc}"),
                );
            }
        }
    }
}
