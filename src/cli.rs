//! The commands: argument structs (clap) and the thin glue that calls into the library.
//! Nothing here computes; it loads, dispatches and prints.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::dataset::{self, DataDir, Outcome, evalset::Split};
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
    /// List the shipped configs and sweep specs, print one, or write one out to start from.
    Configs {
        /// A shipped config or sweep spec (with or without `.toml`); none: list them all.
        name: Option<String>,
        /// Write it here (a file, or a directory for NAME.toml) instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Replace an existing file at --out.
        #[arg(long)]
        force: bool,
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
        /// The kernels: fused (the lab's own: every op on the CPU, fp32 only; the optimizer on
        /// CUDA, until a GPU check has passed them) or composed (candle's ops)
        /// [default: fused on the CPU in fp32, composed elsewhere].
        #[arg(long, value_enum)]
        kernels: Option<crate::model::Kernels>,
        /// Override a config value, validated as the file is: --set train.lr=1e-3 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Train these configs' runs with --config's as one pack (repeatable): one model with a
        /// leading run dimension on the CPU in fp32, each run's files its own alone, into
        /// <out>/<name>/ [default: checkpoints/<name>/]. With --resume each run continues from
        /// its checkpoint where it has one (runs at different steps: one pack per step).
        #[arg(long, value_name = "CONFIG")]
        pack_with: Vec<PathBuf>,
    },
    /// Decode and score the eval set (or the tuning split) with a checkpoint of a run.
    Eval {
        /// The run directory.
        #[arg(long)]
        run: PathBuf,
        /// The queries: the eval set, or the tuning split (files named `<checkpoint>.tune*`),
        /// whose figures can be read without touching the eval queries.
        #[arg(long, value_enum, default_value = "eval")]
        split: Split,
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
        #[arg(long, conflicts_with = "table")]
        out: Option<PathBuf>,
        /// Print one of the study tables FINDINGS cite instead (depth-contrast, heads,
        /// unplaceable-bound, sets, grid, twins); nothing is written.
        #[arg(long, value_name = "NAME")]
        table: Option<String>,
        /// The table's bucket (`1M`, `100k`; for `sets`, the sweep-name part `100k`, `1m`).
        #[arg(long, default_value = "1M")]
        bucket: String,
        /// The table's sweeps, comma-separated: each depth's runs from the first that has it.
        #[arg(long, value_delimiter = ',')]
        sweeps: Vec<String>,
        /// For `--table twins`: a second study (its directory or results.csv), whose runs of
        /// the same config are compared with the first's.
        #[arg(long, value_name = "DIR", requires = "table")]
        with: Option<PathBuf>,
    },
    /// Check every lab kernel, forward and backward, against its definition at the shapes of
    /// real configs, on fresh random inputs: a table of relative errors; exit 1 on a failure.
    KernelCheck {
        /// The configs whose shapes to check (repeatable) [default: 1m-L4, 10m-L6, 100m-L8,
        /// fair-cpu].
        #[arg(long = "config")]
        configs: Vec<PathBuf>,
        /// The device the kernels run on: `cpu` (every kernel against its definition) or
        /// `cuda[:N]` (the kernels with a CUDA version against their CPU version).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// The inputs' seed [default: the clock, printed].
        #[arg(long)]
        seed: Option<u64>,
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
        /// Show the packs of at most N runs that `lab sweep run --pack N` would train.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
        pack: Option<u32>,
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
        /// Slurm: runs (or packs, with --pack) each array task trains side by side (N processes
        /// sharing the task's resources, one GPU with --gres gpu:1), for small models that
        /// cannot fill a GPU alone.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
        runs_per_task: u32,
        /// Slurm: CPUs per array task, shared equally among its trainers as their threads
        /// [default: the spec's [slurm] cpus_per_task, else one per run or pack of the task].
        #[arg(long)]
        cpus_per_task: Option<u32>,
        /// Slurm: start an MPS control daemon in each task, so that its trainers
        /// (--runs-per-task 2 or more) share the GPU's SMs instead of time-slicing it.
        #[arg(long)]
        mps: bool,
        /// Train runs that may share a pack (same shape, data, batch and steps) as packs of at
        /// most N: one process, one model with a leading run dimension, each run's files as
        /// alone (CPU, fp32). Runs that cannot pack train alone.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
        pack: u32,
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
        /// Slurm: the lab binary the tasks and the collect job run (for example a CUDA build
        /// on shared storage, which need not start here); default: this binary.
        #[arg(long)]
        lab_binary: Option<PathBuf>,
        /// Slurm: a shell line run in every task and in the collect job before the lab starts
        /// (`module load cuda/13.0`), repeatable, in order; after the spec's [slurm] setup.
        #[arg(long, allow_hyphen_values = true)]
        setup: Vec<String>,
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
    /// Rewrite a results directory's exported runs in the committed layout (docs/RESULTS.md):
    /// evaluation lines of metrics, per-epoch figures, and the answers of the last evaluation
    /// and of those its report reads; checked against its results.csv before anything changes.
    Slim { results: PathBuf },
    /// Fill the figures a committed run lacks (`tune/creativity` logged by later code) from the
    /// same run trained again: refused unless every figure and kept answer of the committed run
    /// is the retrained run's (figures within 1e-12 relative, as `rescore` allows).
    Refill {
        committed: PathBuf,
        retrained: PathBuf,
    },
    /// Re-score every committed greedy answer file of a results directory from its text, on
    /// worlds rebuilt from the runs' configs, and check each figure against results.csv.
    Rescore { results: PathBuf },
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
    /// Tokens generated at most per answer [default: the run's eval.max_new_tokens, else
    /// 2·h_max_train + 2]; the files gain a `.budget<B>` suffix.
    #[arg(long)]
    max_new_tokens: Option<u32>,
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
        if let Some(b) = self.max_new_tokens {
            let room = (cfg.model.n_positions as u64).saturating_sub(cfg.longest_prompt());
            if b == 0 || b as u64 > room {
                anyhow::bail!(
                    "--max-new-tokens: {b}: must be at least 1 and at most {room} (model.n_positions = {} less the longest prompt, {} tokens)",
                    cfg.model.n_positions,
                    cfg.longest_prompt()
                );
            }
            s.budget = b as usize;
        }
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

    /// A file-name suffix naming the decoding and a budget given by flag, empty for greedy
    /// single answers at the run's budget.
    fn suffix(&self, s: &eval::Settings) -> String {
        let budget = self
            .max_new_tokens
            .map_or(String::new(), |b| format!(".budget{b}"));
        let decoding = match s.decode {
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
        };
        decoding + &budget
    }
}

