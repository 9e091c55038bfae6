//! The commands: argument structs (clap) and the thin glue that calls into the library.
//! Nothing here computes; it loads, dispatches and prints.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::dataset::{self, DataDir, Outcome};
use crate::eval::{self, decode::Decode};
use crate::rundir::Exit;
use crate::train::run::{self, Ending};

#[derive(Parser, Debug)]
#[command(
    name = "lab",
    version,
    about = "A lab for the science of machine creativity"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Build the conceptual graph, the eval set, the holdout and the training set.
    Data {
        /// The experiment config (TOML).
        #[arg(long)]
        config: PathBuf,
        /// The data directory itself [default: data/<name>-<config hash>/].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace a directory built from a different config.
        #[arg(long)]
        force: bool,
        /// Override a config value, validated as the file is: --set train.lr=1e-3 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Summarise a data directory: graph, labels, eval grid, path lengths, holdout check.
    Inspect {
        /// The data directory.
        dir: PathBuf,
    },
    /// Train a GPT-2 on the config's data (built or reused as `lab data` does).
    Train {
        /// The experiment config (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Continue from the run directory's latest checkpoint.
        #[arg(long)]
        resume: bool,
        /// auto, cpu, cuda or cuda:N; auto prefers CUDA when built in and present.
        #[arg(long, default_value = "auto")]
        device: String,
        /// The run directory itself [default: checkpoints/<name>/].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Stop after this many optimizer steps in all, with a checkpoint.
        #[arg(long)]
        max_steps: Option<u64>,
        /// Take over a run directory held by a trainer on another host that is gone.
        #[arg(long)]
        takeover: bool,
        /// Peak FLOP/s for MFU [default: measured on the CPU, a data-sheet table on CUDA].
        #[arg(long, value_parser = positive_flops)]
        peak: Option<f64>,
        /// Override a config value, validated as the file is: --set train.lr=1e-3 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Decode and score the eval set with a checkpoint of a run.
    Eval {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// The checkpoint at the end of this epoch.
        #[arg(long, conflicts_with = "last")]
        epoch: Option<u64>,
        /// The latest checkpoint (the default).
        #[arg(long)]
        last: bool,
        #[command(flatten)]
        sampling: SampleArgs,
        #[arg(long, default_value = "auto")]
        device: String,
    },
    /// Score answers from any source against a data directory's eval set.
    Score {
        /// The data directory [default: the --run's].
        #[arg(long, required_unless_present = "run")]
        data: Option<PathBuf>,
        /// Score with this run's weights ([eval] alpha_*, gamma, coverage_k) and its data.
        #[arg(long, conflicts_with = "config")]
        run: Option<PathBuf>,
        /// Score with this config's weights ([eval] alpha_*, gamma, coverage_k).
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        weights: WeightArgs,
        /// JSONL answers, one `{"id": …, "output": "…"}` a line.
        #[arg(long, required_unless_present = "prompts")]
        answers: Option<PathBuf>,
        /// Allow several answers per id and score them as sets.
        #[arg(long)]
        sets: bool,
        /// Write the eval queries as plain-text prompts instead (to --out or stdout).
        #[arg(long, conflicts_with = "answers")]
        prompts: bool,
        /// Where to write [default: ANSWERS with .scored.jsonl].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Sweeps of many runs: plan, run (locally or on Slurm), status, collect.
    #[command(subcommand)]
    Sweep(SweepCommand),
    /// The paper's figures (SVG and PNG, with their CSVs and report.md) from a sweep.
    Report {
        /// A sweep directory (checkpoints/<sweep>) or its results.csv.
        input: PathBuf,
        /// Where to write [default: <sweep dir>/report].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Ask a trained model one query and check its answers.
    Query {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// The query, `U V [ I… ] [ X… ]`, for example "AAA QRS [ c ] [ x ]".
        query: String,
        /// The checkpoint at the end of this epoch [default: the latest].
        #[arg(long)]
        epoch: Option<u64>,
        #[command(flatten)]
        sampling: SampleArgs,
        #[arg(long, default_value = "auto")]
        device: String,
    },
}

// `run`'s Slurm options make it the largest variant; a command line is parsed once.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum SweepCommand {
    /// Resolve the runs, build their data, write the plan and print it.
    Plan {
        spec: PathBuf,
        /// Override a value of every run, after the spec's [set] (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Run every run that is not DONE; partial runs resume.
    Run {
        spec: PathBuf,
        /// Override a value of every run, after the spec's [set] (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        #[arg(long, value_enum)]
        backend: Backend,
        /// Local backend: runs at a time (the cores are shared among them).
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Local backend: threads per run (default: the cores over --jobs), for two sweeps
        /// sharing one machine.
        #[arg(long)]
        threads: Option<usize>,
        /// Slurm: the partition.
        #[arg(long)]
        partition: Option<String>,
        /// Slurm: generic resources per task, for example gpu:1.
        #[arg(long)]
        gres: Option<String>,
        /// Slurm: the time limit per task, for example 04:00:00.
        #[arg(long)]
        time: Option<String>,
        /// Slurm: tasks running at once (%N of --array).
        #[arg(long)]
        array_parallelism: Option<usize>,
        /// Slurm: the account to charge.
        #[arg(long)]
        account: Option<String>,
        /// Slurm: one more sbatch option, repeatable (for example --sbatch-arg=--qos=high).
        #[arg(long, allow_hyphen_values = true)]
        sbatch_arg: Vec<String>,
        /// Slurm: seconds before the time limit at which tasks checkpoint and requeue.
        #[arg(long, default_value_t = 300)]
        signal_secs: u32,
        /// The device each run trains on.
        #[arg(long, default_value = "auto")]
        device: String,
        /// Slurm: write the sbatch script and task list, and submit nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Each run as pending, running, done or failed.
    Status {
        spec: PathBuf,
        /// Override a value of every run, after the spec's [set] (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Write results.csv: one row per run per evaluated epoch. Given a results directory
    /// (a spec's `results`), collect its exported runs alone.
    Collect {
        spec: PathBuf,
        /// Override a value of every run, after the spec's [set] (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Copy every DONE run not yet exported to the spec's `results` directory.
    Export {
        spec: PathBuf,
        /// Override a value of every run, after the spec's [set] (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
}

/// Scoring weights for `lab score`; each flag overrides the --run's or --config's value, and
/// those the SPEC defaults.
#[derive(clap::Args, Debug, Clone)]
pub struct WeightArgs {
    /// Novelty weight of the hop count, α_h.
    #[arg(long)]
    alpha_hops: Option<f64>,
    /// Novelty weight of label rarity, α_r.
    #[arg(long)]
    alpha_rarity: Option<f64>,
    /// Utility weight of inclusions, α_I.
    #[arg(long)]
    alpha_include: Option<f64>,
    /// Utility weight of exclusions, α_X.
    #[arg(long)]
    alpha_exclude: Option<f64>,
    /// With --sets: CREATE's patience γ for the set score s(S).
    #[arg(long)]
    gamma: Option<f64>,
    /// With --sets: coverage counts valid paths of at most h + k hops.
    #[arg(long)]
    coverage_k: Option<u32>,
}

/// How `lab eval` and `lab query` choose each next token.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeMode {
    Greedy,
    Sample,
}

/// Where `lab sweep run` runs a sweep's runs.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// On this machine, `--jobs` at a time.
    Local,
    /// As a Slurm job array, with a collect job after it.
    Slurm,
}

/// Sampling flags shared by `lab eval` and `lab query`.
#[derive(clap::Args, Debug, Clone)]
pub struct SampleArgs {
    /// Answers per query; more than one decodes by sampling.
    #[arg(long, default_value_t = 1)]
    samples: usize,
    /// [default: greedy for one answer, sample for several].
    #[arg(long, value_enum)]
    decode: Option<DecodeMode>,
    #[arg(long, default_value_t = 1.0)]
    temperature: f64,
    /// Keep the k most likely tokens (0: all).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Keep the most likely tokens up to this probability mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Sampling seed: the same seed gives the same samples.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// CREATE's patience γ for the set score s(S).
    #[arg(long, default_value_t = 0.9)]
    gamma: f64,
    /// Coverage counts valid paths of at most h + k hops.
    #[arg(long, default_value_t = 2)]
    coverage_k: u32,
}

impl SampleArgs {
    fn settings(&self, cfg: &Config) -> Result<eval::Settings> {
        if self.samples == 0 {
            anyhow::bail!("--samples: must be at least 1");
        }
        if !(self.temperature.is_finite() && self.temperature > 0.0) {
            anyhow::bail!("--temperature: must be > 0, got {}", self.temperature);
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            anyhow::bail!("--top-p: must be in (0, 1], got {}", self.top_p);
        }
        if !(0.0..=1.0).contains(&self.gamma) {
            anyhow::bail!("--gamma: must be in [0, 1], got {}", self.gamma);
        }
        let mut s = eval::Settings::greedy(cfg);
        s.samples = self.samples;
        s.seed = self.seed;
        s.gamma = self.gamma;
        s.coverage_k = self.coverage_k;
        // Several answers from a hash-conditioned model: greedy, each after its own prefix.
        let sample = match self.decode {
            Some(d) => d == DecodeMode::Sample,
            None => self.samples > 1 && s.hash_prefix == 0,
        };
        if sample {
            s.decode = Decode::Sample {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
            };
        }
        Ok(s)
    }

    /// A file-name suffix naming the decoding, empty for greedy single answers.
    fn suffix(&self, s: &eval::Settings) -> String {
        match s.decode {
            Decode::Greedy if s.samples == 1 => String::new(),
            Decode::Greedy => format!(".greedy-k{}", s.samples),
            Decode::Sample {
                temperature,
                top_k,
                top_p,
            } => {
                format!(
                    ".sample-k{}-t{temperature}-topk{top_k}-topp{top_p}-seed{}",
                    s.samples, s.seed
                )
            }
        }
    }
}

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Data {
            config,
            out,
            force,
            set,
        } => {
            let cfg = Config::load_with(&config, &overrides(&set)?)?;
            let dir = out.unwrap_or_else(|| dataset::default_dir(&cfg));
            let (m, outcome) = dataset::ensure(&cfg, &dir, force)?;
            let verb = match outcome {
                Outcome::Built => "built",
                Outcome::Reused => "reused",
            };
            println!(
                "{verb} {}: {} nodes, {} edges, {} eval queries, {} training examples ({} rejections)",
                dir.display(),
                m.counts.nodes,
                m.counts.edges,
                m.counts.eval_queries,
                m.counts.train_examples,
                m.rejections.no_path
            );
        }
        Command::Inspect { dir } => {
            let data = DataDir::open(&dir)?;
            print!("{}", dataset::inspect::summary(&data)?);
        }
        Command::Train {
            config,
            resume,
            device,
            out,
            max_steps,
            set,
            takeover,
            peak,
        } => {
            let cfg = Config::load_with(&config, &overrides(&set)?)?;
            let device = crate::device::parse(&device)?;
            eprintln!("training {} on {}", cfg.name, crate::device::name(&device));
            let o = run::train(run::Options {
                config: cfg,
                out,
                resume,
                device,
                max_steps,
                takeover,
                peak,
            })?;
            print!("{}", train_summary(&o));
            if o.ending == Ending::Interrupted {
                return Ok(Exit::Interrupted);
            }
        }
        Command::Sweep(cmd) => return run_sweep(cmd),
        Command::Report { input, out } => {
            let r = crate::report::write(&input, out.as_deref())?;
            println!("{}", r.display());
        }
        Command::Eval {
            run,
            epoch,
            last: _,
            sampling,
            device,
        } => run_eval(&run, epoch, &sampling, &device)?,
        Command::Score {
            data,
            run,
            config,
            weights,
            answers,
            sets,
            prompts,
            out,
        } => {
            let (data, scoring) = score_settings(data, run, config, &weights)?;
            run_score(&data, answers, sets, prompts, out, &scoring)?
        }
        Command::Query {
            run,
            query,
            epoch,
            sampling,
            device,
        } => run_query(&run, &query, epoch, &sampling, &device)?,
    }
    Ok(Exit::Ok)
}

fn run_sweep(cmd: SweepCommand) -> Result<Exit> {
    use crate::sweep::{self, State, Sweep};
    match cmd {
        SweepCommand::Plan { spec, set } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let plan = s.plan()?;
            print!("{}", sweep::plan_table(&plan));
            println!(
                "{} runs; plan written to {}",
                plan.len(),
                s.dir.join("plan.json").display()
            );
        }
        SweepCommand::Run {
            spec,
            set,
            backend,
            jobs,
            threads,
            partition,
            gres,
            time,
            array_parallelism,
            account,
            sbatch_arg,
            signal_secs,
            device,
            dry_run,
        } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let o = sweep::slurm::Options {
                partition,
                gres,
                time,
                array_parallelism,
                account,
                sbatch_args: sbatch_arg,
                signal_secs,
                device,
                dry_run,
                overrides: set,
            };
            if backend == Backend::Slurm {
                o.validate()?;
            }
            let plan = s.plan()?;
            if backend == Backend::Local {
                let todo = s.pending(&plan);
                let t = sweep::local::run(&todo, jobs, threads, &o.device, &|row| s.export(row))?;
                println!(
                    "{}: {} runs done in this call, {} failed, {} interrupted; `lab sweep status {}` for all",
                    s.spec.name,
                    t.done.len(),
                    t.failed.len(),
                    t.interrupted.len(),
                    spec.display()
                );
                if !t.failed.is_empty() {
                    return Ok(Exit::RunsFailed);
                }
            } else {
                match sweep::slurm::submit(&s, &plan, &o)? {
                    None => println!("{}: every run is DONE; nothing to submit", s.spec.name),
                    Some(sub) if dry_run => {
                        println!(
                            "wrote {} for {} runs (not submitted)",
                            sub.script.display(),
                            sub.tasks
                        );
                    }
                    Some(sub) => {
                        println!(
                            "submitted {} runs as job array {} ({})",
                            sub.tasks,
                            sub.array_job,
                            sub.script.display()
                        );
                        println!("collect job {} runs after it (afterany)", sub.collect_job);
                        println!(
                            "watch: squeue -j {},{}   |   lab sweep status {}",
                            sub.array_job,
                            sub.collect_job,
                            spec.display()
                        );
                        println!(
                            "logs:  {}/logs/ and each run's train.log",
                            sub.dir.display()
                        );
                    }
                }
            }
        }
        SweepCommand::Status { spec, set } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let squeue = sweep::squeue_jobs();
            let mut counts = std::collections::BTreeMap::new();
            for p in &s.spec.runs {
                let dir = s.run_dir(&p.name);
                // A run exported to the spec's results is done, even on a fresh clone that has
                // no run directory.
                let exported = s
                    .spec
                    .results
                    .as_ref()
                    .filter(|r| sweep::export::exported(r, &p.name));
                let st = match (sweep::state(&dir, &squeue), exported) {
                    (State::Pending { .. } | State::Failed { .. }, Some(_)) => State::Done,
                    (st, _) => st,
                };
                *counts.entry(st.label()).or_insert(0) += 1;
                let detail = match &st {
                    State::Done => exported
                        .map(|r| format!("exported to {}", r.display()))
                        .unwrap_or_default(),
                    State::Running(who) => who.clone(),
                    State::Pending { step } => {
                        if *step > 0 {
                            format!("checkpoint at step {step}")
                        } else {
                            String::new()
                        }
                    }
                    State::Failed { log, error } => format!("{}: {error}", log.display()),
                };
                println!("{:8} {}  {detail}", st.label(), p.name);
            }
            let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{v} {k}")).collect();
            println!("{}: {}", s.spec.name, summary.join(", "));
        }
        SweepCommand::Export { spec, set } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let Some(res) = &s.spec.results else {
                anyhow::bail!("{}: results: not set, nothing to export to", spec.display());
            };
            let plan = s.plan()?;
            let n = s.export_done(&plan)?;
            println!("{}: {n} runs exported", res.display());
        }
        SweepCommand::Collect { spec, .. } if spec.is_dir() => {
            let c = sweep::collect::collect_results(&spec)?;
            for (run, why) in &c.left_out {
                eprintln!("left out {run}: {why}");
            }
            println!("{}: {} rows", c.path.display(), c.rows);
        }
        SweepCommand::Collect { spec, set } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let plan = s.plan()?;
            let c = sweep::collect::collect(&s, &plan)?;
            for (run, why) in &c.left_out {
                eprintln!("left out {run}: {why}");
            }
            println!(
                "{}: {} rows from {} runs ({} left out)",
                c.path.display(),
                c.rows,
                plan.len() - c.left_out.len(),
                c.left_out.len()
            );
        }
    }
    Ok(Exit::Ok)
}

