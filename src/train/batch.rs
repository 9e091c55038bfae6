//! Batches for the causal LM (SPEC §5): sequences packed back to back (no padding work), the
//! loss masked to the path tokens and `<eos>`, and each epoch's parts: the examples in an
//! order drawn from the seed, with teacherless copies and hash prefixes when configured.

use candle_core::{Device, Result, Tensor};
use rand::Rng;
use rand::seq::SliceRandom;

use crate::config::{HashDraw, Objective, TrainConfig};
use crate::rng::{Purpose, stream};
use crate::tokenizer::Vocab;
use crate::train::tokens::Sequences;

/// How one sequence enters a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub seq: usize,
    /// Teacherless: every path input (after `:`) becomes `<dummy>`; the labels stay.
    pub teacherless: bool,
    /// Hash-conditioning symbols before the sequence (no loss on them).
    pub prefix: Vec<u32>,
}

impl Part {
    pub fn plain(seq: usize) -> Part {
        Part {
            seq,
            teacherless: false,
            prefix: Vec::new(),
        }
    }
}

/// The examples that get a teacherless copy: each with probability `fraction`, drawn once
/// for the run from its seed.
/// The teacherless copies a run's config asks for among `n` training examples (none for the
/// next-token objective).
pub fn teacherless_of(cfg: &crate::config::TrainConfig, n: usize) -> Vec<usize> {
    match cfg.objective {
        crate::config::Objective::Ntp => Vec::new(),
        crate::config::Objective::Teacherless => {
            teacherless_examples(n, cfg.seed, cfg.teacherless_fraction)
        }
    }
}

fn teacherless_examples(n: usize, seed: u64, fraction: f64) -> Vec<usize> {
    let mut rng = stream(seed, Purpose::Teacherless, 0);
    (0..n).filter(|_| rng.random_bool(fraction)).collect()
}

/// The parts of epoch `epoch`: every example once, plus its teacherless copy when it has one,
/// in an order drawn from the run seed and the epoch, each with a fresh hash prefix when
/// `hash_prefix` > 0. Resuming recomputes the same parts.
pub fn epoch_parts(
    n: usize,
    t: &TrainConfig,
    teacherless: &[usize],
    vocab: &Vocab,
    epoch: u64,
) -> Vec<Part> {
    let mut parts: Vec<Part> = (0..n).map(Part::plain).collect();
    if t.objective == Objective::Teacherless {
        parts.extend(teacherless.iter().map(|&i| Part {
            teacherless: true,
            ..Part::plain(i)
        }));
    }
    // Each part's prefix, in list order, from `purpose`'s stream for `item`.
    let draw = |parts: &mut [Part], purpose, item| {
        let mut rng = stream(t.seed, purpose, item);
        for p in parts.iter_mut() {
            p.prefix = vocab.hash_prefix(&mut rng, t.hash_prefix as usize);
        }
    };
    // `once`: part i of the unshuffled list (example i, then the copies in order) gets the
    // i-th prefix of one stream, the same every epoch.
    if t.hash_prefix > 0 && t.hash_draw == HashDraw::Once {
        draw(&mut parts, Purpose::HashOnce, 0);
    }
    parts.shuffle(&mut stream(t.seed, Purpose::Order, epoch));
    if t.hash_prefix > 0 && t.hash_draw == HashDraw::Epoch {
        draw(&mut parts, Purpose::Hash, epoch);
    }
    parts
}

