//! The `lab` binary: parse the command line and hand it to `lab::cli::run`.
//! Every error prints on one line and exits with code 2.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    keep_freed_memory();
    let args = lab::cli::Cli::parse();
    match lab::cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Training frees and reallocates the same large buffers every step. By default glibc hands
/// each one back to the kernel (mmap/munmap), and the next step pays page faults for all of it:
/// measured here as a third of the step time. Keep freed memory in the heap instead.
fn keep_freed_memory() {
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}