/// `--peak`: a positive, finite FLOP/s figure such as 9.89e14.
fn positive_flops(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "`{s}` is not a positive number of FLOP/s, for example 9.89e14"
        )),
    }
}

/// The `--set KEY=VALUE` overrides, each checked alone first.
fn overrides(set: &[String]) -> Result<Vec<crate::config::Override>> {
    Ok(set
        .iter()
        .map(|s| crate::config::Override::parse(s))
        .collect::<Result<_, _>>()?)
}

fn which(epoch: Option<u64>) -> eval::Which {
    epoch.map_or(eval::Which::Last, eval::Which::Epoch)
}

fn run_eval(run_dir: &Path, epoch: Option<u64>, sampling: &SampleArgs, device: &str) -> Result<()> {
    let device = crate::device::parse(device)?;
    let r = eval::Run::open(run_dir, which(epoch), &device)?;
    let settings = sampling.settings(&r.cfg)?;
    let queries = r.data.eval()?;
    let t0 = std::time::Instant::now();
    let results = eval::evaluate(&r.model, &r.data, &queries, &settings)?;
    let secs = t0.elapsed().as_secs_f64();
    let summary = eval::summarise(&results);
    let stem = r
        .dir
        .join("eval")
        .join(format!("{}{}", r.name, sampling.suffix(&settings)));
    let path = eval::write(&stem, &results, &summary)?;
    let tokens: usize = results
        .iter()
        .flat_map(|a| &a.answers)
        .map(|s| s.output.split_whitespace().count() + 1)
        .sum();
    print!(
        "{}",
        eval::report(
            &format!(
                "{} @ {} ({:?}, {} per query): {}",
                r.dir.display(),
                r.name,
                settings.decode,
                settings.samples,
                path.display()
            ),
            &summary
        )
    );
    if settings.samples > 1 {
        let distinct: usize = results.iter().map(|a| a.distinct_valid()).sum();
        println!(
            "  distinct valid paths per query: {:.3}",
            distinct as f64 / results.len().max(1) as f64
        );
    }
    println!(
        "  decoded {} queries in {secs:.2} s: {:.0} generated tokens/s",
        queries.len(),
        tokens as f64 / secs
    );
    if let Some(table) = crate::model::profile::report() {
        eprint!("{table}");
    }
    Ok(())
}

