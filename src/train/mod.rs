//! Training (SPEC §5): the optimizer, the schedule, batches from the token cache, the loop with
//! checkpoints, metrics and evaluation hooks.

pub mod adamw;
pub mod batch;
pub mod checkpoint;
pub mod metrics;
pub mod run;
pub mod schedule;
pub mod tokens;

use std::path::Path;

use anyhow::Result;

use crate::dataset::DataDir;
use crate::model::Gpt;

/// The evaluation run at the end of every epoch; its figures go to the metrics sinks.
pub fn epoch_eval(
    _model: &Gpt,
    _data: &DataDir,
    _epoch: u64,
    _run_dir: &Path,
) -> Result<Vec<(String, f64)>> {
    Ok(Vec::new())
}
