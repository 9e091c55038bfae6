//! Training (SPEC §5): the optimizer, the schedule, batches from the token cache, the loop with
//! checkpoints, metrics and evaluation hooks.

pub mod adamw;
pub mod batch;
pub mod metrics;
pub mod pack;
pub mod pack_run;
pub mod run;
pub mod schedule;
pub mod tokens;