/// The data directory and scoring weights of `lab score`: the run's or config's `[eval]`
/// values, each overridden by its flag, else the SPEC defaults.
fn score_settings(
    data: Option<PathBuf>,
    run: Option<PathBuf>,
    config: Option<PathBuf>,
    w: &WeightArgs,
) -> Result<(PathBuf, eval::answers::Scoring)> {
    let (cfg, source, run_data) = match (&run, &config) {
        (Some(r), _) => {
            let p = r.join(crate::rundir::CONFIG);
            let data = crate::rundir::read_run_info(r)?.data_dir;
            (Some(Config::load(&p)?), p.display().to_string(), Some(data))
        }
        (None, Some(c)) => (Some(Config::load(c)?), c.display().to_string(), None),
        (None, None) => (None, "the SPEC defaults".to_string(), None),
    };
    let e = cfg.map(|c| c.eval).unwrap_or_default();
    let mut s = eval::answers::Scoring {
        alphas: eval::score::Alphas::of(&e),
        gamma: e.gamma,
        coverage_k: e.coverage_k,
        source,
    };
    let flags = [
        (&mut s.alphas.hops, w.alpha_hops),
        (&mut s.alphas.rarity, w.alpha_rarity),
        (&mut s.alphas.include, w.alpha_include),
        (&mut s.alphas.exclude, w.alpha_exclude),
        (&mut s.gamma, w.gamma),
    ];
    let mut any = w.coverage_k.is_some();
    for (slot, flag) in flags {
        if let Some(v) = flag {
            *slot = v;
            any = true;
        }
    }
    if let Some(k) = w.coverage_k {
        s.coverage_k = k;
    }
    if any {
        s.source.push_str(", with flags");
    }
    let data = data
        .or(run_data)
        .ok_or_else(|| anyhow::anyhow!("--data: needed without --run"))?;
    Ok((data, s))
}

