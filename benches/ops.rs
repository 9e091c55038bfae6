//! Ops per training step of the composed kernels (the path CUDA runs), counted in candle's
//! graph on the CPU (issue 27): each node of the forward is at least one kernel a GPU launches
//! (the backward launches one or more per node again, AdamW a few per parameter tensor).
//! Run: `cargo bench --bench ops` (configs/100m-L8.toml's depth and heads at small widths: the
//! count does not depend on the width, which the two rows show).

use candle_core::{Device, Result, Tensor};
use lab::config::Config;
use lab::model::{Gpt, GptConfig, Kernels};

fn main() -> Result<()> {
    let cfg = Config::load(std::path::Path::new("configs/100m-L8.toml")).expect("config");
    println!("| config | L | E | H | forward graph nodes | parameter tensors |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for e in [64, 128] {
        let mut c = cfg.clone();
        c.model.n_embd = e;
        // The paper world's vocabulary: about 26^3 nodes, the labels, the specials.
        let mut model = Gpt::init(GptConfig::new(&c, 17_600), 0, &Device::Cpu)?;
        model.kernels = Kernels::Composed;
        // The paper's batch: 64 sequences of 12 to 26 tokens.
        let lens: Vec<usize> = (0..64).map(|i| 12 + i % 15).collect();
        let n: usize = lens.iter().sum();
        let ids = Tensor::from_vec((0..n as u32).map(|i| i % 17_000).collect(), n, &Device::Cpu)?;
        let pos: Vec<u32> = lens.iter().flat_map(|&l| 0..l as u32).collect();
        let pos = Tensor::from_vec(pos, n, &Device::Cpu)?;
        let rows = Tensor::arange(0u32, n as u32, &Device::Cpu)?;
        let h = model.hidden(&Tensor::cat(&[&ids, &pos], 0)?, &lens)?;
        let loss = model.loss(&h, &rows, &ids)?;
        let nodes = loss.sorted_nodes().len();
        println!(
            "| {} | {} | {e} | {} | {nodes} | {} |",
            c.name,
            c.model.n_layer,
            c.model.n_head,
            model.params.len()
        );
    }
    Ok(())
}
