//! Batches for the causal LM (SPEC §5): dynamic padding to the longest sequence of the batch,
//! the loss masked to the path tokens and `<eos>`, and the epoch order drawn from the seed.

use candle_core::{Device, Result, Tensor};
use rand::seq::SliceRandom;

use crate::rng::{Purpose, stream};
use crate::tokenizer::PAD;
use crate::train::tokens::Sequences;

/// One batch, ready for the model.
pub struct Batch {
    /// (B, T) input ids: each sequence without its final `<eos>`, right-padded with `<pad>`.
    pub ids: Tensor,
    /// (B, T) positions 0..T.
    pub pos: Tensor,
    /// Flat indices into B·T of the positions that carry loss, and their target ids.
    pub rows: Tensor,
    pub targets: Tensor,
    /// Non-padding input tokens.
    pub tokens: usize,
    /// Positions that carry loss.
    pub loss_tokens: usize,
    /// Padded length T.
    pub t: usize,
    pub b: usize,
}

/// Input ids, loss rows and targets of sequences `idx`, padded to their longest input.
pub fn make(seqs: &Sequences, idx: &[usize], device: &Device) -> Result<Batch> {
    let t = idx.iter().map(|&i| seqs.get(i).len() - 1).max().unwrap_or(1);
    let b = idx.len();
    let mut ids = vec![PAD; b * t];
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    let mut tokens = 0;
    for (r, &i) in idx.iter().enumerate() {
        let s = seqs.get(i);
        let n = s.len() - 1;
        ids[r * t..r * t + n].copy_from_slice(&s[..n]);
        tokens += n;
        // Position p predicts s[p + 1]; the loss covers the path tokens and <eos>.
        for p in seqs.prompt_len[i] as usize - 1..n {
            rows.push((r * t + p) as u32);
            targets.push(s[p + 1]);
        }
    }
    let pos: Vec<u32> = (0..b).flat_map(|_| 0..t as u32).collect();
    let loss_tokens = rows.len();
    Ok(Batch {
        ids: Tensor::from_vec(ids, (b, t), device)?,
        pos: Tensor::from_vec(pos, (b, t), device)?,
        rows: Tensor::from_vec(rows, loss_tokens, device)?,
        targets: Tensor::from_vec(targets, loss_tokens, device)?,
        tokens,
        loss_tokens,
        t,
        b,
    })
}

/// The order of epoch `epoch`: a permutation of 0..n drawn from the run seed.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut stream(seed, Purpose::Order, epoch));
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::Vocab;

    #[test]
    fn padding_and_loss_mask() {
        let v = Vocab {
            node_len: 2,
            n_labels: 26,
        };
        let lines = vec![
            "AA QR [ c ] [ ] : AA c QR <eos>".to_string(),
            "AB AC [ ] [ ] : AB a AD b AC <eos>".to_string(),
        ];
        let s = Sequences::from_lines(&v, &lines).unwrap();
        let b = make(&s, &[0, 1], &Device::Cpu).unwrap();
        // Inputs drop the final <eos>: lengths 10 and 11, padded to 11.
        assert_eq!(b.t, 11);
        assert_eq!(b.tokens, 21);
        let ids: Vec<Vec<u32>> = b.ids.to_vec2().unwrap();
        assert_eq!(ids[0][10], PAD);
        assert_eq!(ids[1][10], v.token_id("AC"));
        // Row 0: prompt of 7 tokens; positions 6..=9 predict AA c QR <eos>.
        let rows: Vec<u32> = b.rows.to_vec1().unwrap();
        let targets: Vec<u32> = b.targets.to_vec1().unwrap();
        assert_eq!(&rows[..4], &[6, 7, 8, 9]);
        assert_eq!(&targets[..4], &v.encode("AA c QR <eos>")[..]);
        // Row 1: prompt of 6 tokens; positions 11+5..=11+10 predict AB a AD b AC <eos>.
        assert_eq!(&rows[4..], &[16, 17, 18, 19, 20, 21]);
        assert_eq!(&targets[4..], &v.encode("AB a AD b AC <eos>")[..]);
        assert_eq!(b.loss_tokens, 10);
    }

    #[test]
    fn orders_are_reproducible_permutations() {
        let a = epoch_order(100, 1, 0);
        assert_eq!(a, epoch_order(100, 1, 0));
        assert_ne!(a, epoch_order(100, 1, 1));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
    }
}
