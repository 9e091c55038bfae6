//! Batched autoregressive decoding with the KV cache: greedy, or sampling with temperature,
//! top-k and top-p, K samples per prompt sharing one prefill, each seeded on its own.

use anyhow::Result;
use candle_core::{D, Tensor};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::model::{Gpt, Kernels, fastmath, profile};
use crate::rng::{Purpose, stream};
use crate::tokenizer::{EOS, PAD};

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decode {
    Greedy,
    /// Temperature, top-k (0: all), top-p (1.0: all).
    Sample {
        temperature: f64,
        top_k: usize,
        top_p: f64,
    },
}

impl Decode {
    /// The same decoding at temperature `t` (greedy stays greedy).
    pub fn at_temperature(self, t: f64) -> Decode {
        match self {
            Decode::Greedy => Decode::Greedy,
            Decode::Sample { top_k, top_p, .. } => Decode::Sample {
                temperature: t,
                top_k,
                top_p,
            },
        }
    }
}

/// One generated answer: its tokens before `<eos>`, and whether `<eos>` came within budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generated {
    pub tokens: Vec<u32>,
    pub finished: bool,
}

pub struct Decoder<'a> {
    pub model: &'a Gpt,
    /// Real vocabulary size: ids past it (embedding padding) are never emitted.
    pub n_tokens: usize,
    /// Most tokens generated per answer, `<eos>` included (SPEC §6: 2·h_max_train + 2).
    pub budget: usize,
    /// Rows decoded together (prompts × samples).
    pub batch_rows: usize,
    pub decode: Decode,
    pub samples: usize,
    pub seed: u64,
}

/// The random stream of sample `k` of prompt `id`.
pub fn sample_stream(seed: u64, id: u64, k: usize) -> ChaCha8Rng {
    stream(seed, Purpose::Sampling, id << 16 | k as u64)
}

/// Choose a token from one row of logits: argmax, or one draw from the softmax at temperature T
/// restricted to the top-k tokens, then to the smallest most-likely set whose mass reaches top-p
/// of theirs (tokens ranked by logit, ties by id). The draw walks the kept tokens in id order,
/// so nothing is sorted unless top-k or top-p restricts the set.
pub fn choose(logits: &[f32], decode: Decode, rng: &mut ChaCha8Rng) -> u32 {
    match decode {
        Decode::Greedy => fastmath::argmax(logits) as u32,
        Decode::Sample {
            temperature,
            top_k,
            top_p,
        } => {
            let t = temperature.max(1e-6) as f32;
            let max = fastmath::max(logits);
            let mut w: Vec<f32> = logits
                .iter()
                .map(|&l| fastmath::exp((l - max) / t))
                .collect();
            if (top_k > 0 && top_k < w.len()) || top_p < 1.0 {
                restrict(logits, &mut w, top_k, top_p);
            }
            let total: f64 = w.iter().map(|&x| x as f64).sum();
            let mut r = rng.random::<f64>() * total;
            let mut last = 0;
            for (i, &x) in w.iter().enumerate().filter(|(_, x)| **x > 0.0) {
                if r < x as f64 {
                    return i as u32;
                }
                r -= x as f64;
                last = i;
            }
            last as u32
        }
    }
}

