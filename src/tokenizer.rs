//! The vocabulary of SPEC §4 (specials, then labels, then nodes) and `tokenizer.json`, built
//! with the `tokenizers` crate so that Python's `tokenizers`/`transformers` give the same ids.

use anyhow::{Result, anyhow};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::{AddedToken, Tokenizer};

use crate::graph::{Graph, Label, Node, label_char};

pub const PAD: u32 = 0;
pub const EOS: u32 = 1;
pub const UNK: u32 = 2;
pub const COLON: u32 = 3;
pub const LBRACKET: u32 = 4;
pub const RBRACKET: u32 = 5;
/// Ids 0–5, in order.
pub const SPECIALS: [&str; 6] = ["<pad>", "<eos>", "<unk>", ":", "[", "]"];
/// The first label's id.
const FIRST_LABEL: u32 = SPECIALS.len() as u32;
/// The input of teacherless training's path positions, after the nodes.
pub const DUMMY: &str = "<dummy>";
/// The symbols of hash-conditioning prefixes, written `#a` … `#z`, `#0` … `#9` so that they
/// never collide with labels; their ids follow `<dummy>`.
pub const HASH_SYMBOLS: &str = "abcdefghijklmnopqrstuvwxyz0123456789";

/// The lab's vocabulary for one graph: ids are computed, not looked up.
#[derive(Clone, Copy, Debug)]
pub struct Vocab {
    pub node_len: u32,
    /// The world's nodes: the first `n_nodes` names of `node_len` letters.
    pub n_nodes: u32,
    pub n_labels: u32,
}

impl Vocab {
    pub fn new(g: &Graph) -> Vocab {
        Vocab {
            node_len: g.node_len,
            n_nodes: g.n_nodes() as u32,
            n_labels: g.n_labels,
        }
    }

    /// The vocabulary a config's world will have, without building it.
    pub fn of_config(g: &crate::config::GraphConfig) -> Vocab {
        Vocab {
            node_len: g.node_len,
            n_nodes: g.n_nodes() as u32,
            n_labels: g.n_labels,
        }
    }

    fn first_node(&self) -> u32 {
        FIRST_LABEL + self.n_labels
    }

    fn end_of_nodes(&self) -> u32 {
        self.first_node() + self.n_nodes
    }

    /// Number of real tokens (the model may round its embedding up): specials, labels, nodes,
    /// then `<dummy>` and the 36 hash symbols, appended so that earlier ids never moved.
    pub fn n_tokens(&self) -> u32 {
        self.end_of_nodes() + 1 + HASH_SYMBOLS.len() as u32
    }

    /// The id of `<dummy>`.
    pub fn dummy_id(&self) -> u32 {
        self.end_of_nodes()
    }

    /// The id of hash symbol `i` (0..36).
    pub fn hash_id(&self, i: usize) -> u32 {
        self.end_of_nodes() + 1 + i as u32
    }

