//! Where the time of training steps or of decoding goes, when `LAB_PROFILE` is set: wall time
//! and calls of each phase (`step/…`, `decode/…`) and of each kernel, printed as one table.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

static ON: LazyLock<bool> = LazyLock::new(|| std::env::var_os("LAB_PROFILE").is_some());
static TABLE: Mutex<BTreeMap<&'static str, (u64, f64)>> = Mutex::new(BTreeMap::new());

/// Times its scope under `name` (nothing at all when profiling is off).
pub struct Span(Option<(&'static str, Instant)>);

pub fn span(name: &'static str) -> Span {
    Span(ON.then(|| (name, Instant::now())))
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((name, t)) = self.0 {
            let mut table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
            let e = table.entry(name).or_default();
            e.0 += 1;
            e.1 += t.elapsed().as_secs_f64();
        }
    }
}

/// Phases have a `/` in their name and do not nest; kernels run inside them.
fn is_phase(name: &str) -> bool {
    name.contains('/')
}

/// The table so far, phases first, each row as a share of the phases' total; `None` when
/// profiling is off. Kernels run inside the phases, so they do not add up to 100%: the rest
/// of a phase is candle's own ops (embeddings, residual adds, gradient sums, copies).
pub fn report() -> Option<String> {
    if !*ON {
        return None;
    }
    let table = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let total: f64 = table
        .iter()
        .filter(|(k, _)| is_phase(k))
        .map(|(_, v)| v.1)
        .sum();
    let mut rows: Vec<_> = table.iter().collect();
    rows.sort_by(|a, b| {
        (!is_phase(a.0))
            .cmp(&!is_phase(b.0))
            .then(b.1.1.total_cmp(&a.1.1))
    });
    let mut out = format!(
        "profile (LAB_PROFILE): {total:.3} s in all phases\n  {:<24} {:>7} {:>9} {:>6}\n",
        "what", "calls", "seconds", "share"
    );
    for (name, (calls, secs)) in rows {
        let share = 100.0 * secs / total.max(1e-12);
        out += &format!("  {name:<24} {calls:>7} {secs:>9.3} {share:>5.1}%\n");
    }
    Some(out)
}
