//! The `lab` binary: parse the command line and hand it to `lab::cli::run`.
//! Every error prints on one line and exits with code 2.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = lab::cli::Cli::parse();
    match lab::cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
