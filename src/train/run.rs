//! The training loop: prepare or resume a run directory, train with AdamW under the schedule,
//! log, checkpoint mid-epoch and at every epoch end, evaluate each epoch, mark `DONE`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};

use crate::code::Code;
use crate::config::{Config, Precision};
use crate::dataset::{self, DataDir};
use crate::fsutil::write_atomic;
use crate::model::{Gpt, GptConfig, Kernels, load_tensors, profile, save_tensors};
use crate::progress;
use crate::rundir::checkpoint::{self, MODEL, OPTIMIZER, TrainerState};
use crate::rundir::{CONFIG, DONE, RUN, RunInfo, markers};
use crate::tags;
use crate::train::adamw::{AdamW, Hyper};
use crate::train::batch::{self, Batch};
use crate::train::metrics::Metrics;
use crate::train::schedule::Schedule;
use crate::train::tokens::{self, Sequences};

/// What `lab train` was asked to do.
pub struct Options {
    pub config: Config,
    pub out: Option<PathBuf>,
    pub resume: bool,
    pub device: Device,
    pub max_steps: Option<u64>,
    /// Take over a run directory whose `RUNNING` marker names a trainer on another host.
    pub takeover: bool,
    /// The device's peak FLOP/s for MFU, instead of the measured or tabled one.
    pub peak: Option<f64>,
    /// The kernels instead of the device's and precision's own: fused is the lab's kernels (on
    /// the CPU every op, fp32 only; on CUDA the optimizer).
    pub kernels: Option<Kernels>,
}

/// How a call to `train` ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every epoch done; `DONE` written.
    Done,
    /// Already done before this call.
    AlreadyDone,
    /// Stopped at `--max-steps` with a checkpoint.
    MaxSteps,
    /// Stopped by SIGUSR1/SIGTERM with a checkpoint; resume with `--resume`.
    Interrupted,
}

pub struct Outcome {
    pub ending: Ending,
    pub run_dir: PathBuf,
    pub state: TrainerState,
    /// Non-padding tokens per second over the steps of this call (after the first).
    pub tokens_per_s: f64,
    pub val_loss: Option<f64>,
    pub info: RunInfo,
}

/// The default run directory: `checkpoints/<name>/`.
pub fn default_run_dir(cfg: &Config) -> PathBuf {
    PathBuf::from("checkpoints").join(&cfg.name)
}

/// Check that `run_dir` may be used for `cfg`, and create it with its fixed files.
pub(super) fn prepare_run_dir(
    cfg: &Config,
    run_dir: &Path,
    resume: bool,
    takeover: bool,
) -> Result<()> {
    if run_dir.is_dir() {
        markers::check_free(run_dir, takeover)?;
    }
    let cfg_path = run_dir.join(CONFIG);
    if cfg_path.exists() {
        let theirs = Config::load(&cfg_path)?;
        if theirs.run_hash() != cfg.run_hash() {
            bail!(
                "{}: made by a different config (run hash {}, {} has {}); use another --out",
                run_dir.display(),
                &theirs.run_hash()[..12],
                cfg.source.display(),
                &cfg.run_hash()[..12]
            );
        }
    }
    let has_ckpt = checkpoint::exists(run_dir);
    if resume && !has_ckpt {
        bail!("{}: no checkpoint to resume", run_dir.display());
    }
    if !resume && has_ckpt {
        bail!(
            "{}: already holds a checkpoint; pass --resume to continue it, or choose another --out",
            run_dir.display()
        );
    }
    std::fs::create_dir_all(run_dir)
        .with_context(|| format!("{}: cannot create directory", run_dir.display()))?;
    write_atomic(&cfg_path, cfg.to_toml().as_bytes())
}