    /// `n` hash symbols drawn uniformly from `rng`: a hash-conditioning prefix.
    pub fn hash_prefix(&self, rng: &mut ChaCha8Rng, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| self.hash_id(rng.random_range(0..HASH_SYMBOLS.len())))
            .collect()
    }

    pub fn label_id(&self, l: Label) -> u32 {
        FIRST_LABEL + l as u32
    }

    pub fn node_id(&self, x: Node) -> u32 {
        self.first_node() + x
    }

    /// The label an id stands for, if it is a label id.
    pub fn as_label(&self, id: u32) -> Option<Label> {
        (FIRST_LABEL..self.first_node())
            .contains(&id)
            .then(|| (id - FIRST_LABEL) as Label)
    }

    /// The node an id stands for, if it is a node id.
    pub fn as_node(&self, id: u32) -> Option<Node> {
        (self.first_node()..self.end_of_nodes())
            .contains(&id)
            .then(|| id - self.first_node())
    }

    /// The id of one whitespace-free token; unknown strings map to `<unk>`.
    pub fn token_id(&self, tok: &str) -> u32 {
        if let Some(i) = SPECIALS.iter().position(|s| *s == tok) {
            return i as u32;
        }
        if tok == DUMMY {
            return self.dummy_id();
        }
        if let Some(c) = tok.strip_prefix('#')
            && c.len() == 1
            && let Some(i) = HASH_SYMBOLS.find(c)
        {
            return self.hash_id(i);
        }
        let b = tok.as_bytes();
        if b.len() == 1 && b[0].is_ascii_lowercase() && ((b[0] - b'a') as u32) < self.n_labels {
            return self.label_id(b[0] - b'a');
        }
        if b.len() == self.node_len as usize && b.iter().all(u8::is_ascii_uppercase) {
            let x = b.iter().fold(0u32, |acc, c| acc * 26 + (c - b'A') as u32);
            if x < self.n_nodes {
                return self.node_id(x);
            }
        }
        UNK
    }

    /// The text of an id (empty for ids past the vocabulary).
    pub fn token(&self, id: u32) -> String {
        if let Some(s) = SPECIALS.get(id as usize) {
            return s.to_string();
        }
        if let Some(l) = self.as_label(id) {
            return label_char(l).to_string();
        }
        if id == self.dummy_id() {
            return DUMMY.to_string();
        }
        if id > self.dummy_id() && id < self.n_tokens() {
            let i = (id - self.dummy_id() - 1) as usize;
            return format!("#{}", &HASH_SYMBOLS[i..i + 1]);
        }
        if let Some(x) = self.as_node(id) {
            let mut s = String::new();
            for i in (0..self.node_len).rev() {
                s.push((b'A' + ((x / 26u32.pow(i)) % 26) as u8) as char);
            }
            return s;
        }
        String::new()
    }

    /// Ids of a whitespace-separated text.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.split_whitespace().map(|t| self.token_id(t)).collect()
    }

    /// Tokens of `ids` joined by single spaces.
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .map(|&i| self.token(i))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The HF tokenizer: WordLevel over every token, split on whitespace, with `<pad>`,
    /// `<eos>`, `<unk>` and `<dummy>` registered as special tokens.
    pub fn hf_tokenizer(&self) -> Result<Tokenizer> {
        let vocab: ahash::AHashMap<String, u32> =
            (0..self.n_tokens()).map(|i| (self.token(i), i)).collect();
        let model = WordLevel::builder()
            .vocab(vocab)
            .unk_token(SPECIALS[UNK as usize].to_string())
            .build()
            .map_err(|e| anyhow!("building the tokenizer: {e}"))?;
        let mut tok = Tokenizer::new(model);
        tok.with_pre_tokenizer(Some(WhitespaceSplit));
        tok.add_special_tokens(
            SPECIALS[..3]
                .iter()
                .chain(std::iter::once(&DUMMY))
                .map(|s| AddedToken::from(s.to_string(), true)),
        )
        .map_err(|e| anyhow!("building the tokenizer: {e}"))?;
        Ok(tok)
    }

    /// `tokenizer.json`, pretty-printed.
    pub fn tokenizer_json(&self) -> Result<String> {
        self.hf_tokenizer()?
            .to_string(true)
            .map_err(|e| anyhow!("serializing the tokenizer: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocab {
        Vocab {
            node_len: 2,
            n_nodes: 676,
            n_labels: 26,
        }
    }

    #[test]
    fn layout_matches_spec() {
        let v = vocab();
        assert_eq!(v.n_tokens(), 6 + 26 + 676 + 1 + 36);
        assert_eq!(v.token_id("<dummy>"), 708);
        assert_eq!(v.token_id("#a"), 709);
        assert_eq!(v.token_id("#9"), 744);
        assert_eq!(v.token(744), "#9");
        assert_eq!(v.token_id("#"), UNK);
        assert_eq!(v.token_id("<pad>"), 0);
        assert_eq!(v.token_id("]"), 5);
        assert_eq!(v.token_id("a"), 6);
        assert_eq!(v.token_id("z"), 31);
        assert_eq!(v.token_id("AA"), 32);
        assert_eq!(v.token_id("ZZ"), 32 + 675);
        assert_eq!(v.token_id("AAA"), UNK);
        assert_eq!(v.token_id("Ab"), UNK);
    }

    #[test]
    fn round_trip_and_hf_agree() {
        let v = vocab();
        let text = "AA QR [ c ] [ x ] : AA c KL b QR <eos>";
        let ids = v.encode(text);
        assert_eq!(v.decode(&ids), text);
        let hf = v.hf_tokenizer().unwrap();
        let enc = hf.encode(text, false).unwrap();
        assert_eq!(enc.get_ids(), &ids[..]);
        assert_eq!(hf.decode(&ids, false).unwrap(), text);
        for id in 0..v.n_tokens() {
            assert_eq!(v.token_id(&v.token(id)), id);
        }
    }
}
