//! Each fused kernel, forward and backward, against a straightforward composition of candle's
//! differentiable ops on odd shapes (rows not a multiple of `ROWS` or of a SIMD width, a head
//! size of 5, sequences of length 1). The end-to-end PyTorch parity tests hold the whole model.

use candle_core::{Device, Var};

use super::head::HEAD_CHUNK;
use super::*;

/// Deterministic values in [-1, 1) from a small LCG.
fn values(shape: &[usize], seed: u64) -> Tensor {
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
fn run(f: &dyn Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) -> (Tensor, Vec<Tensor>) {
    let vars: Vec<Var> = inputs
        .iter()
        .map(|t| Var::from_tensor(t).unwrap())
        .collect();
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let y = f(&ts).unwrap();
    let r = values(y.dims(), 99);
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