/// Masked validation loss averaged over tokens (SPEC §5): every eval query followed by its
/// reference path, after `prefixes[i]` when given (none: plain sequences, no teacherless
/// inputs, whatever the objective, so that losses compare across objectives).
pub fn validation_loss(
    model: &Gpt,
    val: &Sequences,
    batch_size: usize,
    prefixes: &[Vec<u32>],
) -> Result<f64> {
    let (mut total, mut n) = (0f64, 0usize);
    let parts: Vec<batch::Part> = (0..val.len())
        .map(|i| batch::Part {
            prefix: prefixes.get(i).cloned().unwrap_or_default(),
            ..batch::Part::plain(i)
        })
        .collect();
    for chunk in parts.chunks(batch_size) {
        let b = batch::make(val, chunk, 0, model.device())?;
        let h = model.hidden(&b.tok, &b.lens)?;
        let l = model
            .loss_value(&h, &b.rows, &b.targets)?
            .to_scalar::<f32>()? as f64;
        total += l * b.loss_tokens as f64;
        n += b.loss_tokens;
    }
    Ok(total / n.max(1) as f64)
}

/// Set by SIGUSR1 or SIGTERM: checkpoint at the next step boundary and stop.
pub(super) fn stop_flag() -> Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGUSR1, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("installing signal handlers")?;
    }
    Ok(flag)
}

/// Everything one step needs to know to log and checkpoint.
pub(super) struct Loop<'a> {
    pub(super) run_dir: &'a Path,
    pub(super) model: &'a Gpt,
    pub(super) opt: &'a mut AdamW,
    pub(super) state: TrainerState,
    pub(super) metrics: Metrics,
}

impl Loop<'_> {
    pub(super) fn checkpoint(&self) -> Result<()> {
        let model = self.model;
        let opt = &*self.opt;
        checkpoint::save(
            self.run_dir,
            &self.state,
            &[
                (MODEL, &|p: &Path| model.save(p)),
                (OPTIMIZER, &|p: &Path| {
                    save_tensors(&opt.state_tensors()?, p)
                }),
            ],
        )
    }
}

/// Train as `opts` says. While it runs, the run directory holds a `RUNNING` marker (pid,
/// host, Slurm ids); an error replaces it with `FAILED` (the error line), so that sweeps can
/// tell the state of every run from its directory alone.
pub fn train(opts: Options) -> Result<Outcome> {
    let cfg = &opts.config;
    // Refused before anything is built or written: the run directory is left as it was.
    let precision = Precision::resolve(cfg.train.precision, &opts.device);
    if opts.kernels == Some(Kernels::Fused) && opts.device.is_cpu() && precision != Precision::Fp32
    {
        bail!(
            "--kernels fused: the fused CPU kernels run in fp32 only, and this run has \
             train.precision = {}",
            precision.name()
        );
    }
    let data_dir = dataset::default_dir(cfg);
    dataset::ensure(cfg, &data_dir, false)?;
    let data = DataDir::open(&data_dir)?;
    let cache = tokens::load_or_build(&data)?;
    let run_dir = opts.out.clone().unwrap_or_else(|| default_run_dir(cfg));
    prepare_run_dir(cfg, &run_dir, opts.resume, opts.takeover)?;
    markers::acquire(&run_dir, opts.takeover)?;
    let result = train_in(&opts, &data_dir, &data, &cache, run_dir.clone());
    match &result {
        Ok(_) => markers::clear(&run_dir),
        Err(e) => markers::failed(&run_dir, &format!("{e:#}")),
    }
    result
}

/// `run.json` of a resumed run: the code that started it, and this code added to `resumed_by`
/// (with a line on stderr) where it differs from the code that wrote the checkpoint.
fn resumed_info(run_dir: &Path, state: &TrainerState, mut info: RunInfo) -> RunInfo {
    let this = Code::this();
    let wrote = state.code.as_ref();
    if wrote.is_none_or(|c| c.differs(&this)) {
        eprintln!(
            "{}: resumed by lab {} from a checkpoint written by {}; the run mixes the two codes' numerics",
            run_dir.display(),
            this.label(),
            wrote.map_or("a lab that did not record its commit".into(), Code::label)
        );
    }
    if let Ok(old) = crate::rundir::read_run_info(run_dir) {
        info.code = old.code;
        info.resumed_by = old.resumed_by;
    }
    if info.code.as_ref() != Some(&this) && info.resumed_by.last() != Some(&this) {
        info.resumed_by.push(this);
    }
    info
}

