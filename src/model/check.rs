//! `lab kernel-check`: every lab kernel, forward and backward, against its definition
//! (`ops::reference`) at the shapes of real configs, on fresh random inputs, as a table; on
//! CUDA, the kernels that have a CUDA version against their definitions on the CPU.

use std::fmt::Write as _;

use candle_core::{DType, Device, Result, Tensor, Var};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{Config, Precision};
use crate::model::{GptConfig, Kernels, ops};
use crate::tokenizer::Vocab;

/// The relative error a fp32 kernel may have against its definition: reductions of a few
/// thousand terms in another order differ by about 1e-7 relative.
pub const TOL_F32: f64 = 1e-5;

/// The sequences of a batch as the study configs pack them: 64 of 12 to 26 tokens.
const SEQUENCES: usize = 64;
const LENS: (usize, usize) = (12, 26);

/// One comparison: a kernel's output or one gradient against its definition's.
pub struct Row {
    pub config: String,
    pub op: &'static str,
    pub shape: String,
    /// `forward`, or `grad <input>`.
    pub what: String,
    pub err: f64,
    pub tol: f64,
}

impl Row {
    /// Within tolerance (NaN never is).
    pub fn ok(&self) -> bool {
        self.err <= self.tol
    }
}

/// ‖a − b‖ / ‖b‖ over every element, in f64 (‖a − b‖ when b is zero).
pub fn rel_err(a: &Tensor, b: &Tensor) -> Result<f64> {
    let (a, b) = (
        a.flatten_all()?.to_vec1::<f32>()?,
        b.flatten_all()?.to_vec1::<f32>()?,
    );
    if a.len() != b.len() {
        return Ok(f64::NAN);
    }
    let (mut d, mut n) = (0f64, 0f64);
    for (x, y) in a.iter().zip(&b) {
        d += (*x as f64 - *y as f64).powi(2);
        n += (*y as f64).powi(2);
    }
    Ok(if n > 0.0 { (d / n).sqrt() } else { d.sqrt() })
}

type Op<'a> = &'a dyn Fn(&[Tensor]) -> Result<Tensor>;

/// Uniform values in [−scale, scale) of a shape, from `rng`.
pub fn random(rng: &mut ChaCha8Rng, shape: &[usize], scale: f32) -> Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-scale..scale)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu)
}

/// The inputs as variables on `device`, and `op`'s output on them.
fn forward(op: Op, inputs: &[Tensor], device: &Device) -> Result<(Vec<Var>, Tensor)> {
    let vars = inputs
        .iter()
        .map(|t| Var::from_tensor(&t.to_device(device)?))
        .collect::<Result<Vec<_>>>()?;
    let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let y = op(&ts)?;
    Ok((vars, y))
}

/// The gradients of Σ y · r with respect to each variable.
fn backward(vars: &[Var], y: &Tensor, r: &Tensor) -> Result<Vec<Tensor>> {
    let grads = (y * r.to_device(y.device())?)?.sum_all()?.backward()?;
    vars.iter()
        .map(|v| {
            grads
                .get(v)
                .cloned()
                .ok_or_else(|| candle_core::Error::Msg("an input got no gradient".into()))
        })
        .collect()
}

impl Row {
    /// The one row of a comparison that could not run, failing with its error: one kernel that
    /// fails on a device must not hide the others' rows.
    pub fn failed(config: &str, op: &'static str, e: &candle_core::Error) -> Row {
        let why = e.to_string().replace(['|', '\n'], " ");
        Row {
            config: config.to_string(),
            op,
            shape: String::new(),
            what: format!("error: {why}"),
            err: f64::NAN,
            tol: TOL_F32,
        }
    }
}