/// One batch, ready for the model. Sequences are packed back to back, without padding: the
/// kernels never spend work on padding.
pub struct Batch {
    /// (2N,) the input ids, then their positions, uploaded at once: what the model embeds.
    pub tok: Tensor,
    /// (N,) input ids: each sequence without its final `<eos>` (a view of `tok`).
    pub ids: Tensor,
    /// (N,) positions, 0.. within each sequence (a view of `tok`).
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

/// Input ids, loss rows and targets of `parts`; `dummy` is the `<dummy>` id.
pub fn make(seqs: &Sequences, parts: &[Part], dummy: u32, device: &Device) -> Result<Batch> {
    let (mut ids, mut pos, mut lens) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    for part in parts {
        let s = seqs.get(part.seq);
        let n = s.len() - 1;
        let m = seqs.prompt_len[part.seq] as usize;
        let start = ids.len() + part.prefix.len();
        // Input position j of the sequence predicts s[j + 1]; the loss covers the path tokens
        // and <eos>, predicted from `:` and the path positions.
        for j in m - 1..n {
            rows.push((start + j) as u32);
            targets.push(s[j + 1]);
        }
        ids.extend_from_slice(&part.prefix);
        ids.extend_from_slice(&s[..m]);
        if part.teacherless {
            ids.extend(std::iter::repeat_n(dummy, n - m));
        } else {
            ids.extend_from_slice(&s[m..n]);
        }
        let len = part.prefix.len() + n;
        pos.extend(0..len as u32);
        lens.push(len);
    }
    let (tokens, loss_tokens) = (ids.len(), rows.len());
    ids.extend(pos);
    let tok = Tensor::from_vec(ids, 2 * tokens, device)?;
    Ok(Batch {
        ids: tok.narrow(0, 0, tokens)?,
        pos: tok.narrow(0, tokens, tokens)?,
        tok,
        t: lens.iter().copied().max().unwrap_or(0),
        lens,
        rows: Tensor::from_vec(rows, loss_tokens, device)?,
        targets: Tensor::from_vec(targets, loss_tokens, device)?,
        tokens,
        loss_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::{PAD, Vocab};

    /// The 676-node tiny world's vocabulary.
    fn tiny_vocab() -> Vocab {
        Vocab {
            node_len: 2,
            n_nodes: 676,
            n_labels: 26,
        }
    }

    #[test]
    fn packing_and_loss_mask() {
        let v = tiny_vocab();
        let lines = vec![
            "AA QR [ c ] [ ] : AA c QR <eos>".to_string(),
            "AB AC [ ] [ ] : AB a AD b AC <eos>".to_string(),
        ];
        let s = Sequences::from_lines(&v, &lines).unwrap();
        let b = make(&s, &[Part::plain(0), Part::plain(1)], 0, &Device::Cpu).unwrap();
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
    fn teacherless_layout_and_masking() {
        let v = tiny_vocab();
        let s = Sequences::from_lines(&v, &["AA QR [ c ] [ ] : AA c KL b QR <eos>".to_string()])
            .unwrap();
        let d = v.dummy_id();
        let part = Part {
            teacherless: true,
            ..Part::plain(0)
        };
        let b = make(&s, &[part], d, &Device::Cpu).unwrap();
        // Inputs: the prompt through `:` as is, then <dummy> for every path input
        // (AA c KL b QR; <eos> is never an input).
        let ids: Vec<u32> = b.ids.to_vec1().unwrap();
        let mut want = v.encode("AA QR [ c ] [ ] :");
        want.extend([d; 5]);
        assert_eq!(ids, want);
        // Labels: the real path and <eos>, predicted from `:` (row 7) and the dummies (8..=12);
        // no loss on the prompt, and no dummy is ever a target.
        let rows: Vec<u32> = b.rows.to_vec1().unwrap();
        let targets: Vec<u32> = b.targets.to_vec1().unwrap();
        assert_eq!(rows, vec![7, 8, 9, 10, 11, 12]);
        assert_eq!(targets, v.encode("AA c KL b QR <eos>"));
        // The plain part has the same rows and targets and the real inputs.
        let p = make(&s, &[Part::plain(0)], d, &Device::Cpu).unwrap();
        assert_eq!(p.rows.to_vec1::<u32>().unwrap(), rows);
        assert_eq!(p.targets.to_vec1::<u32>().unwrap(), targets);
        assert_eq!(
            p.ids.to_vec1::<u32>().unwrap(),
            v.encode("AA QR [ c ] [ ] : AA c KL b QR")
        );
    }

    #[test]
    fn hash_prefixes_are_fresh_per_example_and_epoch_and_reproducible() {
        let v = tiny_vocab();
        let t = TrainConfig {
            hash_prefix: 10,
            ..TrainConfig::default()
        };
        let e0 = epoch_parts(50, &t, &[], &v, 0);
        let e1 = epoch_parts(50, &t, &[], &v, 1);
        assert_eq!(
            e0,
            epoch_parts(50, &t, &[], &v, 0),
            "reproducible from the seed"
        );
        let prefixes = |e: &[Part]| {
            e.iter()
                .map(|p| p.prefix.clone())
                .collect::<std::collections::BTreeSet<_>>()
        };
        assert_eq!(prefixes(&e0).len(), 50, "every example its own prefix");
        assert!(
            prefixes(&e0).is_disjoint(&prefixes(&e1)),
            "fresh every epoch"
        );
        for p in &e0 {
            assert_eq!(p.prefix.len(), 10);
            assert!(p.prefix.iter().all(|&id| v.token(id).starts_with('#')));
        }
        let s = Sequences::from_lines(&v, &["AA QR [ ] [ ] : AA c QR <eos>".to_string()]).unwrap();
        let part = Part {
            prefix: e0[0].prefix.clone(),
            ..Part::plain(0)
        };
        let b = make(&s, &[part], v.dummy_id(), &Device::Cpu).unwrap();
        // The prefix takes positions 0..10; the loss rows move with it and never cover it.
        assert_eq!(b.rows.to_vec1::<u32>().unwrap(), vec![16, 17, 18, 19]);
        assert_eq!(&b.pos.to_vec1::<u32>().unwrap()[..3], &[0, 1, 2]);
        let mut t2 = t.clone();
        t2.seed = 1;
        assert_ne!(
            prefixes(&e0),
            prefixes(&epoch_parts(50, &t2, &[], &v, 0)),
            "another seed, other prefixes"
        );
    }

    /// `hash_draw = "once"`: each part keeps its prefix across epochs (while the order changes),
    /// a teacherless copy has its own, and the prefixes differ between parts and from the
    /// per-epoch draws.
    #[test]
    fn hash_prefixes_drawn_once_stay_with_their_part() {
        let v = tiny_vocab();
        let t = TrainConfig {
            hash_prefix: 10,
            hash_draw: HashDraw::Once,
            objective: Objective::Teacherless,
            ..TrainConfig::default()
        };
        let copies = [3, 7, 11];
        let by_part = |epoch| {
            let parts = epoch_parts(20, &t, &copies, &v, epoch);
            let order: Vec<(usize, bool)> = parts.iter().map(|p| (p.seq, p.teacherless)).collect();
            let map: std::collections::BTreeMap<(usize, bool), Vec<u32>> = parts
                .into_iter()
                .map(|p| ((p.seq, p.teacherless), p.prefix))
                .collect();
            (order, map)
        };
        let ((o0, m0), (o1, m1)) = (by_part(0), by_part(1));
        assert_eq!(m0.len(), 23, "every example and copy once");
        assert_eq!(m0, m1, "the same prefix for each part in every epoch");
        assert_ne!(o0, o1, "while the order is drawn per epoch");
        let distinct: std::collections::BTreeSet<_> = m0.values().collect();
        assert_eq!(
            distinct.len(),
            23,
            "every part its own prefix, copies included"
        );
        assert_ne!(m0[&(3, false)], m0[&(3, true)]);
        let fresh = epoch_parts(
            20,
            &TrainConfig {
                hash_draw: HashDraw::Epoch,
                ..t.clone()
            },
            &copies,
            &v,
            0,
        );
        assert!(
            fresh
                .iter()
                .all(|p| m0[&(p.seq, p.teacherless)] != p.prefix)
        );
    }

    #[test]
    fn orders_are_reproducible_permutations() {
        let v = tiny_vocab();
        let t = TrainConfig::default();
        let seqs = |e| {
            epoch_parts(100, &t, &[], &v, e)
                .iter()
                .map(|p| p.seq)
                .collect::<Vec<_>>()
        };
        let a = seqs(0);
        assert_eq!(a, seqs(0));
        assert_ne!(a, seqs(1));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, (0..100).collect::<Vec<_>>());
    }
}