fn train_in(
    opts: &Options,
    data_dir: &Path,
    data: &DataDir,
    cache: &tokens::TokenCache,
    run_dir: PathBuf,
) -> Result<Outcome> {
    let cfg = &opts.config;

    let gcfg = GptConfig::new(cfg, data.vocab().n_tokens());
    let b = cfg.train.batch_size as usize;
    let vocab = data.vocab();
    let teacherless = batch::teacherless_of(&cfg.train, cache.train.len());
    let steps_per_epoch = (cache.train.len() + teacherless.len()).div_ceil(b) as u64;
    let total_steps = steps_per_epoch * cfg.train.epochs as u64;
    let info = run_info(cfg, gcfg, data_dir, steps_per_epoch)?;
    let precision = Precision::resolve(cfg.train.precision, &opts.device);
    let (model, mut opt, state, info) = start(opts, gcfg, precision, &run_dir, info)?;
    // The run's fixed files, once a resumed checkpoint has loaded: a bad checkpoint leaves the
    // directory as it was.
    write_fixed_files(&run_dir, data_dir, &info)?;

    if run_dir.join(DONE).exists() {
        return Ok(Outcome {
            ending: Ending::AlreadyDone,
            run_dir,
            val_loss: None,
            tokens_per_s: 0.0,
            state,
            info,
        });
    }
    let metrics = Metrics::open(&run_dir, opts.resume.then_some(state.step))?;
    let stop = stop_flag()?;
    let sched = Schedule::new(
        cfg.peak_lr(),
        cfg.train.min_lr_frac,
        cfg.train.warmup_frac,
        total_steps,
    );
    let mut lp = Loop {
        run_dir: &run_dir,
        model: &model,
        opt: &mut opt,
        state,
        metrics,
    };
    let bar = progress::bar(total_steps, "train");
    bar.set_position(lp.state.step);
    let mut throughput = Throughput::default();
    let peak = announce_peak(opts, precision);
    let mut window = Window::new(&lp.state);
    let mut val_loss = None;
    let ending = 'run: loop {
        if lp.state.epoch >= cfg.train.epochs as u64 {
            break 'run Ending::Done;
        }
        let parts = batch::epoch_parts(
            cache.train.len(),
            &cfg.train,
            &teacherless,
            &vocab,
            lp.state.epoch,
        );
        while lp.state.batch < steps_per_epoch {
            if opts.max_steps.is_some_and(|m| lp.state.step >= m) {
                lp.checkpoint()?;
                break 'run Ending::MaxSteps;
            }
            if stop.load(Ordering::Relaxed) {
                lp.checkpoint()?;
                break 'run Ending::Interrupted;
            }
            let start = lp.state.batch as usize * b;
            let chunk = &parts[start..(start + b).min(parts.len())];
            let t0 = Instant::now();
            let micro = cfg.train.micro_batch.map_or(chunk.len(), |m| m as usize);
            let batches = {
                let _t = profile::span("step/batch");
                chunk
                    .chunks(micro.max(1))
                    .map(|c| batch::make(&cache.train, c, vocab.dummy_id(), &opts.device))
                    .collect::<candle_core::Result<Vec<Batch>>>()?
            };
            let lr = sched.lr(lp.state.step);
            let (loss, grads) = accumulate(&lp, &batches)
                .map_err(|e| anyhow::anyhow!("step {}: {e:#}", lp.state.step + 1))?;
            let norm = {
                let _t = profile::span("step/optimizer");
                lp.opt.step(&model.params, &grads, lr)?
            };
            let (loss, gnorm) = read_loss_and_norm(&lp, &loss, &norm)?;
            let s = &mut lp.state;
            let tokens = account(s, &gcfg, &batches, t0);
            throughput.step(tokens);
            s.window_loss += loss;
            s.window_steps += 1;
            window.tokens += tokens;
            if s.step.is_multiple_of(cfg.train.log_every) {
                window.log(
                    (&mut lp.state, &mut lp.metrics),
                    lr,
                    gnorm,
                    peak.as_ref(),
                    &bar,
                )?;
            }
            bar.set_position(lp.state.step);
            if cfg.train.checkpoint_every > 0
                && lp.state.step.is_multiple_of(cfg.train.checkpoint_every)
            {
                lp.checkpoint()?;
            }
        }
        lp.state.epoch += 1;
        lp.state.batch = 0;
        let last = lp.state.epoch >= cfg.train.epochs as u64;
        if !last && !lp.state.epoch.is_multiple_of(cfg.eval.every as u64) {
            lp.checkpoint()?;
            continue;
        }
        val_loss = Some(evaluate(&mut lp, cfg, data, cache, last)?);
    };
    bar.finish_and_clear();
    if ending == Ending::Done {
        write_atomic(
            &run_dir.join(DONE),
            (serde_json::to_string_pretty(&lp.state)? + "\n").as_bytes(),
        )?;
    }
    let tokens_per_s = throughput.tokens_per_s();
    if let Some(table) = profile::report() {
        eprint!("{table}");
    }
    Ok(Outcome {
        ending,
        run_dir: run_dir.clone(),
        state: lp.state,
        tokens_per_s,
        val_loss,
        info,
    })
}

