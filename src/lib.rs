//! `lab`: a lab for the science of machine creativity. The modules follow the data's path:
//! config → graph → search → dataset → tokenizer → model → train → eval, with the CLI on top.

pub mod cli;
pub mod code;
pub mod config;
pub mod dataset;
pub mod device;
pub mod eval;
pub mod fsutil;
pub mod graph;
pub mod model;
pub mod progress;
pub mod report;
pub mod rng;
pub mod rundir;
pub mod runtime;
pub mod search;
pub mod shipped;
pub mod sweep;
pub mod tags;
pub mod tokenizer;
pub mod train;
