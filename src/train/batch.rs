//! Batches for the causal LM (SPEC §5): sequences packed back to back (no padding work), the
//! loss masked to the path tokens and `<eos>`, and the epoch order drawn from the seed.

use candle_core::{Device, Result, Tensor};
use rand::seq::SliceRandom;

use crate::rng::{Purpose, stream};
use crate::train::tokens::Sequences;

/// One batch, ready for the model. Sequences are packed back to back, without padding: the
/// kernels never spend work on padding.
pub struct Batch {
    /// (N,) input ids: each sequence without its final `<eos>`.
    pub ids: Tensor,
    /// (N,) positions, 0.. within each sequence.
    pub pos: Tensor,
    /// Input length of each sequence.
    pub lens: Vec<usize>,
    /// Rows of the positions that carry loss, and their target ids.
    pub rows: Tensor,
    pub targets: Tensor,
    /// Input tokens N.
    pub tokens: usize,
    /// Positions that carry loss.
    pub loss_tokens: usize,
    /// The longest input: the padded length T of SPEC §5's FLOP count.
    pub t: usize,
}

/// Input ids, loss rows and targets of sequences `idx`.
pub fn make(seqs: &Sequences, idx: &[usize], device: &Device) -> Result<Batch> {
    let (mut ids, mut pos, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    for &i in idx {
        let s = seqs.get(i);
        let n = s.len() - 1;
        // Position p predicts s[p + 1]; the loss covers the path tokens and <eos>.
        for p in seqs.prompt_len[i] as usize - 1..n {
            rows.push((ids.len() + p) as u32);
            targets.push(s[p + 1]);
        }
        ids.extend_from_slice(&s[..n]);
        pos.extend(0..n as u32);
        lens.push(n);
    }
    let (tokens, loss_tokens) = (ids.len(), rows.len());
    Ok(Batch {
        ids: Tensor::from_vec(ids, tokens, device)?,
        pos: Tensor::from_vec(pos, tokens, device)?,
        t: lens.iter().copied().max().unwrap_or(0),
        lens,
        rows: Tensor::from_vec(rows, loss_tokens, device)?,
        targets: Tensor::from_vec(targets, loss_tokens, device)?,
        tokens,
        loss_tokens,
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
    use crate::tokenizer::{PAD, Vocab};

    #[test]
    fn packing_and_loss_mask() {
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
        // 12 and 13 tokens; inputs drop the final <eos>: 11 + 12 = 23 packed rows.
        assert_eq!(b.lens, vec![11, 12]);
        assert_eq!(b.t, 12);
        assert_eq!(b.tokens, 23);
        let ids: Vec<u32> = b.ids.to_vec1().unwrap();
        assert_eq!(ids[10], v.token_id("QR"));
        assert_eq!(ids[11], v.token_id("AB"));
        assert!(!ids.contains(&PAD));
        let pos: Vec<u32> = b.pos.to_vec1().unwrap();
        assert_eq!(&pos[9..13], &[9, 10, 0, 1]);
        // Sequence 0: a prompt of 8 tokens (through `:`); rows 7..=10 predict AA c QR <eos>.
        let rows: Vec<u32> = b.rows.to_vec1().unwrap();
        let targets: Vec<u32> = b.targets.to_vec1().unwrap();
        assert_eq!(&rows[..4], &[7, 8, 9, 10]);
        assert_eq!(&targets[..4], &v.encode("AA c QR <eos>")[..]);
        // Sequence 1 starts at row 11 with a prompt of 7 tokens: rows 17..=22.
        assert_eq!(&rows[4..], &[17, 18, 19, 20, 21, 22]);
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