/// `lab kernel-check`: the table, and exit 1 when a row fails.
fn kernel_check(configs: Vec<PathBuf>, device: &str, seed: Option<u64>) -> Result<Exit> {
    let dev = crate::device::parse(device)?;
    let configs = if configs.is_empty() {
        ["1m-L4", "10m-L6", "100m-L8", "fair-cpu"]
            .map(PathBuf::from)
            .to_vec()
    } else {
        configs
    };
    let loaded = configs
        .iter()
        .map(|c| Ok((c.display().to_string(), Config::load(c)?)))
        .collect::<Result<Vec<_>>>()?;
    let seed = seed.unwrap_or_else(crate::model::check::fresh_seed);
    let rows = crate::model::check::check(&loaded, &dev, seed)?;
    print!("{}", crate::model::check::table(&rows));
    let failed = rows.iter().filter(|r| !r.ok()).count();
    println!(
        "{} of {} comparisons within tolerance on {} (inputs from --seed {seed})",
        rows.len() - failed,
        rows.len(),
        crate::device::name(&dev)
    );
    Ok(if failed > 0 {
        Exit::RunsFailed
    } else {
        Exit::Ok
    })
}

/// `lab data`: build or reuse a config's data directory and say what it holds.
fn data(config: &Path, out: Option<PathBuf>, force: bool, set: &[String]) -> Result<()> {
    let cfg = Config::load_with(config, &overrides(set)?)?;
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
    Ok(())
}

