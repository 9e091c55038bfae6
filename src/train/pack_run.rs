//! Training a pack (SPEC §8 Revision, packs): N runs of one shape as one model, every step one
//! forward and backward for all runs' own batches and one optimizer pass, while each run keeps
//! its own directory, schedule, logs, checkpoints, evaluations and `DONE`, byte for byte those
//! of the run alone on the CPU in fp32. A run whose loss goes non-finite stops alone.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{Device, Tensor};

use crate::config::Config;
use crate::dataset::{self, DataDir};
use crate::fsutil::write_atomic;
use crate::model::pack::RunBatch;
use crate::model::{Gpt, GptConfig, Kernels, profile};
use crate::rundir::checkpoint::{self, MODEL, TrainerState};
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
    /// Continue each run from its latest checkpoint where it has one (fresh where it has
    /// none, left as it is where it is DONE).
    pub resume: bool,
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
    let mut names: Vec<&str> = cfgs.iter().map(|c| c.name.as_str()).collect();
    names.sort();
    if names.windows(2).any(|w| w[0] == w[1]) {
        bail!("a pack's runs need distinct names (the run directories)");
    }
    Ok(())
}

/// Train the runs of `opts` as one pack on the CPU. With `resume`, each run continues from its
/// latest checkpoint: runs at one step train as one pack, runs at different steps (a `kill -9`
/// between two runs' checkpoints, a run that failed alone) as one pack per step in turn, a
/// lone run and a DONE one as `lab train --resume` would. Returns the outcomes in the runs'
/// order, of the runs trained before a signal stopped the call.
pub fn train_pack(opts: PackOptions) -> Result<Vec<Outcome>> {
    let cfgs: Vec<&Config> = opts.configs.iter().collect();
    refuse(&cfgs)?;
    let data_dir = dataset::default_dir(cfgs[0]);
    dataset::ensure(cfgs[0], &data_dir, false)?;
    let data = DataDir::open(&data_dir)?;
    let cache = tokens::load_or_build(&data)?;
    // The step each run starts at (None: DONE, trained alone to say so).
    let mut groups: BTreeMap<Option<u64>, Vec<usize>> = BTreeMap::new();
    for (i, (cfg, dir)) in cfgs.iter().zip(&opts.outs).enumerate() {
        let resume = opts.resume && checkpoint::exists(dir);
        if resume && dir.join(DONE).exists() {
            groups.entry(None).or_default().push(i);
            continue;
        }
        run::prepare_run_dir(cfg, dir, resume, false)?;
        let step = if resume {
            checkpoint::latest(dir)?.1.step
        } else {
            0
        };
        groups.entry(Some(step)).or_default().push(i);
    }
    let packs = groups.iter().filter(|(s, g)| s.is_some() && g.len() > 1);
    if groups.len() > 1 {
        eprintln!(
            "the runs stand at {} different steps: {} packs in turn, {} runs alone",
            groups.keys().flatten().count(),
            packs.count(),
            groups
                .iter()
                .filter(|(s, g)| s.is_none() || g.len() == 1)
                .map(|(_, g)| g.len())
                .sum::<usize>()
        );
    }
    let mut out: Vec<(usize, Outcome)> = Vec::new();
    for (step, group) in groups {
        if step.is_some() && group.len() > 1 {
            let mine: Vec<&Config> = group.iter().map(|&i| cfgs[i]).collect();
            let dirs: Vec<PathBuf> = group.iter().map(|&i| opts.outs[i].clone()).collect();
            let world = World {
                dir: &data_dir,
                data: &data,
                cache: &cache,
            };
            let done = pack_in(opts.max_steps, &mine, &dirs, step != Some(0), &world)?;
            out.extend(group.iter().copied().zip(done));
        } else {
            for &i in &group {
                let o = run::train(run::Options {
                    config: cfgs[i].clone(),
                    out: Some(opts.outs[i].clone()),
                    resume: step != Some(0),
                    device: Device::Cpu,
                    max_steps: opts.max_steps,
                    takeover: false,
                    peak: None,
                    kernels: None,
                })?;
                out.push((i, o));
            }
        }
        if out.iter().any(|(_, o)| o.ending == Ending::Interrupted) {
            break;
        }
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, o)| o).collect())
}