/// `run.json` of a run started by this code.
pub(super) fn run_info(
    cfg: &Config,
    gcfg: GptConfig,
    data_dir: &Path,
    steps_per_epoch: u64,
) -> Result<RunInfo> {
    Ok(RunInfo {
        run_hash: cfg.run_hash(),
        data_dir: std::path::absolute(data_dir)?,
        model: gcfg,
        total_params: gcfg.total_params(),
        non_embedding_params: gcfg.non_embedding_params(),
        steps_per_epoch,
        total_steps: steps_per_epoch * cfg.train.epochs as u64,
        code: Some(Code::this()),
        resumed_by: Vec::new(),
    })
}

/// `run.json`, the HF `config.json` and the tokenizer, written into the run directory.
pub(super) fn write_fixed_files(run_dir: &Path, data_dir: &Path, info: &RunInfo) -> Result<()> {
    write_atomic(
        &run_dir.join(RUN),
        (serde_json::to_string_pretty(info)? + "\n").as_bytes(),
    )?;
    write_atomic(
        &run_dir.join("config.json"),
        info.model.hf_config_json().as_bytes(),
    )?;
    std::fs::copy(
        data_dir.join(dataset::TOKENIZER),
        run_dir.join(dataset::TOKENIZER),
    )
    .with_context(|| format!("{}: cannot write tokenizer.json", run_dir.display()))?;
    Ok(())
}

/// The device's peak FLOP/s for `precision` (or `--peak`), which MFU divides, said on stderr.
pub(super) fn announce_peak(opts: &Options, precision: Precision) -> Option<crate::device::Peak> {
    let peak = crate::device::peak(&opts.device, opts.peak, precision);
    match &peak {
        Some(p) => eprintln!(
            "{} matmuls; MFU against {:.3e} FLOP/s ({})",
            precision.name(),
            p.flops,
            p.source
        ),
        None => eprintln!("MFU not logged: no known peak for this device; pass --peak FLOPS"),
    }
    peak
}

