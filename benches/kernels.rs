//! Each fused kernel's forward and forward + backward, timed alone on one thread at the study
//! shapes (issue 21): 64 packed sequences of 12 to 26 tokens (the repro-cpu world's mean is 18).
//! Run: `RAYON_NUM_THREADS=1 cargo bench --bench kernels`. The process is set up as `lab`'s. Best of 5 rounds, each 200 calls.
//! The LM head's weight gradient is timed with a normal and a denormal dy (`LAB_DENORMALS`).

use std::time::Instant;

use candle_core::{Device, Result, Tensor, Var};
use lab::model::ops;

const CALLS: usize = 200;

/// Best seconds per call of `f` over 5 rounds of `calls` calls.
fn time(f: &dyn Fn() -> Result<()>, calls: usize) -> Result<f64> {
    f()?;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..calls {
            f()?;
        }
        best = best.min(t.elapsed().as_secs_f64() / calls as f64);
    }
    Ok(best)
}

/// (forward, forward + backward) µs per call of `op` on inputs `xs`, the backward from
/// dy = 1 (candle's seed for a tensor's own backward: no other op in the graph).
fn fwd_bwd(op: &dyn Fn(&[Tensor]) -> Result<Tensor>, xs: &[Var]) -> Result<(f64, f64)> {
    let ts: Vec<Tensor> = xs.iter().map(|v| v.as_tensor().clone()).collect();
    let fwd = time(&|| op(&ts).map(drop), CALLS)?;
    let both = time(&|| op(&ts)?.backward().map(drop), CALLS)?;
    Ok((fwd * 1e6, both * 1e6))
}

fn randn(shape: &[usize]) -> Result<Var> {
    Var::from_tensor(&Tensor::randn(0f32, 0.5, shape, &Device::Cpu)?)
}

fn main() -> Result<()> {
    lab::runtime::prepare().map_err(candle_core::Error::msg)?;
    lab::runtime::on_a_pool_thread(run)
}

fn run() -> Result<()> {
    let lens: Vec<usize> = (0..64).map(|i| 12 + i % 15).collect();
    let n: usize = lens.iter().sum();
    println!(
        "{n} rows in {} sequences; µs per call, best of 5 x {CALLS}",
        lens.len()
    );
    println!("| kernel | E | H | forward | forward + backward |");
    println!("| --- | --- | --- | --- | --- |");
    for (e, h) in [(24, 1), (24, 4), (24, 8), (72, 4), (88, 4), (288, 4)] {
        let qkv = randn(&[n, 3 * e])?;
        let (f, b) = fwd_bwd(&|t| ops::causal_attention(&t[0], &lens, h), &[qkv])?;
        println!("| attention | {e} | {h} | {f:.0} | {b:.0} |");
    }
    for e in [24, 72, 88, 288] {
        let (x, w, b) = (randn(&[n, e])?, randn(&[e])?, randn(&[e])?);
        let (f, fb) = fwd_bwd(&|t| ops::layer_norm(&t[0], &t[1], &t[2]), &[x, w, b])?;
        println!("| layer norm | {e} | | {f:.0} | {fb:.0} |");
        let x = randn(&[n, 4 * e])?;
        let (f, fb) = fwd_bwd(&|t| ops::gelu(&t[0]), &[x])?;
        println!("| gelu (4E) | {e} | | {f:.0} | {fb:.0} |");
        let (x, w, b) = (randn(&[n, e])?, randn(&[e, 3 * e])?, randn(&[3 * e])?);
        let (f, fb) = fwd_bwd(&|t| ops::linear(&t[0], &t[1], &t[2]), &[x, w, b])?;
        println!("| linear E→3E | {e} | | {f:.0} | {fb:.0} |");
    }
    lm_head_weight_grad(n)
}

/// The LM head's weight gradient dyᵀ·x (vocabulary 2,112, E = 576: the 1M L×E arm's L = 1)
/// with dy normal and with dy denormal, as a confident head makes it. Run it with
/// LAB_DENORMALS=keep and without: flushed, the two take the same time. Best of 5 x 2 calls.
fn lm_head_weight_grad(n: usize) -> Result<()> {
    let x = Tensor::randn(0f32, 1.0, (n, 576), &Device::Cpu)?;
    let flushed = lab::runtime::denormals_flushed();
    for (what, scale) in [("normal", 1e-3f32), ("denormal", 1e-40)] {
        let dy = (Tensor::rand(0f32, 1.0, (n, 2112), &Device::Cpu)? * f64::from(scale))?;
        let us = time(&|| dy.t()?.matmul(&x).map(drop), 2)? * 1e6;
        println!("| LM head dyᵀ·x, dy {what}, flushed {flushed} | 576 | | {us:.0} | |");
    }
    Ok(())
}
