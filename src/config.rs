//! Experiment configs: the TOML file as serde structs (unknown keys rejected), validated once at
//! load into a `Config` the rest of the lab trusts. Every default lives here, with its source.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A config problem, always naming the file, the field and the reason.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {reason}")]
    Read { file: PathBuf, reason: String },
    #[error("{file}:{line}:{col}: malformed TOML: {reason}")]
    Syntax {
        file: PathBuf,
        line: usize,
        col: usize,
        reason: String,
    },
    #[error("{file}: {field}: {reason}")]
    Field {
        file: PathBuf,
        field: String,
        reason: String,
    },
}

/// `[graph]`: the conceptual space (SPEC §1).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GraphConfig {
    /// Letters per node name: 26^node_len names. Paper: 3 (17,576 nodes).
    pub node_len: u32,
    /// Keep only the first `n_nodes` names in lexicographic order (SPEC §1 revision), for
    /// worlds between 26² and 26³ where CPU-sized models learn. Unset: all 26^node_len.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n_nodes: Option<u64>,
    /// Edge labels are the first `n_labels` lowercase letters. Paper: 26.
    pub n_labels: u32,
    /// |E| = round(|V| · avg_degree / 2). Paper: 6.
    pub avg_degree: f64,
    /// Label distribution w. SPEC Decision: zipf with s = 1.
    pub label_dist: LabelDist,
    /// Zipf exponent s, w_l ∝ 1/rank^s.
    pub zipf_s: f64,
    /// Explicit label weights, required when `label_dist = "weights"`.
    pub weights: Option<Vec<f64>>,
    /// How edge labels are drawn: from w (`"weighted"`, SPEC Decision), or uniformly with w
    /// used only to score novelty (`"uniform"`, the paper appendix's reading).
    #[serde(skip_serializing_if = "EdgeLabels::is_weighted")]
    pub edge_labels: EdgeLabels,
    /// The world seed: graph, eval set and training set all derive from it.
    pub seed: u64,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LabelDist {
    Zipf,
    Uniform,
    Weights,
}

/// The draw of edge labels (SPEC §1 revision).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EdgeLabels {
    #[default]
    Weighted,
    Uniform,
}

impl EdgeLabels {
    fn is_weighted(&self) -> bool {
        *self == EdgeLabels::Weighted
    }
}

impl GraphConfig {
    /// |V|: `n_nodes` when set, else every name of `node_len` letters.
    pub fn n_nodes(&self) -> u64 {
        self.n_nodes.unwrap_or_else(|| 26u64.pow(self.node_len))
    }
}

impl Default for GraphConfig {
    fn default() -> Self {
        GraphConfig {
            node_len: 3,
            n_nodes: None,
            n_labels: 26,
            avg_degree: 6.0,
            label_dist: LabelDist::Zipf,
            zipf_s: 1.0,
            weights: None,
            edge_labels: EdgeLabels::Weighted,
            seed: 0,
        }
    }
}

/// `[data]`: the evaluation and training sets (SPEC §3).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Hop counts of the eval base paths. Paper: 1..=6.
    pub eval_hops: Vec<u32>,
    /// Base paths per hop. Paper: 100.
    pub base_paths_per_hop: u32,
    /// Nested constraint levels per base path; level l has l−1 constraints. Paper: 5.
    pub levels: u32,
    /// Probability that a new eval constraint is an inclusion. SPEC: 0.5.
    pub p_inc: f64,
    /// Randomized exploration examples. SPEC Decision: 3 × the edge-coverage count when unset.
    pub n_explore: Option<u64>,
    /// Geometric parameter for |I| and |X| of exploration queries. SPEC: 0.5.
    pub p_geom: f64,
    /// Cap on |I| and on |X| of exploration queries. SPEC: 4.
    pub max_constraints: u32,
    /// Longest training path searched. Paper: 10.
    pub h_max_train: u32,
    /// Base paths per hop of the tuning split (`tune.jsonl`): queries built like the eval
    /// set's on pairs disjoint from it and held out of training too, so that hyperparameters
    /// are chosen on `tune/loss` and never on the eval queries (SPEC Revision: a tuning
    /// split). 0, the default, builds none and leaves the data as it was, byte for byte.
    #[serde(skip_serializing_if = "is_zero")]
    pub tune_base_paths_per_hop: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            eval_hops: (1..=6).collect(),
            base_paths_per_hop: 100,
            levels: 5,
            p_inc: 0.5,
            n_explore: None,
            p_geom: 0.5,
            max_constraints: 4,
            h_max_train: 10,
            tune_base_paths_per_hop: 0,
        }
    }
}

