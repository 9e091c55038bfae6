//! How the process runs: glibc keeps freed memory, denormal floats flush to zero, candle's
//! elementwise ops stay on the calling thread, and the command runs on a thread of rayon's
//! pool. The binary and benches share it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set the process up before any other thread exists: freed memory stays in the heap,
/// denormals flush to zero, and candle's elementwise ops run on the calling thread.
pub fn prepare() -> anyhow::Result<()> {
    keep_freed_memory();
    KEEP_DENORMALS.store(keep_denormals()?, Ordering::Relaxed);
    flush_denormals();
    single_threaded_candle_elementwise();
    Ok(())
}

/// Whether LAB_DENORMALS asks for IEEE denormals, read once by `prepare`.
static KEEP_DENORMALS: AtomicBool = AtomicBool::new(false);

/// Whether this process flushes denormals (`prepare` read LAB_DENORMALS).
pub fn denormals_flushed() -> bool {
    cfg!(target_arch = "x86_64") && !KEEP_DENORMALS.load(Ordering::Relaxed)
}

/// LAB_DENORMALS: unset or `flush` flushes denormals to zero, `keep` keeps them; anything
/// else is an error, so that a misspelt `keep` cannot silently flush.
fn keep_denormals() -> anyhow::Result<bool> {
    match std::env::var_os("LAB_DENORMALS") {
        None => Ok(false),
        Some(v) if v == "flush" => Ok(false),
        Some(v) if v == "keep" => Ok(true),
        Some(v) => anyhow::bail!(
            "LAB_DENORMALS: {:?} is not `keep` or `flush`",
            v.to_string_lossy()
        ),
    }
}

/// A confident model's softmax puts probabilities near 1e-38 on most of the vocabulary, and
/// the head's backward scales them by 1/tokens into denormals: the CPU then takes a microcode
/// assist on every one, and gemm ran 37× slower (1M, L = 1, E = 576: 4,200 tokens/s at step
/// 150, 115 at step 450, 92% of it in the f32 microkernel). Set the thread's SSE control
/// register to flush denormal results to zero and read denormal inputs as zero (FTZ and DAZ,
/// what `torch.set_flush_denormal(True)` sets), as every thread of the pool does at its start.
/// A flushed value is below 1.2e-38; the runs that never made one give the same bits either
/// way. LAB_DENORMALS=keep keeps IEEE denormals. Other architectures keep them.
pub fn flush_denormals() {
    #[cfg(target_arch = "x86_64")]
    if denormals_flushed() {
        /// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
        const FTZ_DAZ: u32 = 0x8040;
        let mut csr = 0u32;
        // SAFETY: stmxcsr stores the 32-bit control register to `csr`, and ldmxcsr loads it
        // back with two mode bits set; neither touches other memory or the stack.
        unsafe {
            std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags));
            csr |= FTZ_DAZ;
            std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, readonly, preserves_flags));
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
        .start_handler(|_| flush_denormals())
        .build_global()
    {
        // `scope` runs its body on a pool thread when called from outside the pool.
        Ok(()) => rayon::scope(|_| f()),
        Err(_) => f(),
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use std::hint::black_box;

    /// Half the smallest normal f32, computed at run time: a denormal, or 0 when flushed.
    fn half_smallest_normal() -> f32 {
        black_box(f32::MIN_POSITIVE) / black_box(2.0)
    }

    #[test]
    fn a_thread_that_flushes_denormals_gets_zero_where_ieee_gives_a_denormal() {
        let ieee = std::thread::spawn(half_smallest_normal).join().unwrap();
        assert!(
            ieee > 0.0 && !ieee.is_normal(),
            "{ieee:e} is not a denormal"
        );
        let flushed = std::thread::spawn(|| {
            super::flush_denormals();
            let read = black_box(f32::from_bits(1)) * black_box(1e30);
            (half_smallest_normal(), read)
        })
        .join()
        .unwrap();
        assert_eq!(
            flushed,
            (0.0, 0.0),
            "a denormal result, or a denormal input read as such"
        );
    }
}