pub fn run(cli: Cli) -> Result<Exit> {
    match cli.command {
        Command::Data {
            config,
            out,
            force,
            set,
        } => data(&config, out, force, &set)?,
        Command::Configs { name, out, force } => match (name, out) {
            (None, _) => print!("{}", crate::shipped::listing()),
            (Some(n), None) => print!("{}", crate::shipped::text(&n)?),
            (Some(n), Some(out)) => {
                let path = crate::shipped::write_out(&n, &out, force)?;
                println!("wrote {}", path.display());
            }
        },
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
            kernels,
            pack_with,
        } if !pack_with.is_empty() => {
            if takeover || kernels.is_some() || peak.is_some() {
                anyhow::bail!(
                    "--pack-with: a pack trains on the fused CPU kernels; --takeover, --kernels and --peak are for a run alone"
                );
            }
            if !crate::device::parse(&device)?.is_cpu() && device != "auto" {
                anyhow::bail!(
                    "--pack-with: a pack trains on the CPU for now, not --device {device}"
                );
            }
            let set = overrides(&set)?;
            let configs = std::iter::once(&config)
                .chain(&pack_with)
                .map(|c| Ok(Config::load_with(c, &set)?))
                .collect::<Result<Vec<_>>>()?;
            let outs = configs
                .iter()
                .map(|c| match &out {
                    Some(o) => o.join(&c.name),
                    None => run::default_run_dir(c),
                })
                .collect();
            eprintln!("training a pack of {} runs on the CPU", configs.len());
            let done = crate::train::pack_run::train_pack(crate::train::pack_run::PackOptions {
                configs,
                outs,
                max_steps,
                resume,
            })?;
            for o in &done {
                print!("{}", train_summary(o));
            }
            if done.iter().any(|o| o.ending == Ending::Interrupted) {
                return Ok(Exit::Interrupted);
            }
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
            kernels,
            ..
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
                kernels,
            })?;
            print!("{}", train_summary(&o));
            if o.ending == Ending::Interrupted {
                return Ok(Exit::Interrupted);
            }
        }
        Command::Sweep(cmd) => return run_sweep(cmd),
        Command::Report {
            input,
            table: Some(name),
            bucket,
            sweeps,
            with,
            ..
        } => {
            let read = |p: &PathBuf| crate::report::read_csv(&crate::report::csv_of(p)?);
            let rows = read(&input)?;
            let other = with.as_ref().map(read).transpose()?;
            print!(
                "{}",
                crate::report::tables::table(&name, &rows, &bucket, &sweeps, other.as_deref())?
            );
        }
        Command::Report { input, out, .. } => {
            let r = crate::report::write(&input, out.as_deref())?;
            println!("{}", r.display());
        }
        Command::Eval {
            run,
            split,
            epoch,
            last,
            sampling,
            device,
        } => {
            let at = if last {
                eval::Which::Last
            } else {
                which(epoch)
            };
            let r = eval::Run::open(&run, at, &crate::device::parse(&device)?)?;
            let settings = sampling.settings(&r.cfg)?;
            print!(
                "{}",
                eval::evaluate_run(&r, &settings, split, &sampling.suffix(&settings))?
            );
            if let Some(table) = crate::model::profile::report() {
                eprint!("{table}");
            }
        }
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
            let o = eval::answers::Overrides {
                alpha_hops: weights.alpha_hops,
                alpha_rarity: weights.alpha_rarity,
                alpha_include: weights.alpha_include,
                alpha_exclude: weights.alpha_exclude,
                gamma: weights.gamma,
                coverage_k: weights.coverage_k,
            };
            let (data, scoring) = eval::answers::scoring(data, run, config, &o)?;
            if prompts {
                let text = eval::answers::prompts(&DataDir::open(&data)?)?;
                match out {
                    Some(p) => crate::fsutil::write_atomic(&p, text.as_bytes())?,
                    None => print!("{text}"),
                }
            } else {
                let answers = answers.expect("clap requires --answers");
                let (report, skipped) =
                    eval::answers::score_and_write(&data, &answers, sets, out, &scoring)?;
                for p in skipped {
                    eprintln!("skipped {p}");
                }
                print!("{report}");
            }
        }
        Command::KernelCheck {
            configs,
            device,
            seed,
        } => return kernel_check(configs, &device, seed),
        Command::Query {
            run,
            query,
            epoch,
            sampling,
            device,
        } => {
            let r = eval::Run::open(&run, which(epoch), &crate::device::parse(&device)?)?;
            print!(
                "{}",
                eval::query::ask(&r, &query, &sampling.settings(&r.cfg)?)?
            );
        }
    }
    Ok(Exit::Ok)
}

