//! Each lab kernel written as a composition of candle's differentiable ops: the definitions the
//! fused kernels are checked against (the op tests, `lab kernel-check`, the composed path).

use candle_core::{D, Device, Result, Tensor};

use super::LN_EPS;

/// y = (x − mean) / √(var + ε) · w + b over the last dimension.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = xc.sqr()?.mean_keepdim(D::Minus1)?;
    let xhat = xc.broadcast_div(&(var + LN_EPS as f64)?.sqrt()?)?;
    xhat.broadcast_mul(w)?.broadcast_add(b)
}

/// x · W + b with W in Conv1D (in, out) layout.
pub fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    x.matmul(w)?.broadcast_add(b)
}

/// GELU with the tanh approximation.
pub fn gelu(x: &Tensor) -> Result<Tensor> {
    x.gelu()
}

/// Causal softmax attention of each sequence of packed q|k|v rows (N, 3E) alone, head by head.
pub fn causal_attention(qkv: &Tensor, lens: &[usize], n_head: usize) -> Result<Tensor> {
    let e = qkv.dim(1)? / 3;
    let hd = e / n_head;
    let mut outs = Vec::new();
    let mut start = 0;
    for &l in lens {
        let rows = qkv.narrow(0, start, l)?;
        start += l;
        let mask: Vec<f32> = (0..l * l)
            .map(|ij| {
                if ij % l > ij / l {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, (l, l), &Device::Cpu)?.to_device(qkv.device())?;
        let mut heads = Vec::new();
        for i in 0..n_head {
            let q = rows.narrow(1, i * hd, hd)?;
            let k = rows.narrow(1, e + i * hd, hd)?;
            let v = rows.narrow(1, 2 * e + i * hd, hd)?;
            let s = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?.broadcast_add(&mask)?;
            heads.push(candle_nn::ops::softmax(&s, D::Minus1)?.matmul(&v)?);
        }
        outs.push(Tensor::cat(&heads, 1)?);
    }
    Tensor::cat(&outs, 0)
}

/// mean over rows of −log softmax(x · wteᵀ)[target].
pub fn head_cross_entropy(x: &Tensor, wte: &Tensor, targets: &Tensor) -> Result<Tensor> {
    cross_entropy(&x.matmul(&wte.t()?)?, targets)
}

/// Mean cross-entropy of logits rows against their targets.
pub fn cross_entropy(logits: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let logp = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    logp.gather(&targets.unsqueeze(1)?, 1)?.mean_all()?.neg()
}
