//! Each fused kernel, forward and backward, against a straightforward composition of candle's
//! differentiable ops on odd shapes (rows not a multiple of `ROWS` or of a SIMD width, a head
//! size of 5, sequences of length 1). The end-to-end PyTorch parity tests hold the whole model.

use candle_core::{Device, Var};

use super::head::HEAD_CHUNK;
use super::*;

/// Deterministic values in [-1, 1) from a small LCG.
pub(super) fn values(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// The output of `f` on `inputs` and the gradients of Σ output·r (r fixed and random)
/// with respect to each input.
pub(super) fn run(
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
) -> (Tensor, Vec<Tensor>) {
    run_seeded(f, inputs, &|y| values(y.dims(), 99))
}

/// The same with r = seed(output).
fn run_seeded(
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    seed: &dyn Fn(&Tensor) -> Tensor,
) -> (Tensor, Vec<Tensor>) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let y = f(&ts).unwrap();
    let r = seed(&y);
    let g = (&y * &r).unwrap().sum_all().unwrap().backward().unwrap();
    let grads = vars.iter().map(|v| g.get(v).unwrap().clone()).collect();
    (y, grads)
}

fn assert_close(a: &Tensor, b: &Tensor, tol: f32, what: &str) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    let (a, b) = (
        a.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        b.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: fused {x} vs reference {y}"
        );
    }
}

fn compare(
    fused: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    reference: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    tol: f32,
    what: &str,
) {
    let (y1, g1) = run(fused, inputs);
    let (y2, g2) = run(reference, inputs);
    assert_close(&y1, &y2, tol, &format!("{what} forward"));
    for (i, (a, b)) in g1.iter().zip(&g2).enumerate() {
        assert_close(a, b, tol, &format!("{what} gradient of input {i}"));
    }
}

#[test]
fn layer_norm_matches_its_definition() {
    let (n, c) = (ROWS + 7, 13);
    let inputs = [values(&[n, c], 1), values(&[c], 2), values(&[c], 3)];
    compare(
        &|t| layer_norm(&t[0], &t[1], &t[2]),
        &|t| reference::layer_norm(&t[0], &t[1], &t[2]),
        &inputs,
        1e-5,
        "layer norm",
    );
}

#[test]
fn gelu_matches_the_tanh_approximation() {
    let x = (values(&[3, 1000], 4) * 6.0).unwrap();
    compare(
        &|t| gelu(&t[0]),
        &|t| reference::gelu(&t[0]),
        &[x],
        1e-5,
        "gelu",
    );
}

#[test]
fn linear_matches_matmul_plus_bias() {
    let inputs = [
        values(&[ROWS + 3, 11], 5),
        values(&[11, 17], 6),
        values(&[17], 7),
    ];
    compare(
        &|t| linear(&t[0], &t[1], &t[2]),
        &|t| reference::linear(&t[0], &t[1], &t[2]),
        &inputs,
        1e-5,
        "linear",
    );
}

#[test]
fn causal_attention_matches_per_sequence_softmax_attention() {
    let (h, hd) = (3, 5);
    let e = h * hd;
    let lens = [1, 7, 4, 1, 9];
    let n: usize = lens.iter().sum();
    compare(
        &|t| causal_attention(&t[0], &lens, h),
        &|t| reference::causal_attention(&t[0], &lens, h),
        &[values(&[n, 3 * e], 8)],
        1e-5,
        "causal attention",
    );
}

/// The forward's saved heads go to the first backward; a second backward through the same
/// graph gathers them again (and recomputes their probabilities) and gives the same bits.
#[test]
fn a_second_backward_through_attention_gathers_the_heads_again() {
    let lens = [3, 9, 1];
    second_backward_matches_the_first(&[13, 3 * 8], &|x| causal_attention(x, &lens, 2));
}

#[test]
fn a_second_backward_through_gelu_computes_the_tanh_again() {
    second_backward_matches_the_first(&[7, 12], &|x| gelu(x));
}

/// The saved state of a fused op's forward is taken by its first backward: a second
/// backward through the same graph must rebuild it and give the same gradient.
fn second_backward_matches_the_first(shape: &[usize], op: &dyn Fn(&Tensor) -> Result<Tensor>) {
    let x = Var::from_tensor(&values(shape, 11)).unwrap();
    let y = op(x.as_tensor()).unwrap();
    let loss = (&y * &values(y.dims(), 12)).unwrap().sum_all().unwrap();
    let grad = |g: candle_core::backprop::GradStore| {
        g.get(&x)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    };
    let first = grad(loss.backward().unwrap());
    let second = grad(loss.backward().unwrap());
    assert!(first.iter().any(|g| *g != 0.0));
    assert_eq!(first, second);
}

