//! A pack (SPEC §8 Revision, packs): N runs of one shape as one model whose parameters lead
//! with the run dimension, built from the runs' tensors, split back into them, and trained on
//! the runs' own batches in one forward and backward. Each run's loss and gradients are its
//! own alone, to the bit (the fused CPU kernels restart every reduction at a run's first row).

use std::collections::HashMap;

use candle_core::{Device, Result, Tensor, bail};

use super::ops::{self, Runs};
use super::{Gpt, GptConfig, Kernels, Layout, Packed, Tokens};

/// One run's batch in a pack: its packed sequences and its loss rows, as the trainer builds
/// them for a run alone (`train::batch::Batch`).
pub struct RunBatch<'a> {
    pub ids: &'a Tensor,
    pub pos: &'a Tensor,
    pub lens: &'a [usize],
    pub rows: &'a Tensor,
    pub targets: &'a Tensor,
}

impl Gpt {
    /// The pack of these runs' models (each a map of HF-named tensors, as `named_tensors`
    /// gives them), run r's tensors the r-th along the leading dimension.
    pub fn pack(cfg: GptConfig, runs: &[Vec<(String, Tensor)>], device: &Device) -> Result<Gpt> {
        if runs.len() < 2 {
            bail!("a pack needs at least two runs, got {}", runs.len());
        }
        let mut by_name: HashMap<String, Vec<Tensor>> = HashMap::new();
        for tensors in runs {
            for (name, t) in tensors {
                by_name.entry(name.clone()).or_default().push(t.clone());
            }
        }
        let stacked = by_name
            .into_iter()
            .map(|(name, ts)| Ok((name, Tensor::stack(&ts, 0)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        let model = Gpt::with_runs(cfg, runs.len(), stacked, device)?;
        if model.ops() != Kernels::Fused {
            bail!("a pack trains on the fused CPU kernels in fp32 only");
        }
        Ok(model)
    }

    /// Run r's parameters, named and shaped as the run alone has them.
    pub fn run_tensors(&self, r: usize) -> Result<Vec<(String, Tensor)>> {
        if self.runs == 1 {
            return Ok(self.named_tensors());
        }
        self.params
            .iter()
            .map(|(n, v)| Ok((n.clone(), v.as_tensor().get(r)?)))
            .collect()
    }

    /// Each run's mean cross-entropy on its own batch, (N,), in one forward for all runs.
    pub fn pack_losses(&self, batches: &[RunBatch]) -> Result<Tensor> {
        if batches.len() != self.runs {
            bail!("{} batches for a pack of {} runs", batches.len(), self.runs);
        }
        let (v, p) = (self.cfg.vocab_size as f64, self.cfg.n_positions as f64);
        let (mut ids, mut pos, mut rows, mut targets) = (vec![], vec![], vec![], vec![]);
        let (mut lens, mut row_runs, mut loss_runs, mut at) = (vec![], vec![], vec![], 0);
        for (r, b) in batches.iter().enumerate() {
            let n = b.ids.elem_count();
            // Run r's rows index its own slice of the flattened tables and of the hidden rows.
            ids.push(b.ids.affine(1.0, r as f64 * v)?);
            pos.push(b.pos.affine(1.0, r as f64 * p)?);
            rows.push(b.rows.affine(1.0, at as f64)?);
            targets.push(b.targets.clone());
            lens.extend_from_slice(b.lens);
            row_runs.push(n);
            loss_runs.push(b.rows.elem_count());
            at += n;
        }
        let mut layout = Layout::Packed(Packed::of_runs(&lens, Runs::new(row_runs)));
        // One flattened token table for the embedding and the head, as a run alone uses one
        // `wte` for both: the head's gradient arrives first and the embedding's rows are added
        // into it in the same order, so the sum is the run's alone to the bit.
        let (wte, wpe) = (self.wte.flatten_to(1)?, self.wpe.flatten_to(1)?);
        let (ids, pos) = (Tensor::cat(&ids, 0)?, Tensor::cat(&pos, 0)?);
        let hidden = self.run_on(&wte, &wpe, Tokens::Split(&ids, &pos), &mut layout)?;
        let sel = hidden.index_select(&Tensor::cat(&rows, 0)?, 0)?;
        let targets = Tensor::cat(&targets, 0)?;
        ops::head_cross_entropy_runs(&sel, &wte, &targets, &Runs::new(loss_runs))
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    const CFG: GptConfig = GptConfig {
        vocab_size: 64,
        n_positions: 32,
        n_embd: 24,
        n_layer: 2,
        n_head: 3,
    };

    /// A batch of its own for each run: 5 to 40 sequences (some runs cross the kernels' row
    /// blocks, some do not) of 3 to 20 tokens, about half the rows carrying loss.
    fn batch(seed: u64) -> (Tensor, Tensor, Vec<usize>, Tensor, Tensor) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let lens: Vec<usize> = (0..rng.random_range(5..40))
            .map(|_| rng.random_range(3..20))
            .collect();
        let n: usize = lens.iter().sum();
        let ids: Vec<u32> = (0..n)
            .map(|_| rng.random_range(0..CFG.vocab_size as u32))
            .collect();
        let pos: Vec<u32> = lens.iter().flat_map(|&l| 0..l as u32).collect();
        let rows: Vec<u32> = (0..n as u32).filter(|_| rng.random_bool(0.5)).collect();
        let targets: Vec<u32> = rows
            .iter()
            .map(|_| rng.random_range(0..CFG.vocab_size as u32))
            .collect();
        let t = |v: Vec<u32>| Tensor::new(v.as_slice(), &Device::Cpu).unwrap();
        (t(ids), t(pos), lens, t(rows), t(targets))
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Three runs from their own seeds on their own batches: the pack's loss of each run and
    /// the gradient of every parameter's slice are the run's alone, to the bit; and the pack
    /// splits back into the runs' own tensors.
    #[test]
    fn a_packs_runs_train_as_they_would_alone() {
        let alone: Vec<Gpt> = (0..3)
            .map(|s| Gpt::init(CFG, 10 + s, &Device::Cpu).unwrap())
            .collect();
        let tensors: Vec<_> = alone.iter().map(|m| m.named_tensors()).collect();
        let pack = Gpt::pack(CFG, &tensors, &Device::Cpu).unwrap();
        for (r, t) in tensors.iter().enumerate() {
            for ((n1, a), (n2, b)) in t.iter().zip(pack.run_tensors(r).unwrap()) {
                assert_eq!((n1, bits(a)), (&n2, bits(&b)));
            }
        }
        let batches: Vec<_> = (0..3).map(|s| batch(100 + s)).collect();
        let inputs: Vec<RunBatch> = batches
            .iter()
            .map(|(ids, pos, lens, rows, targets)| RunBatch {
                ids,
                pos,
                lens,
                rows,
                targets,
            })
            .collect();
        let losses = pack.pack_losses(&inputs).unwrap();
        let grads = losses.sum_all().unwrap().backward().unwrap();
        for (r, (m, (ids, pos, lens, rows, targets))) in alone.iter().zip(&batches).enumerate() {
            let h = m
                .hidden(&Tensor::cat(&[ids, pos], 0).unwrap(), lens)
                .unwrap();
            let loss = m.loss(&h, rows, targets).unwrap();
            let g = loss.backward().unwrap();
            assert_eq!(bits(&losses.get(r).unwrap()), bits(&loss), "run {r}'s loss");
            let mut bad = vec![];
            for ((name, pv), (_, av)) in pack.params.iter().zip(&m.params) {
                let packed = grads.get(pv.as_tensor()).unwrap().get(r).unwrap();
                let own = g.get(av.as_tensor()).unwrap();
                if bits(&packed) != bits(own) {
                    let d = (&packed - own)
                        .unwrap()
                        .abs()
                        .unwrap()
                        .max_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap();
                    bad.push(format!("{name} {d:e}"));
                }
            }
            assert!(bad.is_empty(), "run {r}: {bad:?}");
        }
    }
}