/// Zero the weights of the tokens outside the top-k and outside the top-p nucleus. Only as many
/// tokens as the nucleus needs are sorted: the top 64, then 4 times more until the mass is
/// reached.
fn restrict(logits: &[f32], w: &mut [f32], top_k: usize, top_p: f64) {
    let rank = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let mut idx: Vec<usize> = (0..w.len()).collect();
    if top_k > 0 && top_k < idx.len() {
        idx.select_nth_unstable_by(top_k - 1, rank);
        idx.truncate(top_k);
    }
    let mut keep = idx.len();
    if top_p < 1.0 {
        let total: f64 = idx.iter().map(|&i| w[i] as f64).sum();
        let mut m = 64.min(idx.len());
        loop {
            if m < idx.len() {
                idx.select_nth_unstable_by(m - 1, rank);
            }
            idx[..m].sort_unstable_by(rank);
            let mut acc = 0.0;
            let reached = idx[..m].iter().position(|&i| {
                acc += w[i] as f64 / total;
                acc >= top_p
            });
            if let Some(n) = reached {
                keep = n + 1;
                break;
            }
            if m == idx.len() {
                break;
            }
            m = (m * 4).min(idx.len());
        }
    }
    let mut kept = vec![false; w.len()];
    idx[..keep].iter().for_each(|&i| kept[i] = true);
    w.iter_mut()
        .zip(kept)
        .filter(|(_, k)| !k)
        .for_each(|(x, _)| *x = 0.0);
}

