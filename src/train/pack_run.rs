//! Training a pack (SPEC §8 Revision, packs): N runs of one shape as one model, every step one
//! forward and backward for all runs' own batches and one optimizer pass, while each run keeps
//! its own directory, schedule, logs, checkpoints, evaluations and `DONE`, byte for byte those
//! of the run alone on the CPU in fp32. A run whose loss goes non-finite stops alone.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{Device, Tensor};

use crate::config::{Config, Precision};
use crate::dataset::{self, DataDir};
use crate::fsutil::write_atomic;
use crate::model::pack::RunBatch;
use crate::model::{Gpt, GptConfig, Kernels};
use crate::rundir::checkpoint::TrainerState;
use crate::rundir::{DONE, markers};
use crate::train::adamw::pack::PackAdamW;
use crate::train::adamw::{AdamW, Hyper};
use crate::train::batch::{self, Batch};
use crate::train::metrics::Metrics;
use crate::train::run::{self, Ending, Loop, Outcome, Window};
use crate::train::schedule::Schedule;
use crate::train::tokens;

/// What `lab train --pack-with` was asked to do: the runs' configs and directories.
pub struct PackOptions {
    pub configs: Vec<Config>,
    pub outs: Vec<PathBuf>,
    pub max_steps: Option<u64>,
}

/// One run of the pack: its config, directory, schedule, state and logs.
struct Member<'a> {
    cfg: &'a Config,
    dir: PathBuf,
    teacherless: Vec<usize>,
    sched: Schedule,
    state: TrainerState,
    /// Its logs; lent to its `Loop` while it evaluates or checkpoints.
    metrics: Option<Metrics>,
    window: Window,
    /// False once its loss went non-finite: its slice is no longer updated or saved.
    live: bool,
    val_loss: Option<f64>,
}

/// Refuse what a pack cannot train, before anything is written.
fn refuse(cfgs: &[&Config]) -> Result<()> {
    crate::train::pack::check(cfgs)?;
    let cfg = cfgs[0];
    if Precision::resolve(cfg.train.precision, &Device::Cpu) != Precision::Fp32 {
        bail!(
            "{}: a pack trains in fp32 on the CPU for now",
            cfg.source.display()
        );
    }
    if cfg.train.micro_batch.is_some() {
        bail!(
            "{}: train.micro_batch: a pack takes each run's whole batch",
            cfg.source.display()
        );
    }
    let mut names: Vec<&str> = cfgs.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    if names.windows(2).any(|w| w[0] == w[1]) {
        bail!("a pack's runs need distinct names (the run directories)");
    }
    Ok(())
}

/// Train the runs of `opts` as one pack on the CPU. Fresh runs only: a run directory with a
/// checkpoint is refused (resume a pack's runs alone, `lab train --resume`).
pub fn train_pack(opts: PackOptions) -> Result<Vec<Outcome>> {
    let cfgs: Vec<&Config> = opts.configs.iter().collect();
    refuse(&cfgs)?;
    let data_dir = dataset::default_dir(cfgs[0]);
    dataset::ensure(cfgs[0], &data_dir, false)?;
    let data = DataDir::open(&data_dir)?;
    let cache = tokens::load_or_build(&data)?;
    for (cfg, dir) in cfgs.iter().zip(&opts.outs) {
        run::prepare_run_dir(cfg, dir, false, false)?;
    }
    for dir in &opts.outs {
        markers::acquire(dir, false)?;
    }
    let result = train_in(&opts, &cfgs, &data_dir, &data, &cache);
    for dir in &opts.outs {
        match &result {
            // A run stopped in the pack keeps its FAILED marker.
            Ok(_) if markers::read_failed(dir).is_some() => {}
            Ok(_) => markers::clear(dir),
            Err(e) => markers::failed(dir, &format!("{e:#}")),
        }
    }
    result
}

/// Run r's own model and optimizer, as the run alone would hold them now.
fn alone(pack: &Gpt, opt: &PackAdamW, r: usize, hp: Hyper) -> Result<(Gpt, AdamW)> {
    let tensors: HashMap<String, Tensor> = pack.run_tensors(r)?.into_iter().collect();
    let model = Gpt::from_tensors(pack.cfg, tensors, &Device::Cpu)?;
    let mut o = AdamW::new(&model.params, hp, Kernels::Fused)?;
    o.load_state(opt.run_state(r)?.into_iter().collect(), opt.steps)?;
    Ok((model, o))
}