#[test]
fn head_cross_entropy_matches_log_softmax_of_the_logits() {
    let (n, e, v) = (HEAD_CHUNK + 5, 9, 37);
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 7 % v as u32).collect();
    let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
    compare(
        &|t| head_cross_entropy(&t[0], &t[1], &targets),
        &|t| reference::head_cross_entropy(&t[0], &t[1], &targets),
        &[values(&[n, e], 9), values(&[v, e], 10)],
        1e-5,
        "head cross-entropy",
    );
}

#[test]
fn head_loss_keeping_no_logits_matches_log_softmax_of_the_logits() {
    // Chunks of 7 rows over 23 (the last one short), and the whole batch as one chunk; a
    // vocabulary wider than a cross-entropy block's threads.
    let (n, e, v) = (23, 9, 300);
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 7 % v as u32).collect();
    let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
    for chunk in [7, HEAD_CHUNK] {
        compare(
            &|t| head::head_loss_chunked(&t[0], &t[1], &targets, DType::F32, chunk),
            &|t| reference::head_cross_entropy(&t[0], &t[1], &targets),
            &[values(&[n, e], 9), values(&[v, e], 10)],
            1e-5,
            &format!("head loss in chunks of {chunk} rows"),
        );
    }
}

#[test]
fn the_head_loss_value_is_the_head_loss_without_its_gradients() {
    // The validation loss: the same chunks, the same value, nothing to differentiate.
    let (n, e, v) = (23, 9, 300);
    let targets: Vec<u32> = (0..n as u32).map(|i| i * 7 % v as u32).collect();
    let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
    let (x, w) = (values(&[n, e], 9), values(&[v, e], 10));
    let want = reference::head_cross_entropy(&x, &w, &targets).unwrap();
    for chunk in [7, HEAD_CHUNK] {
        let got = head::head_loss_value_chunked(&x, &w, &targets, DType::F32, chunk).unwrap();
        assert_close(
            &got,
            &want,
            1e-5,
            &format!("head loss value in chunks of {chunk}"),
        );
    }
    let err = head_loss_value(&x, &w, &targets.narrow(0, 0, 2).unwrap(), DType::F32);
    assert!(err.unwrap_err().to_string().contains("against 2 targets"));
}

#[test]
fn head_loss_refuses_targets_that_are_not_one_a_row() {
    let targets = Tensor::from_vec(vec![0u32, 1], 2, &Device::Cpu).unwrap();
    let err = head_loss(
        &values(&[3, 4], 1),
        &values(&[5, 4], 2),
        &targets,
        DType::F32,
    )
    .unwrap_err();
    assert!(err.to_string().contains("against 2 targets"), "{err}");
}

#[test]
fn row_cross_entropy_matches_log_softmax_of_the_logits() {
    // The kernel that CUDA runs (its host build): rows narrower than a block's threads and
    // wider than several blocks' worth, targets at both ends of a row.
    for (n, e, v) in [(7, 5, 37), (3, 9, 1000)] {
        let targets: Vec<u32> = (0..n as u32).map(|i| i * 7 % v as u32).collect();
        let targets = Tensor::from_vec(targets, n, &Device::Cpu).unwrap();
        compare(
            &|t| cross_entropy(&t[0].matmul(&t[1].t()?)?, &targets)?.mean_all(),
            &|t| reference::head_cross_entropy(&t[0], &t[1], &targets),
            &[values(&[n, e], 9), values(&[v, e], 10)],
            1e-5,
            &format!("cross-entropy of {v} logits"),
        );
    }
}

#[test]
fn row_cross_entropy_refuses_a_target_past_the_logits() {
    let targets = Tensor::from_vec(vec![0u32, 4], 2, &Device::Cpu).unwrap();
    let err = cross_entropy(&values(&[2, 4], 1), &targets).unwrap_err();
    assert!(
        err.to_string()
            .contains("target 4 is not below the 4 logits"),
        "{err}"
    );
}

/// Run r's slice of a pack's rows (`rows` of them, `width` wide) from a packed tensor.
fn rows_of(t: &Tensor, runs: &Runs, r: usize) -> Tensor {
    let (at, n) = runs.spans().nth(r).unwrap();
    t.narrow(0, at, n).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v.iter().map(|x| x.to_bits()).collect()
}