impl Decoder<'_> {
    /// Decode every prompt `samples` times. `ids[i]` seeds prompt i's samples, so results do
    /// not depend on batching. Returns, per prompt, its answers.
    pub fn run(&self, prompts: &[Vec<u32>], ids: &[u64]) -> Result<Vec<Vec<Generated>>> {
        let k = self.samples.max(1);
        let per_batch = (self.batch_rows / k).max(1);
        let mut out = Vec::with_capacity(prompts.len());
        for (chunk, chunk_ids) in prompts.chunks(per_batch).zip(ids.chunks(per_batch)) {
            out.extend(self.batch(chunk, chunk_ids)?);
        }
        Ok(out)
    }

    fn batch(&self, prompts: &[Vec<u32>], ids: &[u64]) -> Result<Vec<Vec<Generated>>> {
        let model = self.model;
        let device = model.device();
        let k = self.samples.max(1);
        let width = prompts.iter().map(Vec::len).max().unwrap_or(1);
        // Prefill, left-padded: row r's real tokens sit at the end, at positions 0..len.
        let (mut tok, mut pos) = (Vec::new(), Vec::new());
        let pad: Vec<usize> = prompts.iter().map(|p| width - p.len()).collect();
        for p in prompts {
            tok.extend(std::iter::repeat_n(PAD, width - p.len()).chain(p.iter().copied()));
            pos.extend(std::iter::repeat_n(0, width - p.len()).chain(0..p.len() as u32));
        }
        let n = prompts.len();
        let mut cache = model.kv_cache(pad, width + self.budget);
        let prefill = profile::span("decode/prefill");
        let h = model.hidden_cached(
            &Tensor::from_vec(tok, (n, width), device)?,
            &Tensor::from_vec(pos, (n, width), device)?,
            &mut cache,
        )?;
        // The last prompt position of each row, once per sample: the samples share the prefill.
        let last: Vec<u32> = (0..(n * k) as u32)
            .map(|r| (r / k as u32 + 1) * width as u32 - 1)
            .collect();
        let mut h = h.index_select(&Tensor::from_vec(last, n * k, device)?, 0)?;
        drop(prefill);
        if k > 1 {
            cache.repeat_rows(k)?;
        }
        let rows = n * k;
        let mut rngs: Vec<_> = (0..rows)
            .map(|r| sample_stream(self.seed, ids[r / k], r % k))
            .collect();
        let mut gens = vec![
            Generated {
                tokens: Vec::new(),
                finished: false
            };
            rows
        ];
        let mut active: Vec<usize> = (0..rows).collect();
        let mut logits = Vec::new();
        for step in 0..self.budget {
            let chosen = self.next_tokens(&h, &active, &mut rngs, &mut logits)?;
            let mut next = Vec::with_capacity(active.len());
            let mut still = Vec::with_capacity(active.len());
            for (&r, &t) in active.iter().zip(&chosen) {
                if t == EOS {
                    gens[r].finished = true;
                } else {
                    gens[r].tokens.push(t);
                    next.push(t);
                    still.push(r);
                }
            }
            active = still;
            if active.is_empty() || step + 1 == self.budget {
                break;
            }
            let a = active.len();
            let pos: Vec<u32> = active
                .iter()
                .map(|&r| (prompts[r / k].len() + step) as u32)
                .collect();
            cache.set_active(active.clone());
            let _t = profile::span("decode/forward");
            h = model.hidden_cached(
                &Tensor::from_vec(next, (a, 1), device)?,
                &Tensor::from_vec(pos, (a, 1), device)?,
                &mut cache,
            )?;
        }
        Ok(gens.chunks(k).map(|c| c.to_vec()).collect())
    }

    /// The next token of each active row (ascending row order) from its hidden state: the head
    /// at these rows only, then each row's choice over the real vocabulary, rows in parallel.
    fn next_tokens(
        &self,
        h: &Tensor,
        active: &[usize],
        rngs: &mut [ChaCha8Rng],
        logits: &mut Vec<f32>,
    ) -> Result<Vec<u32>> {
        if self.decode == Decode::Greedy && self.model.ops() == Kernels::Composed {
            // The argmax where the logits are (the GPU): one token id a row comes back, not V
            // logits. Like `fastmath::argmax`, candle keeps the first maximum.
            let _t = profile::span("decode/head");
            let real = self.model.logits(h)?.narrow(1, 0, self.n_tokens)?;
            return Ok(real.contiguous()?.argmax(D::Minus1)?.to_vec1::<u32>()?);
        }
        {
            let _t = profile::span("decode/head");
            self.model.logits_into(h, logits)?;
        }
        let _t = profile::span("decode/choose");
        let v = self.model.cfg.vocab_size;
        let mut is_active = vec![false; rngs.len()];
        active.iter().for_each(|&r| is_active[r] = true);
        let rows: Vec<&mut ChaCha8Rng> = rngs
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| is_active[*r])
            .map(|(_, g)| g)
            .collect();
        Ok(logits
            .par_chunks(v)
            .zip(rows)
            .map(|(row, rng)| choose(&row[..self.n_tokens], self.decode, rng))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_the_first_maximum() {
        let mut rng = stream(0, Purpose::Sampling, 0);
        assert_eq!(choose(&[0.1, 2.0, 2.0, -1.0], Decode::Greedy, &mut rng), 1);
    }

    #[test]
    fn top_k_one_is_greedy_and_sampling_is_seeded() {
        let logits = [0.5f32, 1.5, 0.2, 1.4];
        let top1 = Decode::Sample {
            temperature: 1.0,
            top_k: 1,
            top_p: 1.0,
        };
        let mut rng = stream(0, Purpose::Sampling, 0);
        for _ in 0..20 {
            assert_eq!(choose(&logits, top1, &mut rng), 1);
        }
        let s = Decode::Sample {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
        };
        let draw = |seed| {
            let mut r = stream(seed, Purpose::Sampling, 0);
            (0..50)
                .map(|_| choose(&logits, s, &mut r))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        // top-p 0.5 keeps only the two most likely tokens here (0.40 + 0.36 ≥ 0.5).
        let p = Decode::Sample {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.5,
        };
        let mut r = stream(1, Purpose::Sampling, 0);
        for _ in 0..100 {
            assert!(matches!(choose(&logits, p, &mut r), 1 | 3));
        }
    }

    /// Every (prompt, sample) pair draws from a stream of its own: the K samples of a prompt
    /// differ, and sample k of one prompt differs from sample k of another. (Packing the pair
    /// with `&` gives every pair one stream; with `>>`, every prompt below 65,536 the same.)
    #[test]
    fn each_prompt_and_sample_has_its_own_stream() {
        let mut firsts = std::collections::HashSet::new();
        for id in 0..64u64 {
            for k in 0..16 {
                let first = sample_stream(7, id, k).random::<u64>();
                assert!(
                    firsts.insert(first),
                    "prompt {id}, sample {k} repeats a stream"
                );
            }
        }
    }

    /// Logits of 40 and more (trained models reach them) at T = 0.5 draw as the same logits
    /// shifted down to 0 do: the softmax subtracts the maximum first. Without it,
    /// exp((l + max) / T) clamps at e^88.7 and every token is as likely as any other.
    #[test]
    fn large_logits_draw_as_their_shift_to_zero() {
        let logits: Vec<f32> = (0..50).map(|i| 40.0 + (i * 7 % 13) as f32 / 4.0).collect();
        let d = Decode::Sample {
            temperature: 0.5,
            top_k: 0,
            top_p: 1.0,
        };
        let mut r = stream(9, Purpose::Sampling, 0);
        let mut c = vec![0usize; logits.len()];
        (0..20_000).for_each(|_| c[choose(&logits, d, &mut r) as usize] += 1);
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| ((l as f64 - 43.0) / 0.5).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let want: Vec<f64> = w.iter().map(|x| x / total).collect();
        let fit = chi_square_z(&c, &want);
        assert!(fit < 5.0, "z = {fit:.1} against the softmax at T = 0.5");
        let uniform = vec![1.0 / logits.len() as f64; logits.len()];
        let off = chi_square_z(&c, &uniform);
        assert!(
            off > 10.0,
            "z = {off:.1} against every token equally likely"
        );
    }

    /// `restrict` keeps exactly the top-k tokens, then exactly the smallest most-likely set of
    /// them whose mass reaches top-p, as a full sort by (logit desc, id asc) finds them. The
    /// cases mix random logits (rows of 50 to 400 tokens, k around the sorted block of 64)
    /// with a row whose heavy tokens all sit after index 256, so that a nucleus read off the
    /// first tokens without selecting the best of them first reaches the mass with the
    /// wrong ones.
    #[test]
    fn restrict_keeps_exactly_the_top_k_and_the_nucleus() {
        let mut x = 12_345u64;
        let mut next = || {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut rows: Vec<Vec<f32>> = [50, 130, 300, 400]
            .iter()
            .map(|&n| (0..n).map(|_| 6.0 * next()).collect())
            .collect();
        rows.push((0..300).map(|i| if i >= 256 { 3.0 } else { 0.0 }).collect());
        for logits in &rows {
            let max = fastmath::max(logits);
            let w0: Vec<f32> = logits.iter().map(|&l| fastmath::exp(l - max)).collect();
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
            for top_k in [0, 1, 5, 63, 64, 65, 200] {
                for top_p in [0.05, 0.1, 0.5, 0.9, 0.99, 1.0] {
                    let mut kept = order.clone();
                    if top_k > 0 && top_k < kept.len() {
                        kept.truncate(top_k);
                    }
                    if top_p < 1.0 {
                        let total: f64 = kept.iter().map(|&i| w0[i] as f64).sum();
                        let mut acc = 0.0;
                        if let Some(n) = kept.iter().position(|&i| {
                            acc += w0[i] as f64 / total;
                            acc >= top_p
                        }) {
                            kept.truncate(n + 1);
                        }
                    }
                    kept.sort_unstable();
                    let mut w = w0.clone();
                    restrict(logits, &mut w, top_k, top_p);
                    let got: Vec<usize> = (0..w.len()).filter(|&i| w[i] > 0.0).collect();
                    assert_eq!(
                        got,
                        kept,
                        "{} tokens, top-k {top_k}, top-p {top_p}",
                        logits.len()
                    );
                }
            }
        }
    }

    /// Pearson's χ² of counts against probabilities, bins with expected count < 5 pooled, and
    /// its Wilson–Hilferty z score: z > 5 has probability about 3e-7 under the hypothesis.
    fn chi_square_z(counts: &[usize], probs: &[f64]) -> f64 {
        let n: usize = counts.iter().sum();
        let (mut x2, mut bins, mut pool_o, mut pool_e) = (0.0, 0usize, 0.0, 0.0);
        for (&o, &p) in counts.iter().zip(probs) {
            let e = p * n as f64;
            if e < 5.0 {
                pool_o += o as f64;
                pool_e += e;
            } else {
                x2 += (o as f64 - e).powi(2) / e;
                bins += 1;
            }
        }
        if pool_e > 0.0 {
            x2 += (pool_o - pool_e).powi(2) / pool_e.max(1e-12);
            bins += 1;
        }
        let k = (bins - 1) as f64;
        ((x2 / k).powf(1.0 / 3.0) - (1.0 - 2.0 / (9.0 * k))) / (2.0 / (9.0 * k)).sqrt()
    }

    /// Draws at each setting fit that setting's distribution (χ², z < 5: a false failure about
    /// 3e-7 of the time per check) and are rejected against the distribution a defect would
    /// give (temperature ignored, top-k or top-p ignored, a nucleus of the wrong mass), which
    /// the logits make differ by far more than the noise of 40,000 draws (z of 40 and more).
    #[test]
    fn draws_follow_the_softmax_and_its_restrictions() {
        // 300 tokens, logits 0 to 3, so that top-p needs more than the first sorted block of 64.
        let logits: Vec<f32> = (0..300).map(|i| ((i * 37 % 101) as f32) / 33.0).collect();
        let counts = |d: Decode| {
            let mut r = stream(5, Purpose::Sampling, 0);
            let mut c = vec![0usize; logits.len()];
            (0..40_000).for_each(|_| c[choose(&logits, d, &mut r) as usize] += 1);
            c
        };
        let softmax = |t: f64, keep: &dyn Fn(usize) -> bool| {
            let w: Vec<f64> = (0..logits.len())
                .map(|i| {
                    if keep(i) {
                        (logits[i] as f64 / t).exp()
                    } else {
                        0.0
                    }
                })
                .collect();
            let total: f64 = w.iter().sum();
            w.into_iter().map(|x| x / total).collect::<Vec<_>>()
        };
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let full = softmax(1.0, &|_| true);
        let nucleus = |mass: f64| {
            let mut acc = 0.0;
            let n = order
                .iter()
                .position(|&i| {
                    acc += full[i];
                    acc >= mass
                })
                .unwrap();
            order[..=n].to_vec()
        };
        // Fits `want` and not `wrong`; tokens outside `want`'s support are never drawn.
        let check = |what: &str, got: &[usize], want: &[f64], wrong: &[f64]| {
            for (i, (&c, &p)) in got.iter().zip(want).enumerate() {
                assert!(
                    p > 0.0 || c == 0,
                    "{what}: token {i} drawn {c} times, outside the set"
                );
            }
            let fit = chi_square_z(got, want);
            assert!(
                fit < 5.0,
                "{what}: z = {fit:.1} against its own distribution"
            );
            let off = chi_square_z(got, wrong);
            assert!(
                off > 10.0,
                "{what}: z = {off:.1} against the defect's distribution"
            );
        };
        let sample = |temperature, top_k, top_p| Decode::Sample {
            temperature,
            top_k,
            top_p,
        };
        check(
            "T = 1",
            &counts(sample(1.0, 0, 1.0)),
            &full,
            &softmax(0.7, &|_| true),
        );
        check(
            "T = 0.7",
            &counts(sample(0.7, 0, 1.0)),
            &softmax(0.7, &|_| true),
            &full,
        );
        let top10 = &order[..10];
        check(
            "top-k 10",
            &counts(sample(1.0, 10, 1.0)),
            &softmax(1.0, &|i| top10.contains(&i)),
            &softmax(1.0, &|i| order[..20].contains(&i)),
        );
        let (p90, p80) = (nucleus(0.9), nucleus(0.8));
        assert!(
            p90.len() > 64,
            "the nucleus spans more than one sorted block ({})",
            p90.len()
        );
        check(
            "top-p 0.9",
            &counts(sample(1.0, 0, 0.9)),
            &softmax(1.0, &|i| p90.contains(&i)),
            &softmax(1.0, &|i| p80.contains(&i)),
        );
    }
}