/// Count a finished step in the trainer state (step, cursor, FLOPs with and without the head,
/// tokens, seconds since `t0`); returns its tokens.
pub(super) fn account(
    s: &mut TrainerState,
    gcfg: &GptConfig,
    batches: &[Batch],
    t0: Instant,
) -> usize {
    s.step += 1;
    s.batch += 1;
    let tokens: usize = batches.iter().map(|b| b.tokens).sum();
    for batch in batches {
        s.flops += batch.tokens as f64 * gcfg.flops_per_token(batch.t);
        s.flops_head += batch.loss_tokens as f64 * gcfg.head_flops_per_loss_token();
    }
    s.tokens += tokens as u64;
    s.seconds += t0.elapsed().as_secs_f64();
    tokens
}

/// This call's throughput: from the end of its first step (warm-up) to the end of its last.
#[derive(Default)]
struct Throughput {
    tokens: u64,
    first: Option<(Instant, u64)>,
    last: Option<Instant>,
}

impl Throughput {
    fn step(&mut self, tokens: usize) {
        self.tokens += tokens as u64;
        let now = Instant::now();
        self.last = Some(now);
        self.first.get_or_insert((now, self.tokens));
    }

    fn tokens_per_s(&self) -> f64 {
        match (self.first, self.last) {
            (Some((t, n)), Some(end)) => {
                (self.tokens - n) as f64 / end.duration_since(t).as_secs_f64().max(1e-9)
            }
            _ => 0.0,
        }
    }
}

/// The model, optimizer and trainer state of a run: fresh from the seed, or from its latest
/// checkpoint (with `info` as the resumed run's); the model at `precision` and `--kernels`.
fn start(
    opts: &Options,
    gcfg: GptConfig,
    precision: Precision,
    run_dir: &Path,
    mut info: RunInfo,
) -> Result<(Gpt, AdamW, TrainerState, RunInfo)> {
    let cfg = &opts.config;
    let device = &opts.device;
    // The precision's and --kernels' choice of kernels, which the optimizer follows.
    let kernels = |mut model: Gpt| {
        model.set_precision(precision);
        if let Some(k) = opts.kernels {
            model.kernels = k;
        }
        model
    };
    let (model, opt, state) = if opts.resume {
        let (dir, state, resumed) = resume_point(cfg, run_dir, info)?;
        info = resumed;
        let model = kernels(Gpt::load(gcfg, &dir.join(MODEL), device)?);
        let mut opt = AdamW::new(&model.params, Hyper::from_config(&cfg.train), model.kernels)?;
        opt.load_state(optimizer_state(&dir)?, state.step)
            .with_context(|| mismatch(&dir))?;
        (model, opt, state)
    } else {
        let model = kernels(Gpt::init(gcfg, cfg.train.seed, device)?);
        let opt = AdamW::new(&model.params, Hyper::from_config(&cfg.train), model.kernels)?;
        let state = fresh_state(cfg);
        (model, opt, state)
    };
    Ok((model, opt, state, info))
}

/// Where a run resumes: its latest checkpoint's directory, its trainer state (now this
/// code's), and `info` as the resumed run's `run.json`; refused for another config's checkpoint.
pub(super) fn resume_point(
    cfg: &Config,
    run_dir: &Path,
    info: RunInfo,
) -> Result<(PathBuf, TrainerState, RunInfo)> {
    let (dir, state) = checkpoint::latest(run_dir)?;
    if state.run_hash != cfg.run_hash() {
        bail!("{}: checkpoint of a different config", run_dir.display());
    }
    let info = resumed_info(run_dir, &state, info);
    let state = TrainerState {
        code: Some(Code::this()),
        ..state
    };
    Ok((dir, state, info))
}

/// The optimizer moments of the checkpoint in `dir`.
pub(super) fn optimizer_state(dir: &Path) -> Result<std::collections::HashMap<String, Tensor>> {
    load_tensors(&dir.join(OPTIMIZER))
}

/// The error of moments that do not fit the model, naming the checkpoint's file.
pub(super) fn mismatch(dir: &Path) -> String {
    format!(
        "{}: optimizer state does not match the model",
        dir.join(OPTIMIZER).display()
    )
}