/// `[model]`: the GPT-2 shape (SPEC §5).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    /// Layers L. Default: the 1M-bucket model (a) of the training issue.
    pub n_layer: u32,
    /// Width E.
    pub n_embd: u32,
    /// Heads H; E % H must be 0.
    pub n_head: u32,
    /// Context length. SPEC: 64.
    pub n_positions: u32,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            n_layer: 4,
            n_embd: 128,
            n_head: 4,
            n_positions: 64,
        }
    }
}

/// `[train]`: the optimisation (SPEC §5).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    /// Sequences per optimizer step. Training issue: 64.
    pub batch_size: u32,
    /// Paper: 16 epochs.
    pub epochs: u32,
    /// Peak learning rate. SPEC: by bucket when unset (1e-3 / 6e-4 / 3e-4 for 1M / 10M / 100M).
    pub lr: Option<f64>,
    /// Linear warmup, as a fraction of all steps. SPEC: 2%.
    pub warmup_frac: f64,
    /// Cosine decay ends at lr × this. SPEC: lr/10.
    pub min_lr_frac: f64,
    /// AdamW decoupled weight decay, on tensors of rank >= 2 only. SPEC: 0.1.
    pub weight_decay: f64,
    /// AdamW β1, β2, ε. SPEC: 0.9, 0.95, 1e-8.
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Global gradient-norm clip. SPEC: 1.0.
    pub grad_clip: f64,
    /// The run seed: initialisation and batch order.
    pub seed: u64,
    /// Optimizer steps between mid-epoch checkpoints (0: only at epoch ends). A crash loses at
    /// most this much work.
    pub checkpoint_every: u64,
    /// Optimizer steps between `train/*` log lines.
    pub log_every: u64,
    /// The objective: next-token prediction, or with teacherless copies (Nagarajan et al.
    /// 2025): a fraction of examples also appear with every path input replaced by `<dummy>`.
    pub objective: Objective,
    /// The fraction of examples given a teacherless copy (their code: 0.5).
    pub teacherless_fraction: f64,
    /// Hash-conditioning: this many random symbols `#a`…`#9` before every training example,
    /// drawn per `hash_draw`; evaluation gives each query (and sample) a fresh prefix.
    /// 0 turns it off; their code uses 10.
    pub hash_prefix: u32,
    /// When a training sequence's hash prefix is drawn: `epoch`, fresh every epoch (the
    /// default), or `once`, one per sequence for the whole run, so the model can tie a prefix
    /// to its sequence's answer. Nagarajan et al. read either way (SPEC §7, Decision: when
    /// training hash prefixes are drawn); evaluation gives every answer a fresh prefix.
    #[serde(skip_serializing_if = "HashDraw::is_epoch")]
    pub hash_draw: HashDraw,
    /// Sequences per forward and backward, when fewer than `batch_size` fit in memory: the
    /// batch is split and the gradients summed, weighted by loss tokens, so the optimizer
    /// still steps on `batch_size` sequences (gradient accumulation). Unset: the whole batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_batch: Option<u32>,
    /// The matmuls' input precision. Unset: bf16 on CUDA, fp32 on the CPU (`resolve`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<Precision>,
}

/// `fp32`: everything in f32 (TF32 matmuls on CUDA). `bf16`: mixed precision, as PyTorch's
/// autocast: matmul inputs in bf16 with f32 accumulation; master weights, optimizer state,
/// LayerNorm, softmax and loss in f32.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Bf16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// `train.precision` when set, else bf16 on CUDA and fp32 on the CPU.
    pub fn resolve(set: Option<Precision>, device: &candle_core::Device) -> Precision {
        set.unwrap_or(if device.is_cuda() {
            Precision::Bf16
        } else {
            Precision::Fp32
        })
    }
}

/// When hash prefixes are drawn (`train.hash_draw`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HashDraw {
    #[default]
    Epoch,
    Once,
}

impl HashDraw {
    fn is_epoch(&self) -> bool {
        *self == HashDraw::Epoch
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Ntp,
    Teacherless,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch_size: 64,
            epochs: 16,
            lr: None,
            warmup_frac: 0.02,
            min_lr_frac: 0.1,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            grad_clip: 1.0,
            seed: 0,
            checkpoint_every: 500,
            log_every: 10,
            objective: Objective::Ntp,
            teacherless_fraction: 0.5,
            hash_prefix: 0,
            hash_draw: HashDraw::Epoch,
            micro_batch: None,
            precision: None,
        }
    }
}