fn train_in(
    opts: &PackOptions,
    cfgs: &[&Config],
    data_dir: &Path,
    data: &DataDir,
    cache: &tokens::TokenCache,
) -> Result<Vec<Outcome>> {
    let gcfg = GptConfig::new(cfgs[0], data.vocab().n_tokens());
    let vocab = data.vocab();
    let b = cfgs[0].train.batch_size as usize;
    let mut members = Vec::new();
    let mut steps = None;
    for (cfg, dir) in cfgs.iter().zip(&opts.outs) {
        let teacherless = batch::teacherless_of(&cfg.train, cache.train.len());
        let per_epoch = (cache.train.len() + teacherless.len()).div_ceil(b) as u64;
        if *steps.get_or_insert(per_epoch) != per_epoch {
            bail!(
                "{}: {per_epoch} steps an epoch, not the pack's",
                cfg.source.display()
            );
        }
        let total = per_epoch * cfg.train.epochs as u64;
        let info = run::run_info(cfg, gcfg, data_dir, per_epoch)?;
        run::write_fixed_files(dir, data_dir, &info)?;
        let state = run::fresh_state(cfg);
        let sched = Schedule::new(
            cfg.peak_lr(),
            cfg.train.min_lr_frac,
            cfg.train.warmup_frac,
            total,
        );
        members.push(Member {
            cfg,
            dir: dir.clone(),
            teacherless,
            sched,
            window: Window::new(&state),
            metrics: Some(Metrics::open(dir, None)?),
            state,
            live: true,
            val_loss: None,
        });
    }
    let per_epoch = steps.context("a pack of no runs")?;
    let runs: Vec<Vec<(String, Tensor)>> = cfgs
        .iter()
        .map(|c| Ok(Gpt::init(gcfg, c.train.seed, &Device::Cpu)?.named_tensors()))
        .collect::<Result<_>>()?;
    let pack = Gpt::pack(gcfg, &runs, &Device::Cpu)?;
    let hps: Vec<Hyper> = cfgs.iter().map(|c| Hyper::from_config(&c.train)).collect();
    let mut opt = PackAdamW::new(&pack.params, hps.clone())?;
    let stop = run::stop_flag()?;
    let bar = crate::progress::bar(per_epoch * cfgs[0].train.epochs as u64, "train pack");
    let epochs = cfgs[0].train.epochs as u64;
    let mut ending = Ending::Done;
    // The pack's throughput, all runs' tokens together, from the end of its first step.
    let (mut first, mut tokens_after) = (None::<Instant>, 0usize);
    'run: while members[0].state.epoch < epochs {
        let parts: Vec<Vec<batch::Part>> = members
            .iter()
            .map(|m| {
                let t = &m.cfg.train;
                batch::epoch_parts(cache.train.len(), t, &m.teacherless, &vocab, m.state.epoch)
            })
            .collect();
        while members[0].state.batch < per_epoch {
            if opts.max_steps.is_some_and(|s| members[0].state.step >= s)
                || stop.load(Ordering::Relaxed)
            {
                ending = if stop.load(Ordering::Relaxed) {
                    Ending::Interrupted
                } else {
                    Ending::MaxSteps
                };
                for (r, m) in members.iter_mut().enumerate().filter(|(_, m)| m.live) {
                    with_loop(&pack, &opt, r, hps[r], m, |lp| lp.checkpoint())?;
                }
                break 'run;
            }
            let start = members[0].state.batch as usize * b;
            let t0 = Instant::now();
            let batches: Vec<Batch> = parts
                .iter()
                .map(|p| {
                    let chunk = &p[start..(start + b).min(p.len())];
                    batch::make(&cache.train, chunk, vocab.dummy_id(), &Device::Cpu)
                })
                .collect::<candle_core::Result<_>>()?;
            let inputs: Vec<RunBatch> = batches
                .iter()
                .map(|b| RunBatch {
                    ids: &b.ids,
                    pos: &b.pos,
                    lens: &b.lens,
                    rows: &b.rows,
                    targets: &b.targets,
                })
                .collect();
            let losses = pack.pack_losses(&inputs)?;
            let grads = losses.sum_all()?.backward()?;
            let lrs: Vec<f64> = members.iter().map(|m| m.sched.lr(m.state.step)).collect();
            let live: Vec<bool> = members.iter().map(|m| m.live).collect();
            let norms = opt.step(&pack.params, &grads, &lrs, &live)?;
            let losses = losses.to_vec1::<f32>()?;
            if first.is_some() {
                tokens_after += batches.iter().map(|b| b.tokens).sum::<usize>();
            }
            first.get_or_insert_with(Instant::now);
            for (r, m) in members.iter_mut().enumerate() {
                let loss = losses[r] as f64;
                if m.live && !loss.is_finite() {
                    m.live = false;
                    markers::failed(
                        &m.dir,
                        &format!(
                            "the training loss is {loss} at epoch {}; the run stopped in its pack, and the last good checkpoint is kept in {} (lower train.lr?)",
                            m.state.epoch + 1,
                            m.dir.display()
                        ),
                    );
                }
                let tokens = run::account(&mut m.state, &gcfg, &batches[r..=r], t0);
                if !m.live {
                    continue;
                }
                m.state.window_loss += loss;
                m.state.window_steps += 1;
                m.window.tokens += tokens;
                if m.state.step.is_multiple_of(m.cfg.train.log_every) {
                    let metrics = m.metrics.as_mut().context("the run's logs")?;
                    m.window
                        .log((&mut m.state, metrics), lrs[r], norms[r], None, &bar)?;
                }
                let every = m.cfg.train.checkpoint_every;
                if every > 0 && m.state.step.is_multiple_of(every) {
                    with_loop(&pack, &opt, r, hps[r], m, |lp| lp.checkpoint())?;
                }
            }
            bar.set_position(members[0].state.step);
        }
        for (r, m) in members.iter_mut().enumerate() {
            m.state.epoch += 1;
            m.state.batch = 0;
            if !m.live {
                continue;
            }
            let last = m.state.epoch >= epochs;
            if !last && !m.state.epoch.is_multiple_of(m.cfg.eval.every as u64) {
                with_loop(&pack, &opt, r, hps[r], m, |lp| lp.checkpoint())?;
                continue;
            }
            let cfg = m.cfg;
            let v = with_loop(&pack, &opt, r, hps[r], m, |lp| {
                run::evaluate(lp, cfg, data, cache, last)
            })?;
            m.val_loss = Some(v);
        }
    }
    bar.finish_and_clear();
    let rate = first.map_or(0.0, |t| {
        tokens_after as f64 / t.elapsed().as_secs_f64().max(1e-9)
    });
    eprintln!("pack of {}: {rate:.0} tokens/s in all", cfgs.len());
    let mut out = Vec::new();
    for m in members {
        if ending == Ending::Done && m.live {
            write_atomic(
                &m.dir.join(DONE),
                (serde_json::to_string_pretty(&m.state)? + "\n").as_bytes(),
            )?;
        }
        out.push(Outcome {
            ending,
            run_dir: m.dir.clone(),
            info: crate::rundir::read_run_info(&m.dir)?,
            state: m.state,
            // The pack's, all runs together.
            tokens_per_s: rate,
            val_loss: m.val_loss,
        });
    }
    Ok(out)
}

/// `f` on run r's `Loop`: its own model and optimizer as the run alone would hold them, its
/// state and logs lent for the call (an evaluation, a checkpoint).
fn with_loop<T>(
    pack: &Gpt,
    opt: &PackAdamW,
    r: usize,
    hp: Hyper,
    m: &mut Member,
    f: impl FnOnce(&mut Loop) -> Result<T>,
) -> Result<T> {
    let (model, mut o) = alone(pack, opt, r, hp)?;
    let dir = m.dir.clone();
    let mut lp = Loop {
        run_dir: &dir,
        model: &model,
        opt: &mut o,
        state: std::mem::take(&mut m.state),
        metrics: m.metrics.take().context("the run's logs")?,
    };
    let out = f(&mut lp);
    m.state = lp.state;
    m.metrics = Some(lp.metrics);
    out
}