fn run_score(
    data: &Path,
    answers: Option<PathBuf>,
    sets: bool,
    prompts: bool,
    out: Option<PathBuf>,
    scoring: &eval::answers::Scoring,
) -> Result<()> {
    let d = DataDir::open(data)?;
    if prompts {
        let text = eval::answers::prompts(&d)?;
        match out {
            Some(p) => crate::fsutil::write_atomic(&p, text.as_bytes())?,
            None => print!("{text}"),
        }
        return Ok(());
    }
    let answers = answers.expect("clap requires --answers");
    let queries = d.eval()?;
    let scored = eval::answers::score_file(&d, &queries, &answers, sets, scoring)?;
    for p in &scored.problems {
        eprintln!("skipped {p}");
    }
    // The output stem: --out without its .jsonl, or ANSWERS with .scored in place of .jsonl.
    let stem = match out {
        Some(o) => o.with_extension(""),
        None => answers.with_extension("scored"),
    };
    let path = eval::write(&stem, &scored.results, &scored.summary)?;
    println!("{}", scoring.describe());
    print!(
        "{}",
        eval::report(
            &format!(
                "{}: {} answers to {} of {} queries: {}",
                answers.display(),
                scored.answers,
                scored.results.len(),
                scored.queries,
                path.display()
            ),
            &scored.summary
        )
    );
    if !scored.problems.is_empty() {
        println!(
            "  {} lines skipped (listed on stderr)",
            scored.problems.len()
        );
    }
    Ok(())
}

