//! How the process runs: glibc keeps freed memory, candle's elementwise ops stay on the
//! calling thread, and the command runs on a thread of rayon's pool. The binary and benches share it.

/// Set the process up before any other thread exists: freed memory stays in the heap, and
/// candle's elementwise ops run on the calling thread.
pub fn prepare() {
    keep_freed_memory();
    single_threaded_candle_elementwise();
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

/// Stack of the thread that runs the command: the main thread's 8 MiB, so that moving the
/// command onto a pool thread (whose default stack is 2 MiB) changes nothing else.
const COMMAND_STACK: usize = 8 << 20;

/// The fused kernels hand each op's work to rayon's pool. From the main thread every hand-off
/// wakes a pool thread and puts the main one to sleep, and a narrow model makes ~300 such
/// calls a step: measured with perf as 16% of the 100k L16 E24 step on 1 thread, in the
/// scheduler. Run the whole command on a thread of the pool instead, which then does its
/// share of every op itself. RAYON_NUM_THREADS still sets the pool's size.
pub fn on_a_pool_thread<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match rayon::ThreadPoolBuilder::new()
        .stack_size(COMMAND_STACK)
        .build_global()
    {
        // `scope` runs its body on a pool thread when called from outside the pool.
        Ok(()) => rayon::scope(|_| f()),
        Err(_) => f(),
    }
}
