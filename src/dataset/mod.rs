//! Data directories (SPEC §3): build the graph, eval set, holdout and training set from a
//! config, write them atomically with a manifest, reuse or refuse existing ones, read them back.

pub mod evalset;
pub mod example;
pub mod inspect;
pub mod trainset;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{Config, DataConfig, GraphConfig, hex};
use crate::fsutil::{StagingDir, write_atomic};
use crate::graph::{Graph, label_char};
use crate::progress;
use crate::tokenizer::Vocab;
use evalset::{EvalLine, EvalQuery, Split, pair_key};
use example::Example;

pub const MANIFEST: &str = "manifest.json";
pub const GRAPH: &str = "graph.txt";
pub const EVAL: &str = "eval.jsonl";
/// The tuning split, when `data.tune_base_paths_per_hop` > 0.
pub const TUNE: &str = "tune.jsonl";
pub const HOLDOUT: &str = "holdout.txt";
pub const TRAIN: &str = "train.txt";
pub const TOKENIZER: &str = "tokenizer.json";
pub const TIMING: &str = "timing.json";

/// `manifest.json`: what a data directory holds and how it was made. Deterministic: the wall
/// times live in `timing.json` so that equal configs give byte-identical directories.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub lab_version: String,
    pub name: String,
    pub config_hash: String,
    pub config: Sections,
    pub seeds: Seeds,
    pub vocab_size: u32,
    pub counts: Counts,
    pub rejections: Rejections,
    pub label_weights: BTreeMap<String, f64>,
    pub degree: DegreeStats,
    pub sha256: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sections {
    pub graph: GraphConfig,
    pub data: DataConfig,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Seeds {
    /// The world seed; each purpose (graph, eval pairs, eval queries, exploration, shuffle)
    /// derives its own ChaCha stream from it.
    pub world: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Counts {
    pub nodes: u64,
    pub edges: u64,
    pub isolated_nodes: u64,
    pub eval_queries: u64,
    pub eval_pairs: u64,
    /// Queries of the tuning split (absent when there is none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tune_queries: u64,
    /// Eval pairs that are edges of the graph.
    pub eval_edges: u64,
    /// Eval edges that no training path walks along.
    pub eval_edges_unseen_in_train: u64,
    pub train_examples: u64,
    pub edge_coverage_examples: u64,
    pub explore_examples: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Rejections {
    /// Exploration draws with no valid path within h_max_train.
    pub no_path: u64,
    /// Exploration draws that were an eval pair.
    pub holdout_redraws: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DegreeStats {
    pub min: u64,
    pub max: u64,
    pub mean: f64,
}

/// Eval pairs that are edges, and how many of them no training path walks along.
pub fn eval_edge_stats(g: &Graph, eval: &[EvalQuery], train: &[Example]) -> (u64, u64) {
    let eval_edges: HashSet<u64> = eval
        .iter()
        .filter(|q| g.label_between(q.query.u, q.query.v).is_some())
        .map(|q| pair_key(q.query.u, q.query.v))
        .collect();
    let mut seen = HashSet::new();
    for ex in train {
        for w in ex.path.nodes.windows(2) {
            let k = pair_key(w[0], w[1]);
            if eval_edges.contains(&k) {
                seen.insert(k);
            }
        }
    }
    (
        eval_edges.len() as u64,
        (eval_edges.len() - seen.len()) as u64,
    )
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The held-out pairs: every {u, v} of the given queries.
pub fn holdout(eval: &[EvalQuery]) -> HashSet<u64> {
    eval.iter()
        .map(|q| pair_key(q.query.u, q.query.v))
        .collect()
}

/// The default data directory of a config: `data/<name>-<hash prefix>/`, or an existing
/// `data/<other name>-<same hash prefix>/` built from the same world, so that configs that
/// differ only in model or training share one copy of their data.
pub fn default_dir(cfg: &Config) -> PathBuf {
    let hash = cfg.data_hash();
    let suffix = format!("-{}", &hash[..12]);
    let root = PathBuf::from("data");
    let own = root.join(format!("{}{suffix}", cfg.name));
    if own.exists() {
        return own;
    }
    let mut same: Vec<PathBuf> = std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(&suffix))
        .filter(|p| read_manifest(p).is_ok_and(|m| m.config_hash == hash))
        .collect();
    same.sort();
    same.into_iter().next().unwrap_or(own)
}

/// What `ensure` did.
pub enum Outcome {
    Built,
    Reused,
}

/// Make sure `dir` holds the data of `cfg`: reuse it when its config hash matches, refuse a
/// different one unless `force`, and otherwise build it in a staging directory and rename.
pub fn ensure(cfg: &Config, dir: &Path, force: bool) -> Result<(Manifest, Outcome)> {
    if dir.exists() {
        match read_manifest(dir) {
            Ok(m) if m.config_hash == cfg.data_hash() => return Ok((m, Outcome::Reused)),
            Ok(m) if !force => bail!(
                "{}: built from a different config (config hash {}, {} has {}); pass --force to replace it",
                dir.display(),
                &m.config_hash[..12],
                cfg.source.display(),
                &cfg.data_hash()[..12]
            ),
            Err(_) if !force => bail!(
                "{}: exists and is not a lab data directory (no readable {MANIFEST}); pass --force to replace it",
                dir.display()
            ),
            _ => {}
        }
    }
    let staging = StagingDir::new(dir)?;
    let manifest = build_into(cfg, staging.path())?;
    staging.commit()?;
    Ok((manifest, Outcome::Built))
}

/// Generate everything and write it into `dir`, which must exist and be empty.
fn build_into(cfg: &Config, dir: &Path) -> Result<Manifest> {
    let t0 = Instant::now();
    let spin = progress::spinner("graph");
    let g = Graph::generate(&cfg.graph, cfg.n_edges());
    let t_graph = t0.elapsed().as_secs_f64();
    spin.set_message("eval set");
    let eval = evalset::build(cfg, &g)?;
    let tune = match cfg.data.tune_base_paths_per_hop {
        0 => Vec::new(),
        _ => evalset::build_split(cfg, &g, Split::Tune, &holdout(&eval))?,
    };
    let t_eval = t0.elapsed().as_secs_f64() - t_graph;
    spin.finish_and_clear();
    let held_out: Vec<EvalQuery> = eval.iter().chain(&tune).cloned().collect();
    let held = holdout(&held_out);
    let bar = progress::bar(0, "exploration");
    let train = trainset::build(cfg, &g, &held, &bar)?;
    bar.finish_and_clear();
    let t_train = t0.elapsed().as_secs_f64() - t_graph - t_eval;

    let vocab = Vocab::new(&g);
    let mut files: Vec<(&str, Vec<u8>)> = Vec::new();
    files.push((GRAPH, g.to_text().into_bytes()));
    let jsonl = |queries: &[EvalQuery]| -> Result<Vec<u8>> {
        let mut text = String::new();
        for q in queries {
            text.push_str(&serde_json::to_string(&q.to_line(&g))?);
            text.push('\n');
        }
        Ok(text.into_bytes())
    };
    files.push((EVAL, jsonl(&eval)?));
    if !tune.is_empty() {
        files.push((TUNE, jsonl(&tune)?));
    }
    let eval_pairs = holdout(&eval).len();
    let mut pairs: Vec<(u32, u32)> = held_out
        .iter()
        .map(|q| (q.query.u.min(q.query.v), q.query.u.max(q.query.v)))
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let holdout_text: String = pairs
        .iter()
        .map(|&(u, v)| format!("{} {}\n", g.node_name(u), g.node_name(v)))
        .collect();
    files.push((HOLDOUT, holdout_text.into_bytes()));
    let mut train_text = String::with_capacity(train.examples.len() * 48);
    for ex in &train.examples {
        train_text.push_str(&ex.to_line(&g));
        train_text.push('\n');
    }
    files.push((TRAIN, train_text.into_bytes()));
    files.push((TOKENIZER, vocab.tokenizer_json()?.into_bytes()));

    let (eval_edges, unseen) = eval_edge_stats(&g, &eval, &train.examples);
    let degrees: Vec<u64> = (0..g.n_nodes() as u32)
        .map(|x| g.degree(x) as u64)
        .collect();
    let manifest = Manifest {
        lab_version: env!("CARGO_PKG_VERSION").to_string(),
        name: cfg.name.clone(),
        config_hash: cfg.data_hash(),
        config: Sections {
            graph: cfg.graph.clone(),
            data: cfg.data.clone(),
        },
        seeds: Seeds {
            world: cfg.graph.seed,
        },
        vocab_size: vocab.n_tokens(),
        counts: Counts {
            nodes: g.n_nodes() as u64,
            edges: g.edges.len() as u64,
            isolated_nodes: degrees.iter().filter(|&&d| d == 0).count() as u64,
            eval_queries: eval.len() as u64,
            eval_pairs: eval_pairs as u64,
            tune_queries: tune.len() as u64,
            eval_edges,
            eval_edges_unseen_in_train: unseen,
            train_examples: train.examples.len() as u64,
            edge_coverage_examples: train.coverage as u64,
            explore_examples: train.explore as u64,
        },
        rejections: Rejections {
            no_path: train.rejections,
            holdout_redraws: train.holdout_redraws,
        },
        label_weights: g
            .weights
            .iter()
            .enumerate()
            .map(|(l, w)| (label_char(l as u8).to_string(), *w))
            .collect(),
        degree: DegreeStats {
            min: degrees.iter().copied().min().unwrap_or(0),
            max: degrees.iter().copied().max().unwrap_or(0),
            mean: degrees.iter().sum::<u64>() as f64 / degrees.len() as f64,
        },
        sha256: files
            .iter()
            .map(|(name, bytes)| (name.to_string(), hex(&Sha256::digest(bytes))))
            .collect(),
    };
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes)
            .with_context(|| format!("{}: cannot write", dir.join(name).display()))?;
    }
    std::fs::write(
        dir.join(MANIFEST),
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    let timing = serde_json::json!({
        "seconds": {
            "graph": t_graph,
            "eval": t_eval,
            "train": t_train,
            "total": t0.elapsed().as_secs_f64(),
        },
        "threads": rayon::current_num_threads(),
    });
    write_atomic(
        &dir.join(TIMING),
        (serde_json::to_string_pretty(&timing)? + "\n").as_bytes(),
    )?;
    Ok(manifest)
}

pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a lab manifest", path.display()))
}

/// A data directory opened for reading.
pub struct DataDir {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub graph: Graph,
}

impl DataDir {
    pub fn open(dir: &Path) -> Result<DataDir> {
        let manifest = read_manifest(dir)?;
        let weights = manifest.label_weights.values().copied().collect();
        let g = &manifest.config.graph;
        let graph = Graph::read(&dir.join(GRAPH), g, weights)?;
        Ok(DataDir {
            dir: dir.to_path_buf(),
            manifest,
            graph,
        })
    }

    pub fn vocab(&self) -> Vocab {
        Vocab::new(&self.graph)
    }

    pub fn eval(&self) -> Result<Vec<EvalQuery>> {
        self.queries(EVAL)
    }

    /// The tuning split's queries, or None when the data has none.
    pub fn tune(&self) -> Result<Option<Vec<EvalQuery>>> {
        match self.manifest.counts.tune_queries {
            0 => Ok(None),
            _ => self.queries(TUNE).map(Some),
        }
    }

    /// The queries of `split`; a clear error when the data has no tuning split.
    pub fn split(&self, split: Split) -> Result<Vec<EvalQuery>> {
        match split {
            Split::Eval => self.eval(),
            Split::Tune => self.tune()?.with_context(|| {
                format!(
                    "{}: the data directory has no tuning split (data.tune_base_paths_per_hop = 0)",
                    self.dir.display()
                )
            }),
        }
    }

    fn queries(&self, file: &str) -> Result<Vec<EvalQuery>> {
        let path = self.dir.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        text.lines()
            .enumerate()
            .map(|(i, line)| {
                let l: EvalLine = serde_json::from_str(line)
                    .with_context(|| format!("{}:{}: bad eval line", path.display(), i + 1))?;
                EvalQuery::from_line(&self.graph, &l)
                    .with_context(|| format!("{}:{}: bad eval line", path.display(), i + 1))
            })
            .collect()
    }

    pub fn train(&self) -> Result<Vec<Example>> {
        let path = self.dir.join(TRAIN);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("{}: cannot read", path.display()))?;
        text.lines()
            .enumerate()
            .map(|(i, line)| {
                Example::parse(&self.graph, line)
                    .with_context(|| format!("{}:{}: bad training line", path.display(), i + 1))
            })
            .collect()
    }
}