/// A pack of three runs (3, 70 and 130 rows: inside one row block, across one, across two)
/// through LayerNorm, the linear layer and the head: each run's output and every gradient,
/// its inputs' and its weights', are the run's alone, to the bit.
#[test]
fn a_pack_computes_each_run_as_it_would_alone() {
    let runs = Runs::new(vec![3, ROWS + 6, 2 * ROWS + 2]);
    let (n, c, out, v) = (runs.rows(), 13, 11, 17);
    type Packed<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;
    type Alone<'a> = &'a dyn Fn(&[Tensor], usize) -> Result<Tensor>;
    let targets: Vec<u32> = (0..n as u32).map(|i| (i * 7) % v as u32).collect();
    let targets = Tensor::new(targets.as_slice(), &Device::Cpu).unwrap();
    let cases: [(&str, Vec<Tensor>, Packed, Alone); 3] = [
        (
            "layer norm",
            vec![values(&[n, c], 1), values(&[3, c], 2), values(&[3, c], 3)],
            &|t| layer_norm_runs(&t[0], &t[1], &t[2], &runs),
            &|t, _| layer_norm(&t[0], &t[1], &t[2]),
        ),
        (
            "linear",
            vec![
                values(&[n, c], 4),
                values(&[3, c, out], 5),
                values(&[3, out], 6),
            ],
            &|t| linear_runs(&t[0], &t[1], &t[2], &runs),
            &|t, _| linear(&t[0], &t[1], &t[2]),
        ),
        (
            "head",
            vec![values(&[n, c], 7), values(&[3, v, c], 8)],
            &|t| head_cross_entropy_runs(&t[0], &t[1], &targets, &runs),
            &|t, r| head_cross_entropy(&t[0], &t[1], &rows_of(&targets, &runs, r)),
        ),
    ];
    for (what, inputs, packed, alone) in cases {
        let (y, g) = run(packed, &inputs);
        // Each run's share of the packed output, and of the backward's seed.
        let share = |t: &Tensor, r: usize| {
            if what == "head" {
                t.get(r).unwrap()
            } else {
                rows_of(t, &runs, r)
            }
        };
        let seed = values(y.dims(), 99);
        for r in 0..runs.len() {
            // Run r alone: its rows of x, and the r-th of each weight.
            let mine: Vec<Tensor> = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| match i {
                    0 => rows_of(t, &runs, r),
                    _ => t.get(r).unwrap(),
                })
                .collect();
            let (ya, ga) = run_seeded(&|t| alone(t, r), &mine, &|_| share(&seed, r));
            assert_eq!(bits(&share(&y, r)), bits(&ya), "{what}: run {r}'s output");
            for (i, ga) in ga.iter().enumerate() {
                let gr = match i {
                    0 => rows_of(&g[0], &runs, r),
                    _ => g[i].get(r).unwrap(),
                };
                assert_eq!(
                    bits(&gr),
                    bits(ga),
                    "{what}: run {r}'s gradient of input {i}"
                );
            }
        }
    }
}

#[test]
fn the_embedding_is_candles_embeddings_added_to_the_bit_each_way() {
    // Repeated ids and positions (their gradients sum over rows), and ids past the positions'
    // table size.
    let (wte, wpe) = (values(&[11, 6], 1), values(&[5, 6], 2));
    let (ids, pos) = ([3u32, 7, 3, 10, 0, 3, 7], [0u32, 1, 2, 0, 1, 2, 4]);
    let tok = Tensor::new(&[ids.as_slice(), pos.as_slice()].concat()[..], &Device::Cpu).unwrap();
    let (ids, pos) = (
        Tensor::new(&ids[..], &Device::Cpu).unwrap(),
        Tensor::new(&pos[..], &Device::Cpu).unwrap(),
    );
    let dx = values(&[7, 6], 3);
    let grads = |f: &dyn Fn(&Tensor, &Tensor) -> Tensor| {
        let (a, b) = (
            Var::from_tensor(&wte).unwrap(),
            Var::from_tensor(&wpe).unwrap(),
        );
        let x = f(a.as_tensor(), b.as_tensor());
        let g = (&x * &dx).unwrap().sum_all().unwrap().backward().unwrap();
        let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let (ga, gb) = (g.get(a.as_tensor()).unwrap(), g.get(b.as_tensor()).unwrap());
        (flat(&x), flat(ga), flat(gb))
    };
    let fused = grads(&|a, b| embedding(a, b, &tok).unwrap());
    let composed =
        grads(&|a, b| (a.embedding(&ids).unwrap() + b.embedding(&pos).unwrap()).unwrap());
    assert_eq!(fused, composed);
}

#[test]
fn the_embedding_refuses_an_id_past_its_table() {
    let tok = Tensor::new(&[11u32, 0], &Device::Cpu).unwrap();
    let err = embedding(&values(&[11, 6], 1), &values(&[5, 6], 2), &tok).unwrap_err();
    assert!(err.to_string().contains("id 11 of a table of 11"), "{err}");
}
