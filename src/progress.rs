//! Progress bars on stderr, one style for the whole lab. indicatif hides them when stderr is
//! not a terminal, so logs and tests stay clean.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// A bar over `len` items with a rate and an ETA.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>12} [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// A spinner for a phase of unknown length; `set_message` names the phase.
pub fn spinner(what: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}