/// The trainer state of a run that starts now: this code, the config's hash, its streams.
pub(super) fn fresh_state(cfg: &Config) -> TrainerState {
    TrainerState {
        lab_version: env!("CARGO_PKG_VERSION").to_string(),
        code: Some(Code::this()),
        run_hash: cfg.run_hash(),
        rng: format!(
            "ChaCha8 streams from train.seed = {}: init, teacherless copies, and per epoch the order and hash prefixes",
            cfg.train.seed
        ),
        ..TrainerState::default()
    }
}

/// The evaluation at an epoch end (`last`: the final one): validation and tuning losses, the
/// greedy and sampled evaluation, logged, then a checkpoint. Returns the validation loss.
pub(super) fn evaluate(
    lp: &mut Loop,
    cfg: &Config,
    data: &DataDir,
    cache: &tokens::TokenCache,
    last: bool,
) -> Result<f64> {
    let b = cfg.train.batch_size as usize;
    let v = validation_loss(lp.model, &cache.val, b, &[])?;
    let mut figures = vec![(tags::VAL_LOSS.to_string(), v)];
    if let Some(tune) = &cache.tune {
        let t = validation_loss(lp.model, tune, b, &[])?;
        figures.push((tags::TUNE_LOSS.to_string(), t));
    }
    if cfg.train.hash_prefix > 0 {
        // A hash-conditioned model never sees a sequence without a prefix: also its loss
        // after the prefix its greedy evaluation gives each query.
        let prefixes = crate::eval::greedy_prefixes(cfg, data)?;
        figures.push((
            tags::VAL_LOSS_HASH.to_string(),
            validation_loss(lp.model, &cache.val, b, &prefixes)?,
        ));
    }
    figures.extend(crate::eval::epoch(
        cfg,
        lp.model,
        data,
        lp.state.epoch,
        last,
        lp.run_dir,
    )?);
    let s = &lp.state;
    let (step, epoch, flops) = (s.step, s.epoch, [s.flops, s.flops_head]);
    lp.metrics.log(step, epoch, flops, &figures)?;
    lp.checkpoint()?;
    Ok(v)
}

/// The log window: this process's tokens, clock and model FLOPs since the last `train/*` line
/// (its loss sum and step count live in the trainer state, so a resumed run logs the same
/// averages).
pub(super) struct Window {
    pub(super) tokens: usize,
    start: Instant,
    flops: f64,
}

/// Model FLOPs so far, the LM head counted: what MFU divides.
fn model_flops(s: &TrainerState) -> f64 {
    s.flops + s.flops_head
}

impl Window {
    pub(super) fn new(s: &TrainerState) -> Window {
        Window {
            tokens: 0,
            start: Instant::now(),
            flops: model_flops(s),
        }
    }

    /// Log the window's `train/*` line (loss, lr, gradient norm, throughput, MFU against
    /// `peak`) and start the next window.
    pub(super) fn log(
        &mut self,
        (s, metrics): (&mut TrainerState, &mut Metrics),
        lr: f64,
        gnorm: f64,
        peak: Option<&crate::device::Peak>,
        bar: &indicatif::ProgressBar,
    ) -> Result<()> {
        let secs = self.start.elapsed().as_secs_f64();
        let mean = s.window_loss / s.window_steps.max(1) as f64;
        let rate = (model_flops(s) - self.flops) / secs;
        let mut figures = vec![
            (tags::TRAIN_LOSS.to_string(), mean),
            (tags::TRAIN_LR.to_string(), lr),
            (tags::TRAIN_GRAD_NORM.to_string(), gnorm),
            (
                tags::TRAIN_TOKENS_PER_S.to_string(),
                self.tokens as f64 / secs,
            ),
            (tags::TRAIN_FLOPS_PER_S.to_string(), rate),
        ];
        if let Some(p) = peak {
            figures.push((tags::TRAIN_MFU.to_string(), rate / p.flops));
        }
        bar.set_message(format!(
            "ep {} loss {:.4} lr {lr:.2e} {:.0} tok/s",
            s.epoch + 1,
            mean,
            self.tokens as f64 / secs
        ));
        let (step, epoch, flops) = (s.step, s.epoch + 1, [s.flops, s.flops_head]);
        metrics.log(step, epoch, flops, &figures)?;
        *self = Window::new(s);
        s.window_loss = 0.0;
        s.window_steps = 0;
        Ok(())
    }
}