/// Submit a sweep's pending runs as a Slurm job array (or write its script, `--dry-run`), and
/// say how to follow it.
fn submit_slurm(
    s: &crate::sweep::Sweep,
    plan: &[crate::sweep::PlanRow],
    o: &crate::sweep::slurm::Options,
    spec: &Path,
) -> Result<()> {
    use crate::sweep;
    match sweep::slurm::submit(s, plan, o)? {
        None => println!(
            "{}: every run is DONE or exported; nothing to submit",
            s.spec.name
        ),
        Some(sub) if o.dry_run => {
            println!(
                "wrote {} for {} runs in {} array tasks (not submitted)",
                sub.script.display(),
                sub.tasks,
                sub.array_tasks
            );
        }
        Some(sub) => {
            println!(
                "submitted {} runs as job array {} of {} tasks ({})",
                sub.tasks,
                sub.array_job,
                sub.array_tasks,
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
    Ok(())
}

/// `lab sweep slim RESULTS`: the committed layout, keeping the answers its report reads.
fn slim(results: &Path) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (report, reads) =
        crate::report::findings::recording(|| crate::report::write(results, Some(tmp.path())));
    report?;
    let s = crate::sweep::slim::slim(results, &reads)?;
    println!(
        "{}: {} runs in the committed layout, {} answer files kept (each run's last evaluation and those its report reads at a common compute)",
        results.display(),
        s.runs,
        s.answers
    );
    Ok(())
}

/// `lab sweep rescore RESULTS`: exit 1 on a mismatch.
fn rescore(results: &Path) -> Result<Exit> {
    let work = tempfile::tempdir()?;
    let r = crate::sweep::rescore::rescore(results, work.path())?;
    for m in &r.mismatches {
        println!("MISMATCH {m}");
    }
    println!(
        "{}: {} answer files re-scored; of {} figures {} equal to the last digit, {} within {:e} relative, {} mismatches{}",
        results.display(),
        r.files,
        r.figures,
        r.exact,
        r.figures - r.exact - r.mismatches.len(),
        crate::sweep::rescore::CLOSE,
        r.mismatches.len(),
        match r.uncollected {
            0 => String::new(),
            n => format!("; {n} figures results.csv has no column for"),
        }
    );
    if !r.mismatches.is_empty() {
        return Ok(Exit::RunsFailed);
    }
    Ok(Exit::Ok)
}

fn run_sweep(cmd: SweepCommand) -> Result<Exit> {
    use crate::sweep::{self, Sweep};
    match cmd {
        SweepCommand::Plan { spec, set, pack } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let plan = s.plan()?;
            print!("{}", sweep::plan_table(&plan));
            if let Some(n) = pack {
                let rows: Vec<&sweep::PlanRow> = plan.iter().collect();
                let units = sweep::units_table(&s.units(&rows, n as usize)?);
                crate::fsutil::write_atomic(
                    &s.dir.join("plan.txt"),
                    (sweep::plan_table(&plan) + &units).as_bytes(),
                )?;
                print!("{units}");
            }
            for c in &s.spec.choices {
                println!("selected {}", c.line());
            }
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
            runs_per_task,
            pack,
            cpus_per_task,
            mps,
            account,
            sbatch_arg,
            signal_secs,
            device,
            dry_run,
            lab_binary,
            setup,
        } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            let o = sweep::slurm::Options {
                partition,
                gres,
                time,
                array_parallelism,
                runs_per_task: runs_per_task as usize,
                pack: pack as usize,
                cpus_per_task,
                mps,
                account,
                sbatch_args: sbatch_arg,
                signal_secs,
                device,
                dry_run,
                overrides: set,
                lab_binary,
                setup,
            }
            .with_spec(&s.spec);
            if backend == Backend::Slurm {
                o.validate()?;
            }
            if pack > 1 && !matches!(o.device.as_str(), "cpu" | "auto") {
                anyhow::bail!(
                    "--pack: a pack trains on the CPU for now, not --device {}",
                    o.device
                );
            }
            if pack > 1 && o.gres.as_deref().is_some_and(|g| g.contains("gpu")) {
                anyhow::bail!(
                    "--pack: a pack trains on the CPU for now, and would leave --gres {} idle; drop one of them",
                    o.gres.as_deref().unwrap_or_default()
                );
            }
            let plan = s.plan()?;
            if backend == Backend::Local {
                let todo = s.units(&s.pending(&plan), o.pack)?;
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
                submit_slurm(&s, &plan, &o, &spec)?;
            }
        }
        SweepCommand::Status { spec, set } => {
            let s = Sweep::load(&spec, &overrides(&set)?)?;
            print!("{}", s.status());
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
        SweepCommand::Slim { results } => slim(&results)?,
        SweepCommand::Refill {
            committed,
            retrained,
        } => {
            let r = sweep::refill::refill(&committed, &retrained)?;
            let added: Vec<&str> = r.added.iter().map(String::as_str).collect();
            println!(
                "{}: {} evaluation lines gained {}; every committed figure and {} kept answer files equal the retrained run's",
                committed.display(),
                r.lines,
                if added.is_empty() {
                    "nothing".to_string()
                } else {
                    added.join(", ")
                },
                r.answers
            );
        }
        SweepCommand::Rescore { results } => return rescore(&results),
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