fn run_query(
    run_dir: &Path,
    text: &str,
    epoch: Option<u64>,
    sampling: &SampleArgs,
    device: &str,
) -> Result<()> {
    let device = crate::device::parse(device)?;
    let r = eval::Run::open(run_dir, which(epoch), &device)?;
    let g = &r.data.graph;
    let q = crate::dataset::example::parse_query(g, text)
        .map_err(|e| anyhow::anyhow!("query: {e:#}; the expected form is `U V [ I… ] [ X… ]`, for example \"{} {} [ a ] [ b ]\"", g.node_name(0), g.node_name(1)))?;
    let settings = sampling.settings(&r.cfg)?;
    let h_max = r.cfg.data.h_max_train;
    let mut searcher = crate::search::Searcher::new(g);
    let mut rng = crate::rng::stream(settings.seed, crate::rng::Purpose::Sampling, u64::MAX);
    let reference = searcher.shortest(&q, h_max, &mut rng);
    let eq = crate::dataset::evalset::EvalQuery {
        id: 0,
        hop: reference.as_ref().map_or(0, |p| p.hops() as u32),
        level: 1 + q.include.count_ones() + q.exclude.count_ones(),
        query: q,
        path: reference.clone().unwrap_or(crate::search::Path {
            nodes: vec![q.u],
            labels: vec![],
        }),
        n_paths: 0,
    };
    let results = eval::evaluate(&r.model, &r.data, std::slice::from_ref(&eq), &settings)?;
    println!(
        "query {}  ({} @ {}, {:?})",
        crate::dataset::example::prompt(g, &q),
        r.dir.display(),
        r.name,
        settings.decode
    );
    for (i, a) in results[0].answers.iter().enumerate() {
        let verdict = match a.error {
            None => format!(
                "valid, {} hops: novelty {:.3}, utility {:.1}, creativity {:.3}{}{}",
                a.hops.unwrap_or(0),
                a.novelty.unwrap_or(0.0),
                a.utility,
                a.creativity,
                if a.repeats_node {
                    ", repeats a node"
                } else {
                    ""
                },
                if a.is_reference {
                    ", the reference path"
                } else {
                    ""
                }
            ),
            Some(e) => format!(
                "invalid: {}{}",
                e.name(),
                a.edge_error
                    .map_or(String::new(), |d| format!(" ({})", d.describe()))
            ),
        };
        println!(
            "  answer {}: {}\n      {verdict}",
            i + 1,
            if a.output.is_empty() {
                "(empty)"
            } else {
                &a.output
            }
        );
    }
    if let Some(set) = &results[0].set {
        let items = eval::sets::items(&results[0].answers);
        let plain: Vec<eval::sets::Item> = items.iter().map(|(i, _)| i.clone()).collect();
        let g = eval::sets::greedy(&plain);
        println!(
            "set of {} answers: {} distinct valid paths, {} repeated answers; greedy order (CREATE, γ = {}):",
            set.answers, set.distinct_valid, set.repeats, settings.gamma
        );
        for (rank, (&i, &gain)) in g.order.iter().zip(&g.gains).enumerate() {
            println!(
                "  {}. {}  f = U·N = {:.3}, min distance {:.3}, contributes γ^{rank}·{gain:.3} = {:.3}",
                rank + 1,
                plain[i].key,
                plain[i].f,
                if plain[i].f > 0.0 {
                    gain / plain[i].f
                } else {
                    0.0
                },
                settings.gamma.powi(rank as i32) * gain
            );
        }
        let pat: Vec<String> = set
            .patience
            .iter()
            .map(|(g, v)| format!("γ={g}: {v:.3}"))
            .collect();
        println!(
            "  s(S) = {:.3}; patience curve {}",
            set.score,
            pat.join(", ")
        );
        println!(
            "  coverage: {} of the {} valid paths of at most {} hops = {:.4}",
            items
                .iter()
                .filter(|(_, p)| p.hops() as u32 <= eq.hop + settings.coverage_k)
                .count(),
            set.paths_within,
            eq.hop + settings.coverage_k,
            set.coverage
        );
    }
    match &reference {
        Some(p) => {
            let d = p.hops();
            let n = searcher.count_walks(&q, d as u32)[d];
            println!(
                "reference (a shortest valid path, by the lab's search): {}\n  {d} hops; {n} valid paths have exactly {d} hops",
                crate::dataset::example::path_text(g, p)
            );
        }
        None => println!("reference: no valid path of at most {h_max} hops (data.h_max_train)"),
    }
    Ok(())
}

