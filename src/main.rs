//! The `lab` binary: parse the command line and hand it to `lab::cli::run`.
//! Every error prints on one line and exits with code 2.

use std::process::ExitCode;

use clap::Parser;
use lab::rundir::Exit;

fn main() -> ExitCode {
    keep_freed_memory();
    single_threaded_candle_elementwise();
    let args = lab::cli::Cli::parse();
    match lab::cli::run(args) {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::BadInput.into()
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

/// candle runs its elementwise ops on a pool of spinning threads of its own, which on a
/// 2-core machine fights the rayon threads that run gemm and the fused kernels: measured as
/// 39% of a small model's training time spent spinning. The lab's heavy work runs in its own
/// kernels, so candle's remaining elementwise ops run on the calling thread instead.
/// CANDLE_NUM_THREADS, when set, still wins.
fn single_threaded_candle_elementwise() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}