/// `[eval]`: scoring and decoding (SPEC §6, §7).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct EvalConfig {
    /// Novelty N = α_h·h + α_r·S(P); utility U = (1 + α_I|I|)(1 + α_X|X|). SPEC Decision: 1.0.
    pub alpha_hops: f64,
    pub alpha_rarity: f64,
    pub alpha_include: f64,
    pub alpha_exclude: f64,
    /// Evaluate every this many epochs (the last epoch always). SPEC: 1, every epoch; a long
    /// run of a small model (a compute-matched width sweep) can thin its evaluations.
    #[serde(skip_serializing_if = "is_one")]
    pub every: u32,
    /// Rows decoded together (prompts × samples). 512: greedy decoding of the paper eval set
    /// with model (a) took 2.38 s against 2.55 s at 256 and 3.16 s at 64 (LAB_PROFILE; the
    /// answers are the same bytes at any value), and a 100M model's cache stays near 1 GB.
    pub batch_rows: u32,
    /// Answers sampled per query at each epoch's evaluation, besides the greedy one (0: off).
    pub samples: u32,
    /// Which evaluations draw those samples: `every` one (the default) or only the `last`
    /// epoch's, a study's set metrics at an eighth of the decoding.
    #[serde(skip_serializing_if = "SamplesAt::is_every")]
    pub samples_at: SamplesAt,
    /// A temperature grid (empty, the default: `temperature` alone). A model without a hash
    /// prefix samples the tuning split at each and draws the eval set's samples at the one
    /// whose set score s(S) was best there: chosen on `tune.jsonl`, never on the eval queries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub temperatures: Vec<f64>,
    /// Sampling temperature, top-k (0: off) and top-p (1.0: off) for those samples.
    pub temperature: f64,
    pub top_k: u32,
    pub top_p: f64,
    /// CREATE's patience γ for the set score s(S) (SPEC §7).
    pub gamma: f64,
    /// Coverage counts valid paths of at most h + coverage_k hops (SPEC §7).
    pub coverage_k: u32,
    /// Tokens generated at most per answer, `<eos>` included; unset: 2·h_max_train + 2 (SPEC
    /// §6). An answer that reaches it without `<eos>` is cut off: a parse failure, counted in
    /// every evaluation's `eval/cut_off` share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<u32>,
    /// Longer budgets to decode the eval set under as well, greedily, at the last evaluation
    /// only: each logged as `eval/budget<B>/…` and written as `eval/epoch-NN.budget<B>.*`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub final_budgets: Vec<u32>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            alpha_hops: 1.0,
            alpha_rarity: 1.0,
            alpha_include: 1.0,
            alpha_exclude: 1.0,
            every: 1,
            batch_rows: 512,
            samples: 0,
            samples_at: SamplesAt::Every,
            temperatures: Vec::new(),
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            gamma: 0.9,
            coverage_k: 2,
            max_new_tokens: None,
            final_budgets: Vec::new(),
        }
    }
}

/// `eval.samples_at`: which evaluations draw `eval.samples` answers per query.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SamplesAt {
    #[default]
    Every,
    Last,
}

impl SamplesAt {
    fn is_every(&self) -> bool {
        *self == SamplesAt::Every
    }
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

/// The file as written: every section optional, unknown keys rejected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    name: Option<String>,
    #[serde(default)]
    graph: GraphConfig,
    #[serde(default)]
    data: DataConfig,
    #[serde(default)]
    model: ModelConfig,
    #[serde(default)]
    train: TrainConfig,
    #[serde(default)]
    eval: EvalConfig,
}

/// Set `path` (dotted) to `v` in a config table, creating sections as needed; a non-table in
/// the way is replaced (a valid config has none).
pub fn set_path(doc: &mut toml::Table, path: &str, v: toml::Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().expect("non-empty path");
    let mut t = doc;
    for p in parts {
        let entry = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = entry.as_table_mut().expect("made a table");
    }
    t.insert(last.to_string(), v);
}

/// A command-line override, `--set KEY=VALUE`: a dotted config key (`train.lr`) and a TOML
/// value (`1e-3`, `6`, `true`, `[1, 2]`, `"text"`; a bare word is a string).
#[derive(Clone, Debug)]
pub struct Override {
    pub text: String,
    pub key: String,
    pub value: toml::Value,
}