/// Forward and backward of a batch given as micro-batches (`train.micro_batch`): each loss
/// weighted by its share of the batch's loss tokens and the gradients summed, which is the
/// whole batch's mean loss and its gradient. One micro-batch is exactly `step` (its loss an f32
/// scalar); more are summed in f64. The loss stays on the device: nothing waits for it.
fn accumulate(lp: &Loop, parts: &[Batch]) -> Result<(Tensor, GradStore)> {
    if let [one] = parts {
        return step(lp, one, None);
    }
    let total: usize = parts.iter().map(|b| b.loss_tokens).sum();
    let (mut loss, mut sum): (Option<Tensor>, Option<GradStore>) = (None, None);
    for b in parts {
        let w = b.loss_tokens as f64 / total.max(1) as f64;
        let (l, g) = step(lp, b, Some(w))?;
        let l = (l.to_dtype(candle_core::DType::F64)? * w)?;
        loss = Some(match loss {
            Some(acc) => (acc + l)?,
            None => l,
        });
        let Some(acc) = &mut sum else {
            sum = Some(g);
            continue;
        };
        for (_, v) in &lp.model.params {
            if let Some(x) = g.get(v) {
                let total = match acc.get(v) {
                    Some(a) => (a + x)?,
                    None => x.clone(),
                };
                acc.insert(v, total);
            }
        }
    }
    match (loss, sum) {
        (Some(l), Some(g)) => Ok((l, g)),
        _ => bail!("an empty batch"),
    }
}

/// Forward and backward of one batch, its loss scaled by `weight` when given. Returns the
/// (unscaled) loss, an f32 scalar on the device.
fn step(lp: &Loop, batch: &Batch, weight: Option<f64>) -> Result<(Tensor, GradStore)> {
    let fwd = profile::span("step/forward");
    let h = lp.model.hidden(&batch.tok, &batch.lens)?;
    let loss: Tensor = lp.model.loss(&h, &batch.rows, &batch.targets)?;
    let l = loss.clone();
    drop(fwd);
    let _t = profile::span("step/backward");
    let loss = match weight {
        Some(w) => (loss * w)?,
        None => loss,
    };
    Ok((l, loss.backward()?))
}

/// The step's host reads: its gradient norm and loss, once the update is queued (one wait).
/// A non-finite loss stops the run before anything of the step is logged or checkpointed, so
/// the last checkpoint stays the last good state.
fn read_loss_and_norm(lp: &Loop, loss: &Tensor, norm: &Tensor) -> Result<(f64, f64)> {
    // The norm first: queued last, its read waits for the whole step, and the loss is then
    // ready. Two copies and no kernel (a stack and a cast were three launches a step).
    let n = scalar(norm)?;
    let l = scalar(loss)?;
    if !l.is_finite() {
        bail!(
            "the training loss is {l} at epoch {}; stopping before the step is saved. The last good checkpoint is kept in {} (lower train.lr?)",
            lp.state.epoch + 1,
            lp.run_dir.display()
        );
    }
    Ok((l, n))
}

/// A scalar's value (an f32 loss, an f64 loss or norm) as f64, read without a cast on its
/// device.
fn scalar(t: &Tensor) -> Result<f64> {
    Ok(match t.dtype() {
        candle_core::DType::F32 => f64::from(t.to_scalar::<f32>()?),
        _ => t.to_scalar::<f64>()?,
    })
}
