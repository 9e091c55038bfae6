//! The `lab` binary: parse the command line and hand it to `lab::cli::run`.
//! Every error prints on one line and exits with code 2.

use std::process::ExitCode;

use clap::Parser;
use lab::rundir::Exit;

fn main() -> ExitCode {
    let ran = lab::runtime::prepare().and_then(|()| {
        let args = lab::cli::Cli::parse();
        lab::runtime::on_a_pool_thread(|| lab::cli::run(args))
    });
    match ran {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::BadInput.into()
        }
    }
}