impl Override {
    /// Parse one override and check its key and type against the config's structure alone,
    /// so that an error names the override, not the file.
    pub fn parse(text: &str) -> Result<Override, ConfigError> {
        let source = PathBuf::from(format!("--set {text}"));
        let Some((key, raw)) = text.split_once('=') else {
            return Err(ConfigError::Field {
                file: source,
                field: text.to_string(),
                reason: "expected KEY=VALUE, for example train.lr=1e-3".into(),
            });
        };
        let key = key.trim().to_string();
        if key.is_empty() || key.split('.').any(str::is_empty) {
            return Err(ConfigError::Field {
                file: source,
                field: key,
                reason: "expected a dotted config key, for example train.lr".into(),
            });
        }
        let raw = raw.trim();
        let value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(raw.to_string()));
        let mut one = toml::Table::new();
        set_path(&mut one, &key, value.clone());
        let text_one = toml::to_string(&one).expect("a table serializes");
        parse_toml::<ConfigFile>(&text_one, &source).map_err(|e| match e {
            // A line number of the one-line table would only mislead.
            ConfigError::Field {
                file,
                field,
                reason,
            } => ConfigError::Field {
                file,
                field,
                reason: reason
                    .rsplit_once(" (line ")
                    .map_or(reason.clone(), |r| r.0.to_string()),
            },
            other => other,
        })?;
        Ok(Override {
            text: text.to_string(),
            key,
            value,
        })
    }
}

/// Most inclusion labels one query may carry: the search's mask has 2^this states per node.
pub const MAX_INCLUDE: u32 = 8;
/// Longest path the search handles; distances are stored in 6 bits.
pub const MAX_HOPS: u32 = 63;
/// Most edges a graph may have, to keep memory bounded.
pub const MAX_EDGES: u64 = 50_000_000;

/// A validated config. Only `Config::load` and `Config::from_toml` build one.
#[derive(Clone, Debug)]
pub struct Config {
    /// The file it came from, named in every later error.
    pub source: PathBuf,
    pub name: String,
    pub graph: GraphConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub train: TrainConfig,
    pub eval: EvalConfig,
}

/// The resolved config as written to a run directory's `config.toml`.
#[derive(Serialize)]
struct ResolvedFile<'a> {
    name: &'a str,
    graph: &'a GraphConfig,
    data: &'a DataConfig,
    model: &'a ModelConfig,
    train: &'a TrainConfig,
    eval: &'a EvalConfig,
}

/// The part of a config that decides the data directory's bytes.
#[derive(Serialize)]
pub struct DataIdentity<'a> {
    pub graph: &'a GraphConfig,
    pub data: &'a DataConfig,
}

