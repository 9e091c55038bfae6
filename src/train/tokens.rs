//! The binary token cache: every training example and every eval query with its reference
//! path, tokenized once into `cache/` beside the data it came from (u32 ids plus offsets).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use rayon::prelude::*;

use crate::dataset::DataDir;
use crate::dataset::example::Example;
use crate::fsutil::write_atomic;
use crate::tokenizer::{COLON, EOS, Vocab};

const MAGIC: &[u8; 8] = b"LABTOK01";

/// Tokenized sequences: `tokens[offsets[i]..offsets[i + 1]]` is sequence i, whose first
/// `prompt_len[i]` tokens are the prompt (through `:`), and whose last token is `<eos>`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sequences {
    pub offsets: Vec<u64>,
    pub prompt_len: Vec<u32>,
    pub tokens: Vec<u32>,
}

impl Sequences {
    pub fn len(&self) -> usize {
        self.prompt_len.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prompt_len.is_empty()
    }

    pub fn get(&self, i: usize) -> &[u32] {
        &self.tokens[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Tokenize lines of the sequence format; each must contain `:` and end in `<eos>`.
    pub fn from_lines(vocab: &Vocab, lines: &[String]) -> Result<Sequences> {
        let encoded: Vec<Vec<u32>> = lines.par_iter().map(|l| vocab.encode(l)).collect();
        let mut s = Sequences {
            offsets: vec![0],
            ..Sequences::default()
        };
        for (i, ids) in encoded.into_iter().enumerate() {
            let Some(colon) = ids.iter().position(|&t| t == COLON) else {
                bail!("sequence {i} has no `:`");
            };
            if ids.last() != Some(&EOS) {
                bail!("sequence {i} does not end with <eos>");
            }
            s.prompt_len.push(colon as u32 + 1);
            s.tokens.extend_from_slice(&ids);
            s.offsets.push(s.tokens.len() as u64);
        }
        Ok(s)
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(16 + 12 * self.len() + 4 * self.tokens.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(self.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.tokens.len() as u64).to_le_bytes());
        self.offsets
            .iter()
            .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        self.prompt_len
            .iter()
            .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        self.tokens
            .iter()
            .for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Sequences> {
        let word = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        if b.get(..8)? != MAGIC {
            return None;
        }
        let (n, nt) = (word(8)? as usize, word(16)? as usize);
        let (o0, p0) = (24, 24 + 8 * (n + 1));
        let t0 = p0 + 4 * n;
        if b.len() != t0 + 4 * nt {
            return None;
        }
        let u32s = |from: usize, k: usize| {
            b[from..from + 4 * k]
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect::<Vec<_>>()
        };
        let offsets = (0..=n)
            .map(|i| word(o0 + 8 * i))
            .collect::<Option<Vec<_>>>()?;
        Some(Sequences {
            offsets,
            prompt_len: u32s(p0, n),
            tokens: u32s(t0, nt),
        })
    }
}

/// The training and validation sequences of a data directory, and the tuning split's.
pub struct TokenCache {
    pub train: Sequences,
    pub val: Sequences,
    pub tune: Option<Sequences>,
}

fn cache_path(dir: &Path, what: &str) -> PathBuf {
    dir.join("cache").join(format!("{what}.tok"))
}

/// Load the cache, building it on first use. The cache is derived data: a damaged one is
/// rebuilt, never trusted.
pub fn load_or_build(data: &DataDir) -> Result<TokenCache> {
    let vocab = data.vocab();
    let load = |what: &str, lines: &dyn Fn() -> Result<Vec<String>>| -> Result<Sequences> {
        let path = cache_path(&data.dir, what);
        if let Ok(bytes) = std::fs::read(&path)
            && let Some(s) = Sequences::from_bytes(&bytes)
        {
            return Ok(s);
        }
        let s = Sequences::from_lines(&vocab, &lines()?)
            .with_context(|| format!("{}: tokenizing {what}", data.dir.display()))?;
        std::fs::create_dir_all(path.parent().unwrap())
            .with_context(|| format!("{}: cannot create", path.display()))?;
        write_atomic(&path, &s.to_bytes())?;
        Ok(s)
    };
    let train = load("train", &|| {
        let text = std::fs::read_to_string(data.dir.join(crate::dataset::TRAIN))
            .with_context(|| format!("{}: cannot read train.txt", data.dir.display()))?;
        Ok(text.lines().map(str::to_string).collect())
    })?;
    let lines = |queries: Vec<crate::dataset::evalset::EvalQuery>| -> Vec<String> {
        queries
            .iter()
            .map(|q| {
                Example {
                    query: q.query,
                    path: q.path.clone(),
                }
                .to_line(&data.graph)
            })
            .collect()
    };
    let val = load("val", &|| Ok(lines(data.eval()?)))?;
    let tune = match data.manifest.counts.tune_queries {
        0 => None,
        _ => Some(load("tune", &|| {
            Ok(lines(data.tune()?.unwrap_or_default()))
        })?),
    };
    Ok(TokenCache { train, val, tune })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let v = Vocab {
            node_len: 2,
            n_nodes: 676,
            n_labels: 26,
        };
        let lines = vec![
            "AA QR [ c ] [ ] : AA c QR <eos>".to_string(),
            "AB AC [ ] [ x ] : AB a AC <eos>".to_string(),
        ];
        let s = Sequences::from_lines(&v, &lines).unwrap();
        assert_eq!(s.prompt_len, vec![8, 8]);
        assert_eq!(s.get(1).len(), 12);
        assert_eq!(Sequences::from_bytes(&s.to_bytes()), Some(s.clone()));
        let mut bad = s.to_bytes();
        bad.pop();
        assert_eq!(Sequences::from_bytes(&bad), None);
    }
}
