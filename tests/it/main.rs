//! The integration tests: one binary, one module per topic (see STYLE.md).

mod util;

mod data_cli;
mod data_props;
mod parity;
mod tokenizer;
mod uniform;