/// The text of a config file, or of the shipped config a missing path names (`tiny`,
/// `100m-L8.toml`): a file always wins over a shipped name.
fn read_config(path: &Path) -> Result<String, ConfigError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => crate::shipped::config(path)
            .map(str::to_string)
            .ok_or_else(|| ConfigError::Read {
                file: path.to_path_buf(),
                reason: format!(
                    "no such file, and no shipped config of that name (shipped: {}; `lab configs` lists them)",
                    crate::shipped::config_names()
                ),
            }),
        Err(e) => Err(ConfigError::Read {
            file: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_config(path)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config".into());
        Config::from_toml(&text, path, &stem)
    }

    /// Load a config file with command-line overrides applied on top, validated together; the
    /// resolved config (what `to_toml` writes into a run) holds them.
    pub fn load_with(path: &Path, overrides: &[Override]) -> Result<Config, ConfigError> {
        if overrides.is_empty() {
            return Config::load(path);
        }
        let text = read_config(path)?;
        parse_toml::<ConfigFile>(&text, path)?;
        let mut doc: toml::Table = parse_toml(&text, path)?;
        for o in overrides {
            set_path(&mut doc, &o.key, o.value.clone());
        }
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "config".into());
        let merged = toml::to_string(&doc).expect("a table serializes");
        Config::from_toml(&merged, path, &stem)
    }

    /// Parse and validate TOML text; `file` is only used in messages, `default_name` when the
    /// file sets no `name`.
    pub fn from_toml(text: &str, file: &Path, default_name: &str) -> Result<Config, ConfigError> {
        let raw: ConfigFile = parse_toml(text, file)?;
        let cfg = Config {
            source: file.to_path_buf(),
            name: raw.name.unwrap_or_else(|| default_name.to_string()),
            graph: raw.graph,
            data: raw.data,
            model: raw.model,
            train: raw.train,
            eval: raw.eval,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn field_error(&self, field: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Field {
            file: self.source.clone(),
            field: field.to_string(),
            reason: reason.into(),
        }
    }

    pub fn n_nodes(&self) -> u64 {
        self.graph.n_nodes()
    }

    pub fn n_edges(&self) -> u64 {
        (self.n_nodes() as f64 * self.graph.avg_degree / 2.0).round() as u64
    }

    /// SHA-256 over the resolved `[graph]` and `[data]` sections: equal hashes, equal data.
    pub fn data_hash(&self) -> String {
        let identity = DataIdentity {
            graph: &self.graph,
            data: &self.data,
        };
        let json = serde_json::to_vec(&identity).expect("config serializes");
        hex(&Sha256::digest(&json))
    }

    /// The bucket rule's parameter count, 12·L·E² (SPEC §5; biases and norms left out, unlike
    /// `GptConfig::non_embedding_params`, which counts every tensor but the embeddings).
    pub fn bucket_params(&self) -> u64 {
        12 * self.model.n_layer as u64 * (self.model.n_embd as u64).pow(2)
    }

    /// The peak learning rate: the config's, or the SPEC default of the model's bucket
    /// (1M / 10M / 100M non-embedding parameters, split at the geometric midpoints).
    pub fn peak_lr(&self) -> f64 {
        self.train.lr.unwrap_or_else(|| {
            let n = self.bucket_params() as f64;
            if n < 3.16e6 {
                1e-3
            } else if n < 3.16e7 {
                6e-4
            } else {
                3e-4
            }
        })
    }

    /// The whole resolved config as TOML, defaults filled in.
    pub fn to_toml(&self) -> String {
        toml::to_string(&ResolvedFile {
            name: &self.name,
            graph: &self.graph,
            data: &self.data,
            model: &self.model,
            train: &self.train,
            eval: &self.eval,
        })
        .expect("config serializes")
    }

    /// SHA-256 of everything that decides a training run's results.
    pub fn run_hash(&self) -> String {
        let json = serde_json::to_vec(&(&self.graph, &self.data, &self.model, &self.train))
            .expect("config serializes");
        hex(&Sha256::digest(&json))
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.validate_world()?;
        self.validate_training()
    }

    fn validate_training(&self) -> Result<(), ConfigError> {
        let m = &self.model;
        let t = &self.train;
        let err = |field: &str, reason: String| Err(self.field_error(field, reason));
        if m.n_layer == 0 || m.n_layer > 256 {
            return err(
                "model.n_layer",
                format!("must be in 1..=256, got {}", m.n_layer),
            );
        }
        if m.n_head == 0 {
            return err("model.n_head", "must be at least 1".to_string());
        }
        if m.n_embd == 0 || !m.n_embd.is_multiple_of(m.n_head) {
            return err(
                "model.n_embd",
                format!(
                    "must be a positive multiple of model.n_head ({}), got {}",
                    m.n_head, m.n_embd
                ),
            );
        }
        // The longest sequence: a hash prefix, u v [ I ] [ X ] :, a path of h_max_train hops, <eos>.
        let longest = self.longest_sequence() + self.train.hash_prefix as u64;
        if (m.n_positions as u64) < longest {
            return err(
                "model.n_positions",
                format!(
                    "{} is shorter than the longest sequence ({longest} tokens: data.h_max_train = {}, \
                     {} constraint labels, train.hash_prefix = {})",
                    m.n_positions,
                    self.data.h_max_train,
                    self.max_query_labels(),
                    self.train.hash_prefix
                ),
            );
        }
        if t.batch_size == 0 {
            return err("train.batch_size", "must be at least 1".to_string());
        }
        if t.micro_batch == Some(0) {
            return err("train.micro_batch", "must be at least 1".to_string());
        }
        if t.epochs == 0 {
            return err("train.epochs", "must be at least 1".to_string());
        }
        if let Some(lr) = t.lr
            && !(lr.is_finite() && lr > 0.0)
        {
            return err("train.lr", format!("must be a positive number, got {lr}"));
        }
        for (field, v) in [
            ("train.warmup_frac", t.warmup_frac),
            ("train.beta1", t.beta1),
            ("train.beta2", t.beta2),
        ] {
            if !(0.0..1.0).contains(&v) {
                return err(field, format!("must be in [0, 1), got {v}"));
            }
        }
        if !(0.0..=1.0).contains(&t.min_lr_frac) {
            return err(
                "train.min_lr_frac",
                format!("must be in [0, 1], got {}", t.min_lr_frac),
            );
        }
        if !(t.weight_decay.is_finite() && t.weight_decay >= 0.0) {
            return err(
                "train.weight_decay",
                format!("must be >= 0, got {}", t.weight_decay),
            );
        }
        if !(t.eps.is_finite() && t.eps > 0.0) {
            return err("train.eps", format!("must be > 0, got {}", t.eps));
        }
        if !(t.grad_clip.is_finite() && t.grad_clip > 0.0) {
            return err(
                "train.grad_clip",
                format!("must be > 0, got {}", t.grad_clip),
            );
        }
        if t.log_every == 0 {
            return err("train.log_every", "must be at least 1".to_string());
        }
        if !(0.0..=1.0).contains(&t.teacherless_fraction) {
            return err(
                "train.teacherless_fraction",
                format!("must be in [0, 1], got {}", t.teacherless_fraction),
            );
        }
        if t.hash_prefix > 32 {
            return err(
                "train.hash_prefix",
                format!("must be at most 32, got {}", t.hash_prefix),
            );
        }
        if t.hash_draw == HashDraw::Once && t.hash_prefix == 0 {
            return err(
                "train.hash_draw",
                "\"once\" draws hash prefixes, but train.hash_prefix is 0".into(),
            );
        }
        self.validate_eval()
    }

    /// `[eval]`: the scoring weights, decoding and set parameters.
    fn validate_eval(&self) -> Result<(), ConfigError> {
        let err = |field: &str, reason: String| Err(self.field_error(field, reason));
        let e = &self.eval;
        for (field, v) in [
            ("eval.alpha_hops", e.alpha_hops),
            ("eval.alpha_rarity", e.alpha_rarity),
            ("eval.alpha_include", e.alpha_include),
            ("eval.alpha_exclude", e.alpha_exclude),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return err(field, format!("must be finite and >= 0, got {v}"));
            }
        }
        if e.every == 0 {
            return err("eval.every", "must be at least 1".to_string());
        }
        if e.batch_rows == 0 {
            return err("eval.batch_rows", "must be at least 1".to_string());
        }
        if !(e.temperature.is_finite() && e.temperature > 0.0) {
            return err(
                "eval.temperature",
                format!("must be > 0, got {}", e.temperature),
            );
        }
        if let Some(t) = e
            .temperatures
            .iter()
            .find(|t| !(t.is_finite() && **t > 0.0))
        {
            return err("eval.temperatures", format!("must all be > 0, got {t}"));
        }
        if !e.temperatures.is_empty() && (e.samples == 0 || self.data.tune_base_paths_per_hop == 0)
        {
            return err(
                "eval.temperatures",
                "a grid needs eval.samples > 0 and a tuning split (data.tune_base_paths_per_hop > 0) to choose on"
                    .to_string(),
            );
        }
        if !(e.top_p > 0.0 && e.top_p <= 1.0) {
            return err("eval.top_p", format!("must be in (0, 1], got {}", e.top_p));
        }
        if !(0.0..=1.0).contains(&e.gamma) {
            return err("eval.gamma", format!("must be in [0, 1], got {}", e.gamma));
        }
        if self.data.eval_hops.iter().max().unwrap_or(&0) + e.coverage_k > MAX_HOPS {
            return err(
                "eval.coverage_k",
                format!("h + coverage_k must stay within {MAX_HOPS} hops"),
            );
        }
        let budgets = e.max_new_tokens.iter().map(|&b| ("eval.max_new_tokens", b));
        let finals = e.final_budgets.iter().map(|&b| ("eval.final_budgets", b));
        let room = self.model.n_positions as u64
            - self.longest_prompt().min(self.model.n_positions as u64);
        for (field, b) in budgets.chain(finals) {
            if b == 0 || b as u64 > room {
                return err(
                    field,
                    format!(
                        "{b} tokens: must be at least 1, and at most {room}: model.n_positions = {} less the longest prompt ({} tokens)",
                        self.model.n_positions,
                        self.longest_prompt()
                    ),
                );
            }
        }
        Ok(())
    }

    /// Tokens generated at most per greedy or sampled answer: `eval.max_new_tokens`, or
    /// 2·h_max_train + 2 (SPEC §6).
    pub fn decode_budget(&self) -> usize {
        self.eval
            .max_new_tokens
            .map_or(2 * self.data.h_max_train as usize + 2, |b| b as usize)
    }

    /// Tokens in the longest prompt: `u v [ ] [ ] :` and the labels, after the hash prefix.
    pub fn longest_prompt(&self) -> u64 {
        self.train.hash_prefix as u64 + 7 + self.max_query_labels()
    }

    /// Most constraint labels one query can carry (eval levels or exploration caps).
    pub fn max_query_labels(&self) -> u64 {
        let explore = 2 * self.data.max_constraints as u64;
        let eval = self.data.levels as u64 - 1;
        explore.max(eval).max(1).min(self.graph.n_labels as u64)
    }

    /// Tokens in the longest possible training sequence.
    pub fn longest_sequence(&self) -> u64 {
        let hops = self
            .data
            .h_max_train
            .max(*self.data.eval_hops.iter().max().unwrap_or(&1)) as u64;
        // u v [ ] [ ] : = 7 tokens, plus the labels; path 2h+1 tokens; <eos>.
        7 + self.max_query_labels() + 2 * hops + 1 + 1
    }

    fn validate_world(&self) -> Result<(), ConfigError> {
        let g = &self.graph;
        let err = |field: &str, reason: String| Err(self.field_error(field, reason));
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return err(
                "name",
                format!(
                    "must be non-empty letters, digits, '-', '_' or '.', got {:?}",
                    self.name
                ),
            );
        }
        if !(1..=4).contains(&g.node_len) {
            return err(
                "graph.node_len",
                format!("must be in 1..=4, got {}", g.node_len),
            );
        }
        if !(1..=26).contains(&g.n_labels) {
            return err(
                "graph.n_labels",
                format!("must be in 1..=26, got {}", g.n_labels),
            );
        }
        let names = 26u64.pow(g.node_len);
        if let Some(k) = g.n_nodes
            && !(2..=names).contains(&k)
        {
            return err(
                "graph.n_nodes",
                format!(
                    "must be in 2..={names} (26^node_len names of {} letters), got {k}",
                    g.node_len
                ),
            );
        }
        let n = self.n_nodes();
        let max_edges = n * (n - 1) / 2;
        if !g.avg_degree.is_finite() || g.avg_degree <= 0.0 {
            return err(
                "graph.avg_degree",
                format!("must be a positive number, got {}", g.avg_degree),
            );
        }
        let m = self.n_edges();
        if m == 0 || m > max_edges {
            return err(
                "graph.avg_degree",
                format!(
                    "{} gives {m} edges, impossible for {n} nodes (a simple graph has 1..={max_edges})",
                    g.avg_degree
                ),
            );
        }
        if m > MAX_EDGES {
            return err(
                "graph.avg_degree",
                format!(
                    "{} gives {m} edges, more than the lab supports ({MAX_EDGES})",
                    g.avg_degree
                ),
            );
        }
        if !g.zipf_s.is_finite() || g.zipf_s < 0.0 {
            return err(
                "graph.zipf_s",
                format!("must be finite and >= 0, got {}", g.zipf_s),
            );
        }
        self.validate_weights()?;
        self.validate_data()
    }

    /// `graph.weights`: one finite, non-negative weight per label, exactly with `label_dist = "weights"`.
    fn validate_weights(&self) -> Result<(), ConfigError> {
        let g = &self.graph;
        let err = |field: &str, reason: String| Err(self.field_error(field, reason));
        match (g.label_dist, &g.weights) {
            (LabelDist::Weights, None) => {
                return err(
                    "graph.weights",
                    "required when label_dist = \"weights\"".to_string(),
                );
            }
            (LabelDist::Weights, Some(w)) => {
                if w.len() != g.n_labels as usize {
                    return err(
                        "graph.weights",
                        format!(
                            "has {} entries, need one per label ({})",
                            w.len(),
                            g.n_labels
                        ),
                    );
                }
                if w.iter().any(|x| !x.is_finite() || *x < 0.0) || w.iter().sum::<f64>() <= 0.0 {
                    return err(
                        "graph.weights",
                        "must be finite, >= 0 and not all zero".to_string(),
                    );
                }
            }
            (_, Some(_)) => {
                return err(
                    "graph.weights",
                    "only allowed with label_dist = \"weights\"".to_string(),
                );
            }
            _ => {}
        }
        Ok(())
    }

    /// `[data]`: the eval grid, constraint levels and training-path lengths.
    fn validate_data(&self) -> Result<(), ConfigError> {
        let g = &self.graph;
        let d = &self.data;
        let err = |field: &str, reason: String| Err(self.field_error(field, reason));
        if d.eval_hops.is_empty() {
            return err("data.eval_hops", "must list at least one hop".to_string());
        }
        let mut hops = d.eval_hops.clone();
        hops.sort_unstable();
        hops.dedup();
        if hops.len() != d.eval_hops.len() {
            return err("data.eval_hops", "must not repeat a hop".to_string());
        }
        if let Some(h) = d.eval_hops.iter().find(|h| !(1..=MAX_HOPS).contains(*h)) {
            return err(
                "data.eval_hops",
                format!("hop {h} is outside 1..={MAX_HOPS}"),
            );
        }
        if d.base_paths_per_hop == 0 {
            return err("data.base_paths_per_hop", "must be at least 1".to_string());
        }
        if d.levels == 0 || d.levels - 1 > g.n_labels || d.levels - 1 > MAX_INCLUDE {
            return err(
                "data.levels",
                format!(
                    "must be in 1..={}: level l adds l-1 distinct labels as constraints, got {}",
                    (g.n_labels + 1).min(MAX_INCLUDE + 1),
                    d.levels
                ),
            );
        }
        if !(0.0..=1.0).contains(&d.p_inc) {
            return err("data.p_inc", format!("must be in [0, 1], got {}", d.p_inc));
        }
        if !(d.p_geom > 0.0 && d.p_geom <= 1.0) {
            return err(
                "data.p_geom",
                format!("must be in (0, 1], got {}", d.p_geom),
            );
        }
        if d.max_constraints > MAX_INCLUDE {
            return err(
                "data.max_constraints",
                format!("must be at most {MAX_INCLUDE}, got {}", d.max_constraints),
            );
        }
        if !(1..=MAX_HOPS).contains(&d.h_max_train) {
            return err(
                "data.h_max_train",
                format!("must be in 1..={MAX_HOPS}, got {}", d.h_max_train),
            );
        }
        if let Some(n) = d.n_explore
            && n > 100_000_000
        {
            return err(
                "data.n_explore",
                format!("must be at most 100000000, got {n}"),
            );
        }
        Ok(())
    }
}