/// The world a pack's runs share: its data directory, opened, and its token cache.
struct World<'a> {
    dir: &'a Path,
    data: &'a DataDir,
    cache: &'a tokens::TokenCache,
}

/// One pack of runs at one step (fresh, or each from its checkpoint), holding their markers.
fn pack_in(
    max_steps: Option<u64>,
    cfgs: &[&Config],
    dirs: &[PathBuf],
    resume: bool,
    world: &World,
) -> Result<Vec<Outcome>> {
    for dir in dirs {
        markers::acquire(dir, false)?;
    }
    let result = train_in(max_steps, cfgs, dirs, resume, world);
    for dir in dirs {
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
    max_steps: Option<u64>,
    cfgs: &[&Config],
    dirs: &[PathBuf],
    resume: bool,
    world: &World,
) -> Result<Vec<Outcome>> {
    let World {
        dir: data_dir,
        data,
        cache,
    } = *world;
    let gcfg = GptConfig::new(cfgs[0], data.vocab().n_tokens());
    let vocab = data.vocab();
    let b = cfgs[0].train.batch_size as usize;
    let mut members = Vec::new();
    let mut steps = None;
    // Each run's tensors and, resumed, its checkpoint's directory.
    let mut starts = Vec::new();
    for (cfg, dir) in cfgs.iter().zip(dirs) {
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
        let (state, info) = if resume {
            let (ck, state, info) = run::resume_point(cfg, dir, info)?;
            let model = Gpt::load(gcfg, &ck.join(MODEL), &Device::Cpu)?;
            starts.push((model.named_tensors(), Some(ck)));
            (state, info)
        } else {
            let model = Gpt::init(gcfg, cfg.train.seed, &Device::Cpu)?;
            starts.push((model.named_tensors(), None));
            (run::fresh_state(cfg), info)
        };
        run::write_fixed_files(dir, data_dir, &info)?;
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
            metrics: Some(Metrics::open(dir, resume.then_some(state.step))?),
            state,
            live: true,
            val_loss: None,
        });
    }
    let per_epoch = steps.context("a pack of no runs")?;
    let runs: Vec<Vec<(String, Tensor)>> = starts.iter().map(|s| s.0.clone()).collect();
    let pack = Gpt::pack(gcfg, &runs, &Device::Cpu)?;
    let hps: Vec<Hyper> = cfgs.iter().map(|c| Hyper::from_config(&c.train)).collect();
    let mut opt = PackAdamW::new(&pack.params, hps.clone())?;
    for (r, (_, ck)) in starts.iter().enumerate() {
        if let Some(ck) = ck {
            let step = members[r].state.step;
            opt.load_run(r, run::optimizer_state(ck)?, step)
                .with_context(|| run::mismatch(ck))?;
        }
    }
    let stop = run::stop_flag()?;
    let bar = crate::progress::bar(per_epoch * cfgs[0].train.epochs as u64, "train pack");
    bar.set_position(members[0].state.step);
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
            if max_steps.is_some_and(|s| members[0].state.step >= s) || stop.load(Ordering::Relaxed)
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
            let span = profile::span("step/batch");
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
            drop(span);
            let span = profile::span("step/forward");
            let losses = pack.pack_losses(&inputs)?;
            drop(span);
            let span = profile::span("step/backward");
            let grads = losses.sum_all()?.backward()?;
            drop(span);
            let lrs: Vec<f64> = members.iter().map(|m| m.sched.lr(m.state.step)).collect();
            let live: Vec<bool> = members.iter().map(|m| m.live).collect();
            let span = profile::span("step/optimizer");
            let norms = opt.step(&pack.params, &grads, &lrs, &live)?;
            drop(span);
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
    if let Some(table) = profile::report() {
        eprint!("{table}");
    }
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
