//! The commands: argument structs (clap) and the thin glue that calls into the library.
//! Nothing here computes; it loads, dispatches and prints.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::dataset::{self, DataDir, Outcome};

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
}

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
    }
    Ok(ExitCode::SUCCESS)
}