/// Deserialize TOML, turning every failure into one line with the file and the field.
fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, file: &Path) -> Result<T, ConfigError> {
    let syntax = |e: toml::de::Error| {
        let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
        ConfigError::Syntax {
            file: file.to_path_buf(),
            line,
            col,
            reason: one_line(e.message()),
        }
    };
    let de = toml::de::Deserializer::parse(text).map_err(syntax)?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        let (line, _) = inner
            .span()
            .map(|s| line_col(text, s.start))
            .unwrap_or((0, 0));
        let at = if line > 0 {
            format!(" (line {line})")
        } else {
            String::new()
        };
        ConfigError::Field {
            file: file.to_path_buf(),
            field: if field == "." {
                "(top level)".into()
            } else {
                field
            },
            reason: format!("{}{at}", one_line(inner.message())),
        }
    })
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, col)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Lowercase hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, Path::new("t.toml"), "t")
    }

    #[test]
    fn defaults_are_the_paper_world() {
        let c = load("").unwrap();
        assert_eq!(c.n_nodes(), 17_576);
        assert_eq!(c.n_edges(), 52_728);
        assert_eq!(c.data.eval_hops, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn errors_name_file_and_field() {
        let e = load("[graph]\nnode_len = 5\n").unwrap_err().to_string();
        assert_eq!(e, "t.toml: graph.node_len: must be in 1..=4, got 5");
        let e = load("[graph]\nnode_len = \"x\"\n").unwrap_err().to_string();
        assert!(e.starts_with("t.toml: graph.node_len: invalid type"), "{e}");
        let e = load("[graph]\nbogus = 1\n").unwrap_err().to_string();
        assert!(
            e.starts_with("t.toml: graph.bogus: unknown field `bogus`"),
            "{e}"
        );
        let e = load("[graph\n").unwrap_err().to_string();
        assert!(e.starts_with("t.toml:1:"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn hash_depends_on_world_only() {
        let a = load("name = \"a\"").unwrap();
        let b = load("name = \"b\"").unwrap();
        let c = load("[graph]\nseed = 1").unwrap();
        assert_eq!(a.data_hash(), b.data_hash());
        assert_ne!(a.data_hash(), c.data_hash());
    }
}