/// The rows of one kernel (its forward and the gradient of each input named in `names`, the
/// kernel on `device`, its definition on the CPU), or one failing row with its error.
fn compare(
    rng: &mut ChaCha8Rng,
    (config, op, names): (&str, &'static str, &[&str]),
    on: (Op, &Device),
    reference: Op,
    inputs: &[Tensor],
) -> Result<Vec<Row>> {
    Ok(try_compare(rng, (config, op, names), on, reference, inputs)
        .unwrap_or_else(|e| vec![Row::failed(config, op, &e)]))
}

fn try_compare(
    rng: &mut ChaCha8Rng,
    (config, op, names): (&str, &'static str, &[&str]),
    (fused, device): (Op, &Device),
    reference: Op,
    inputs: &[Tensor],
) -> Result<Vec<Row>> {
    let (v1, y1) = forward(fused, inputs, device)?;
    let r = random(rng, y1.dims(), 1.0)?;
    let g1 = backward(&v1, &y1, &r)?;
    let (v2, y2) = forward(reference, inputs, &Device::Cpu)?;
    let g2 = backward(&v2, &y2, &r)?;
    let shape = inputs
        .iter()
        .map(|t| format!("{:?}", t.dims()))
        .collect::<Vec<_>>()
        .join(" ");
    let row = |what: String, err: f64| Row {
        config: config.to_string(),
        op,
        shape: shape.clone(),
        what,
        err,
        tol: TOL_F32,
    };
    let mut rows = vec![row("forward".into(), rel_err(&y1, &y2)?)];
    for (i, name) in names.iter().enumerate() {
        rows.push(row(format!("grad {name}"), rel_err(&g1[i], &g2[i])?));
    }
    Ok(rows)
}

/// Every kernel at the shapes of `cfg` (its width, heads and vocabulary; a batch of 64
/// sequences of 12 to 26 tokens, half its rows at loss positions), inputs drawn from `rng`, on
/// `device`: on CUDA the kernels with a CUDA version (LayerNorm, the linear layer, GELU with and
/// without the bias, attention, the loss's cross-entropy and the head's loss with no logits
/// kept).
pub fn check_config(
    name: &str,
    cfg: &Config,
    device: &Device,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<Row>> {
    let g = GptConfig::new(cfg, Vocab::of_config(&cfg.graph).n_tokens());
    let (e, h, v) = (g.n_embd, g.n_head, g.vocab_size);
    let lens: Vec<usize> = (0..SEQUENCES)
        .map(|_| rng.random_range(LENS.0..=LENS.1))
        .collect();
    let n: usize = lens.iter().sum();
    let mut rows = Vec::new();
    // The products of the linear layers and the head in full f32 on a GPU.
    crate::device::tf32(false);
    let ln = [
        random(rng, &[n, e], 2.0)?,
        random(rng, &[e], 1.0)?,
        random(rng, &[e], 1.0)?,
    ];
    rows.extend(compare(
        rng,
        (name, "layer_norm", &["x", "w", "b"]),
        (&|t| ops::layer_norm(&t[0], &t[1], &t[2]), device),
        &|t| ops::reference::layer_norm(&t[0], &t[1], &t[2]),
        &ln,
    )?);
    for (op, out) in [("linear c_attn", 3 * e), ("linear c_fc", 4 * e)] {
        let lin = [
            random(rng, &[n, e], 1.0)?,
            random(rng, &[e, out], 0.1)?,
            random(rng, &[out], 0.1)?,
        ];
        rows.extend(compare(
            rng,
            (name, op, &["x", "w", "b"]),
            (&|t| ops::linear(&t[0], &t[1], &t[2]), device),
            &|t| ops::reference::linear(&t[0], &t[1], &t[2]),
            &lin,
        )?);
    }
    let x = random(rng, &[n, 4 * e], 4.0)?;
    rows.extend(compare(
        rng,
        (name, "gelu", &["x"]),
        (&|t| ops::gelu(&t[0]), device),
        &|t| ops::reference::gelu(&t[0]),
        &[x],
    )?);
    let qkv = random(rng, &[n, 3 * e], 1.0)?;
    rows.extend(compare(
        rng,
        (name, "causal_attention", &["qkv"]),
        (&|t| ops::causal_attention(&t[0], &lens, h), device),
        &|t| ops::reference::causal_attention(&t[0], &lens, h),
        &[qkv],
    )?);
    let loss_rows = n / 2;
    let targets: Vec<u32> = (0..loss_rows)
        .map(|_| rng.random_range(0..v as u32))
        .collect();
    let targets = Tensor::from_vec(targets, loss_rows, &Device::Cpu)?;
    let on_device = targets.to_device(device)?;
    let logits = random(rng, &[loss_rows, v], 4.0)?;
    rows.extend(compare(
        rng,
        (name, "cross_entropy", &["logits"]),
        (
            &|t| ops::cross_entropy(&t[0], &on_device)?.mean_all(),
            device,
        ),
        &|t| ops::reference::cross_entropy(&t[0], &targets),
        &[logits],
    )?);
    let head = [
        random(rng, &[loss_rows, e], 1.0)?,
        random(rng, &[v, e], 0.1)?,
    ];
    // The head and its loss with no logits kept (the CUDA model's with the lab's kernels).
    rows.extend(compare(
        rng,
        (name, "head_loss", &["x", "wte"]),
        (
            &|t| ops::head_loss(&t[0], &t[1], &on_device, DType::F32),
            device,
        ),
        &|t| ops::reference::head_cross_entropy(&t[0], &t[1], &targets),
        &head,
    )?);
    // The embeddings of the packed sequences: ids over the vocabulary, positions 0.. each.
    let ids: Vec<u32> = (0..n).map(|_| rng.random_range(0..v as u32)).collect();
    let pos: Vec<u32> = lens.iter().flat_map(|&l| 0..l as u32).collect();
    let tok = Tensor::new([ids.as_slice(), pos.as_slice()].concat(), &Device::Cpu)?;
    let (tok_on, ids, pos) = (
        tok.to_device(device)?,
        Tensor::new(ids, &Device::Cpu)?,
        Tensor::new(pos, &Device::Cpu)?,
    );
    let tables = [
        random(rng, &[v, e], 0.1)?,
        random(rng, &[g.n_positions, e], 0.1)?,
    ];
    rows.extend(compare(
        rng,
        (name, "embedding", &["wte", "wpe"]),
        (&|t| ops::embedding(&t[0], &t[1], &tok_on), device),
        &|t| t[0].embedding(&ids)? + t[1].embedding(&pos)?,
        &tables,
    )?);
    if !device.is_cpu() {
        return Ok(rows);
    }
    rows.extend(compare(
        rng,
        (name, "head_cross_entropy", &["x", "wte"]),
        (&|t| ops::head_cross_entropy(&t[0], &t[1], &targets), device),
        &|t| ops::reference::head_cross_entropy(&t[0], &t[1], &targets),
        &head,
    )?);
    Ok(rows)
}

/// A seed for fresh inputs: the clock's nanoseconds.
pub fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Models up to this size get the whole-model rows on the CPU, where a larger one's three
/// forward and backward passes would take minutes; on a GPU every config gets them.
const CPU_MODEL_ROWS_MAX_PARAMS: u64 = 20_000_000;

/// The kernels of every config on `device`, inputs from `seed`: on the CPU every op, the
/// optimizer and the whole model's gradients (composed against fused, fp32 and bf16); on CUDA
/// the ops with a CUDA kernel (LayerNorm, GELU) against their definitions on the CPU, the
/// optimizer, and the whole model's gradients in fp32 (TF32 off) and bf16, composed and with
/// the lab's kernels, against the CPU's fused fp32 model.
pub fn check(configs: &[(String, Config)], device: &Device, seed: u64) -> Result<Vec<Row>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::new();
    for (name, cfg) in configs {
        let g = GptConfig::new(cfg, Vocab::of_config(&cfg.graph).n_tokens());
        rows.extend(check_config(name, cfg, device, &mut rng)?);
        match crate::train::adamw::check::rows(name, &g, device, &mut rng) {
            Ok(r) => rows.extend(r),
            Err(e) => rows.push(Row::failed(name, "adamw", &e)),
        }
        if device.is_cpu() && g.total_params() > CPU_MODEL_ROWS_MAX_PARAMS {
            continue;
        }
        // On a GPU the model with the lab's CUDA kernels too.
        let kernels: &[Kernels] = if device.is_cpu() {
            &[Kernels::Composed]
        } else {
            &[Kernels::Composed, Kernels::Fused]
        };
        for p in [Precision::Fp32, Precision::Bf16] {
            crate::device::tf32(p == Precision::Bf16);
            for &k in kernels {
                let on = (device, p, k);
                match crate::model::grad_check::rows(name, &g, on, &mut rng) {
                    Ok(r) => rows.extend(r),
                    Err(e) => rows.push(Row::failed(name, "model", &e)),
                }
            }
        }
    }
    Ok(rows)
}

/// The table: a row per comparison, its relative error and tolerance, and ok or FAIL.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from("| config | op | inputs | what | rel. error | tolerance | |\n");
    out += "| --- | --- | --- | --- | --- | --- | --- |\n";
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.2e} | {:.0e} | {} |",
            r.config,
            r.op,
            r.shape,
            r.what,
            r.err,
            r.tol,
            if r.ok() { "ok" } else { "FAIL" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_is_the_norm_of_the_difference_over_the_reference() {
        let t = |v: &[f32]| Tensor::from_slice(v, v.len(), &Device::Cpu).unwrap();
        assert_eq!(rel_err(&t(&[3.0, 4.0]), &t(&[3.0, 4.0])).unwrap(), 0.0);
        let e = rel_err(&t(&[3.0, 4.5]), &t(&[3.0, 4.0])).unwrap();
        assert!((e - 0.1).abs() < 1e-12, "{e}");
        assert!(
            rel_err(&t(&[f32::NAN, 4.0]), &t(&[3.0, 4.0]))
                .unwrap()
                .is_nan()
        );
    }

    #[test]
    fn a_kernel_that_errors_is_one_failing_row_naming_the_error() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let x = Tensor::zeros(3, candle_core::DType::F32, &Device::Cpu).unwrap();
        let fails: Op = &|_| Err(candle_core::Error::Msg("no kernel | here".into()));
        let rows = compare(
            &mut rng,
            ("c", "op", &["x"]),
            (fails, &Device::Cpu),
            &|t| Ok(t[0].clone()),
            &[x],
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        assert!(!rows[0].ok());
        assert_eq!(rows[0].what, "error: no kernel   here");
        assert!(table(&rows).contains("| c | op |  | error: no kernel   here | NaN |"));
    }

    #[test]
    fn a_row_fails_above_its_tolerance_and_on_nan() {
        let row = |err| Row {
            config: "c".into(),
            op: "op",
            shape: String::new(),
            what: "forward".into(),
            err,
            tol: TOL_F32,
        };
        assert!(row(1e-6).ok());
        assert!(!row(2e-5).ok());
        assert!(!row(f64::NAN).ok());
        assert!(table(&[row(2e-5)]).contains("FAIL"));
    }
}
