//! The integration tests: one binary, one module per topic (see docs/STYLE.md).

mod util;

mod bad_input;
mod data_cli;
mod data_props;
mod e2e;
mod eval_cli;
mod eval_score;
mod findings;
mod gpu_check;
mod kernel_check;
mod launches;
mod parity;
mod reproduce;
mod sets;
mod shipped;
mod study;
mod sweep_cli;
mod tokenizer;
mod train_cli;
mod uniform;