fn train_summary(o: &run::Outcome) -> String {
    let s = &o.state;
    let m = &o.info.model;
    let what = match o.ending {
        Ending::Done => "done",
        Ending::AlreadyDone => "already done",
        Ending::MaxSteps => "stopped at --max-steps",
        Ending::Interrupted => "interrupted (checkpoint saved; continue with --resume)",
    };
    let mut out = format!(
        "{what}: {} after {} steps, {} epochs, {:.1} s of training\n",
        o.run_dir.display(),
        s.step,
        s.epoch,
        s.seconds
    );
    out += &format!(
        "  model: L={} E={} H={}, {} parameters ({} non-embedding), vocab {}\n",
        m.n_layer,
        m.n_embd,
        m.n_head,
        o.info.total_params,
        o.info.non_embedding_params,
        m.vocab_size
    );
    out += &format!(
        "  throughput: {:.0} tokens/s this call; {} tokens, {:.3e} FLOPs in all\n",
        o.tokens_per_s, s.tokens, s.flops
    );
    if let Some(v) = o.val_loss {
        out += &format!("  val/loss: {v:.4}\n");
    }
    if let Ok(text) = std::fs::read_to_string(crate::rundir::summary_path(&o.run_dir, s.epoch))
        && let Ok(summary) = serde_json::from_str::<eval::summary::Summary>(&text)
    {
        out += &eval::report(&format!("  evaluation after epoch {}:", s.epoch), &summary);
    }
    out
}
