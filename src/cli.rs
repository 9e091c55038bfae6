//! The commands: argument structs (clap) and the thin glue that calls into the library.
//! Nothing here computes; it loads, dispatches and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::dataset::{self, DataDir, Outcome};
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
    },
}

/// Exit code of a run stopped by SIGUSR1/SIGTERM after its checkpoint (EX_TEMPFAIL).
pub const EXIT_INTERRUPTED: u8 = 75;

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Data { config, out, force } => {
            let cfg = Config::load(&config)?;
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
        } => {
            let cfg = Config::load(&config)?;
            let device = crate::device::parse(&device)?;
            eprintln!("training {} on {}", cfg.name, crate::device::name(&device));
            let o = run::train(run::Options {
                config: cfg,
                out,
                resume,
                device,
                max_steps,
            })?;
            print!("{}", train_summary(&o));
            if o.ending == Ending::Interrupted {
                return Ok(ExitCode::from(EXIT_INTERRUPTED));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
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
    out
}
