//! Evaluation (SPEC §6): decode every eval query, parse and score each answer, aggregate, and
//! write `eval/<name>.jsonl` with its summary. Takes the model from `model`, queries from
//! `dataset`; scoring lives in `score`, aggregation in `summary`, decoding in `decode`.

pub mod answers;
pub mod cut_offs;
pub mod decode;
pub mod query;
pub mod score;
pub mod sets;
pub mod summary;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value};

use crate::config::{Config, SamplesAt};
use crate::dataset::DataDir;
use crate::dataset::evalset::{EvalQuery, Split};
use crate::dataset::example::prompt;
use crate::fsutil::write_atomic;
use crate::model::Gpt;
use crate::rundir;
use crate::tags;
use decode::{Decode, Decoder, Generated};
use score::{Alphas, Scored};
use summary::Summary;

/// How to evaluate: decoding, samples per query, seed, score weights.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub decode: Decode,
    pub samples: usize,
    pub seed: u64,
    pub alphas: Alphas,
    pub batch_rows: usize,
    /// Tokens generated at most per answer: `eval.max_new_tokens`, by default 2·h_max_train + 2
    /// (SPEC §6).
    pub budget: usize,
    /// CREATE's patience for the set score, and the extra hops coverage counts (SPEC §7).
    pub gamma: f64,
    pub coverage_k: u32,
    /// Hash symbols before every prompt, fresh per query and sample (0: none): the model's
    /// `train.hash_prefix`.
    pub hash_prefix: usize,
}

impl Settings {
    /// Greedy decoding with the config's weights and batch size.
    pub fn greedy(cfg: &Config) -> Settings {
        let e = &cfg.eval;
        Settings {
            decode: Decode::Greedy,
            samples: 1,
            seed: cfg.train.seed,
            alphas: Alphas::of(e),
            batch_rows: e.batch_rows as usize,
            budget: cfg.decode_budget(),
            gamma: e.gamma,
            coverage_k: e.coverage_k,
            hash_prefix: cfg.train.hash_prefix as usize,
        }
    }

    /// The config's per-epoch sampling: `eval.samples` answers with its temperature, top-k
    /// and top-p (None when `eval.samples` is 0). A hash-conditioned model decodes greedily,
    /// each answer after its own fresh prefix: hash-conditioned sampling.
    pub fn sampled(cfg: &Config) -> Option<Settings> {
        let e = &cfg.eval;
        (e.samples > 0).then(|| Settings {
            decode: if cfg.train.hash_prefix > 0 {
                Decode::Greedy
            } else {
                Decode::Sample {
                    temperature: e.temperature,
                    top_k: e.top_k as usize,
                    top_p: e.top_p,
                }
            },
            samples: e.samples as usize,
            ..Settings::greedy(cfg)
        })
    }
}

/// The answers to one query, with their set figures when there are several.
pub struct Answers<'a> {
    pub query: &'a EvalQuery,
    pub answers: Vec<Scored>,
    pub set: Option<sets::SetFigures>,
}

impl Answers<'_> {
    /// Distinct valid paths among the answers.
    pub fn distinct_valid(&self) -> usize {
        let mut paths: Vec<_> = self
            .answers
            .iter()
            .filter_map(|a| a.path.as_ref())
            .collect();
        paths.sort_by(|a, b| (&a.nodes, &a.labels).cmp(&(&b.nodes, &b.labels)));
        paths.dedup();
        paths.len()
    }
}

/// The stream of the hash prefix before answer `j` of query `id`, keyed `id << 16 | j`: apart
/// from every training prefix (`Purpose::Hash`).
pub fn hash_stream(seed: u64, key: u64) -> rand_chacha::ChaCha8Rng {
    crate::rng::stream(seed, crate::rng::Purpose::EvalHash, key)
}

/// The prefix greedy evaluation puts before each eval query of a hash-conditioned model
/// (answer 0 of each query, in eval-set order).
pub fn greedy_prefixes(cfg: &Config, data: &DataDir) -> Result<Vec<Vec<u32>>> {
    let (vocab, s) = (data.vocab(), Settings::greedy(cfg));
    Ok(data
        .eval()?
        .iter()
        .map(|q| vocab.hash_prefix(&mut hash_stream(s.seed, (q.id as u64) << 16), s.hash_prefix))
        .collect())
}

/// Decode and score every query of `queries`. A hash-conditioned model (`hash_prefix` > 0)
/// gets every answer after a fresh prefix of its own.
pub fn evaluate<'a>(
    model: &Gpt,
    data: &DataDir,
    queries: &'a [EvalQuery],
    s: &Settings,
) -> Result<Vec<Answers<'a>>> {
    let g = &data.graph;
    let vocab = data.vocab();
    let k = s.samples.max(1);
    let (mut prompts, mut ids) = (Vec::new(), Vec::new());
    for q in queries {
        let p = vocab.encode(&prompt(g, &q.query));
        if s.hash_prefix == 0 {
            prompts.push(p);
            ids.push(q.id as u64);
            continue;
        }
        // Hash-conditioned: each answer on its own row, after its own fresh prefix.
        for j in 0..k as u64 {
            let id = (q.id as u64) << 16 | j;
            let mut row = vocab.hash_prefix(&mut hash_stream(s.seed, id), s.hash_prefix);
            row.extend_from_slice(&p);
            prompts.push(row);
            ids.push(id);
        }
    }
    let decoder = Decoder {
        model,
        n_tokens: vocab.n_tokens() as usize,
        budget: s.budget,
        batch_rows: s.batch_rows,
        decode: s.decode,
        samples: if s.hash_prefix == 0 { k } else { 1 },
        seed: s.seed,
    };
    let generated: Vec<Generated> = decoder.run(&prompts, &ids)?.concat();
    let results = queries
        .iter()
        .zip(generated.chunks(k))
        .map(|(q, gens)| {
            let answers = gens
                .iter()
                .map(|a| {
                    let text = vocab.decode(&a.tokens);
                    score::score(g, &q.query, Some(&q.path), &text, a.finished, &s.alphas)
                })
                .collect();
            Answers {
                query: q,
                answers,
                set: None,
            }
        })
        .collect();
    // Sampled answers are a set even when K = 1 (s(S) is then the answer's f, coverage 1/count).
    Ok(if k > 1 || matches!(s.decode, Decode::Sample { .. }) {
        with_sets(data, results, s.gamma, s.coverage_k)
    } else {
        results
    })
}

/// Add set figures (patience `gamma`, coverage within h + `coverage_k` hops) to every query
/// that has answers.
pub fn with_sets<'a>(
    data: &DataDir,
    mut results: Vec<Answers<'a>>,
    gamma: f64,
    coverage_k: u32,
) -> Vec<Answers<'a>> {
    let mut searcher = crate::search::Searcher::new(&data.graph);
    for r in results.iter_mut().filter(|r| !r.answers.is_empty()) {
        r.set = Some(sets::figures(
            &r.answers,
            &r.query.query,
            r.query.hop,
            coverage_k,
            gamma,
            &mut searcher,
        ));
    }
    results
}

/// The summary of every answer, tagged with its query's hop and level.
pub fn summarise(results: &[Answers]) -> Summary {
    let tagged: Vec<(u32, u32, &Scored)> = results
        .iter()
        .flat_map(|r| {
            r.answers
                .iter()
                .map(move |a| (r.query.hop, r.query.level, a))
        })
        .collect();
    let sets: Vec<(u32, u32, &sets::SetFigures)> = results
        .iter()
        .filter_map(|r| r.set.as_ref().map(|s| (r.query.hop, r.query.level, s)))
        .collect();
    summary::summarise(&tagged, &sets)
}

/// One JSONL line: the spec's fields for a single answer, or `samples`, `distinct_valid` and
/// the set figures when there are several.
pub fn line(r: &Answers) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), r.query.id.into());
    if let [one] = r.answers.as_slice() {
        if let Value::Object(fields) = serde_json::to_value(one).expect("scored serializes") {
            m.extend(fields);
        }
    } else {
        m.insert(
            "samples".into(),
            serde_json::to_value(&r.answers).expect("scored serializes"),
        );
        m.insert("distinct_valid".into(), r.distinct_valid().into());
        if let Some(s) = &r.set {
            m.insert(
                "set".into(),
                serde_json::to_value(s).expect("set serializes"),
            );
        }
    }
    Value::Object(m)
}

/// `stem` with `ext` appended (not replacing anything after a dot in the stem).
fn with_suffix(stem: &Path, ext: &str) -> PathBuf {
    let mut s = stem.as_os_str().to_owned();
    s.push(ext);
    PathBuf::from(s)
}

/// Write `<stem>.jsonl` and `<stem>.summary.json` atomically.
pub fn write(stem: &Path, results: &[Answers], summary: &Summary) -> Result<PathBuf> {
    if let Some(dir) = stem.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))?;
    }
    let mut text = String::new();
    for r in results {
        text.push_str(&line(r).to_string());
        text.push('\n');
    }
    let jsonl = with_suffix(stem, ".jsonl");
    write_atomic(&jsonl, text.as_bytes())?;
    write_atomic(
        &with_suffix(stem, ".summary.json"),
        (serde_json::to_string_pretty(summary)? + "\n").as_bytes(),
    )?;
    Ok(jsonl)
}

/// The figures of a summary under their metric names (`eval/creativity`, `eval/err/<type>`…).
pub fn figures(s: &Summary) -> Vec<(String, f64)> {
    let f = &s.figures;
    let mut out = vec![
        (tags::CREATIVITY.to_string(), f.creativity),
        (tags::UTILITY.to_string(), f.utility),
        (
            tags::NOVELTY_VALID.to_string(),
            f.novelty_valid.unwrap_or(f64::NAN),
        ),
        (tags::VALID_RATE.to_string(), f.valid_rate),
    ];
    out.extend(f.cut_off_rate().map(|r| (tags::CUT_OFF.to_string(), r)));
    for (k, v) in &f.errors {
        out.push((tags::err(k), *v as f64));
    }
    if let Some(set) = &s.set {
        let mean_distance = set.mean_distance.unwrap_or(f64::NAN);
        let novelty_valid = set.novelty_valid.unwrap_or(f64::NAN);
        for (tag, v) in [
            (tags::SET_SCORE, set.score),
            (tags::SET_COVERAGE, set.coverage),
            (tags::SET_DISTINCT_VALID, set.distinct_valid),
            (tags::SET_REPEATS, set.repeats),
            (tags::SET_MEAN_DISTANCE, mean_distance),
            (tags::SET_NOVELTY_VALID, novelty_valid),
            (tags::SET_VALID_RATE, f.valid_rate),
            (tags::SET_CREATIVITY, f.creativity),
        ] {
            out.push((tag.to_string(), v));
        }
        for (g, v) in &set.patience {
            out.push((tags::set_patience(g), *v));
        }
    }
    out
}

/// The headline greedy figures of a summary of the tuning split, under `tune/` names.
pub fn tune_figures(s: &Summary) -> Vec<(String, f64)> {
    headline(s)
        .into_iter()
        .map(|(k, v)| (tags::tune(&k), v))
        .collect()
}

/// The `tune/` figures of the tuning-split summary `lab eval --split tune` (or the trainer)
/// wrote at an epoch of a run, None when there is none.
pub fn tune_figures_at(run_dir: &Path, epoch: u64) -> Result<Option<Vec<(String, f64)>>> {
    let path = rundir::eval_stem(run_dir, epoch).with_extension("tune.summary.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let summary: Summary = serde_json::from_str(&text)
        .with_context(|| format!("{}: not an evaluation summary", path.display()))?;
    Ok(Some(tune_figures(&summary)))
}

/// C, U, N of valid answers, validity and the cut-off share of a summary.
pub fn headline(s: &Summary) -> Vec<(String, f64)> {
    let keep = [
        tags::CREATIVITY,
        tags::UTILITY,
        tags::NOVELTY_VALID,
        tags::VALID_RATE,
        tags::CUT_OFF,
    ];
    figures(s)
        .into_iter()
        .filter(|(k, _)| keep.contains(&k.as_str()))
        .collect()
}

/// The evaluation at the end of epoch `epoch` of a run (`last`: the final one): greedy
/// decoding of the whole eval set, written to `eval/epoch-NN.*` (at the last, again under each
/// of `eval.final_budgets`, `eval/epoch-NN.budget<B>.*`), and of the tuning split where
/// the data has one (`eval/epoch-NN.tune.*`, as `lab eval --split tune` writes it), and the
/// sampled answers where `eval.samples_at` says; returns the figures to log.
pub fn epoch(
    cfg: &Config,
    model: &Gpt,
    data: &DataDir,
    epoch: u64,
    last: bool,
    run_dir: &Path,
) -> Result<Vec<(String, f64)>> {
    let queries = data.eval()?;
    let results = evaluate(model, data, &queries, &Settings::greedy(cfg))?;
    let summary = summarise(&results);
    write(&rundir::eval_stem(run_dir, epoch), &results, &summary)?;
    let mut out = figures(&summary);
    for &b in cfg.eval.final_budgets.iter().filter(|_| last) {
        let s = Settings {
            budget: b as usize,
            ..Settings::greedy(cfg)
        };
        let results = evaluate(model, data, &queries, &s)?;
        let summary = summarise(&results);
        let stem = rundir::eval_stem(run_dir, epoch).with_extension(format!("budget{b}"));
        write(&stem, &results, &summary)?;
        out.extend(
            headline(&summary)
                .into_iter()
                .map(|(k, v)| (tags::at_budget(&k, b), v)),
        );
    }
    if let Some(tune) = data.tune()? {
        let results = evaluate(model, data, &tune, &Settings::greedy(cfg))?;
        let summary = summarise(&results);
        write(
            &rundir::eval_stem(run_dir, epoch).with_extension("tune"),
            &results,
            &summary,
        )?;
        out.extend(tune_figures(&summary));
    }
    let sampled =
        Settings::sampled(cfg).filter(|_| last || cfg.eval.samples_at == SamplesAt::Every);
    if let Some(mut s) = sampled {
        if let Some(t) = choose_temperature(cfg, model, data, &s, &mut out)? {
            s.decode = s.decode.at_temperature(t);
        }
        // The sampled answers' set figures are logged under tags::SET.
        let results = evaluate(model, data, &queries, &s)?;
        let summary = summarise(&results);
        write(
            &rundir::eval_stem(run_dir, epoch).with_extension("samples"),
            &results,
            &summary,
        )?;
        out.extend(
            figures(&summary)
                .into_iter()
                .filter(|(k, _)| k.starts_with(tags::SET)),
        );
    }
    Ok(out)
}

/// The temperature of `eval.temperatures` whose samples of the tuning split have the best set
/// score s(S) (the first of equals), for a model that samples (no hash prefix) with a grid; each
/// one's set score and coverage there go to `out`, the choice as `eval/set/temperature`.
fn choose_temperature(
    cfg: &Config,
    model: &Gpt,
    data: &DataDir,
    s: &Settings,
    out: &mut Vec<(String, f64)>,
) -> Result<Option<f64>> {
    let grid = &cfg.eval.temperatures;
    if grid.is_empty() || !matches!(s.decode, Decode::Sample { .. }) {
        return Ok(None);
    }
    let tune = data.split(Split::Tune).context("eval.temperatures")?;
    let mut best: Option<(f64, f64)> = None;
    for &t in grid {
        let at = Settings {
            decode: s.decode.at_temperature(t),
            ..*s
        };
        let set = summarise(&evaluate(model, data, &tune, &at)?)
            .set
            .context("sampled answers have set figures")?;
        out.push((tags::tune_set("score", t), set.score));
        out.push((tags::tune_set("coverage", t), set.coverage));
        if best.is_none_or(|(_, b)| set.score > b) {
            best = Some((t, set.score));
        }
    }
    let t = best.map(|(t, _)| t);
    out.extend(t.map(|t| (tags::SET_TEMPERATURE.to_string(), t)));
    Ok(t)
}

/// Which checkpoint of a run to evaluate.
#[derive(Clone, Copy, Debug)]
pub enum Which {
    Epoch(u64),
    Last,
}

/// A trained run opened for evaluation: its config, data and model.
pub struct Run {
    pub dir: PathBuf,
    pub cfg: Config,
    pub data: DataDir,
    pub model: Gpt,
    /// `epoch-NN` or `step-NNNNNNNN`: the checkpoint evaluated.
    pub name: String,
}

impl Run {
    pub fn open(dir: &Path, which: Which, device: &candle_core::Device) -> Result<Run> {
        use crate::rundir::checkpoint;
        let cfg = Config::load(&dir.join(rundir::CONFIG))?;
        let info = rundir::read_run_info(dir)?;
        let data = DataDir::open(&info.data_dir)?;
        let (path, name) = match which {
            Which::Epoch(n) => {
                let p = checkpoint::epoch_model(dir, n);
                if !p.exists() {
                    anyhow::bail!(
                        "{}: no checkpoint for epoch {n} ({} is missing)",
                        dir.display(),
                        p.display()
                    );
                }
                (p, rundir::epoch_name(n))
            }
            Which::Last => {
                let (ckpt, state) = checkpoint::latest(dir).with_context(|| {
                    format!(
                        "{}: no checkpoint to evaluate (train it first)",
                        dir.display()
                    )
                })?;
                (ckpt.join(checkpoint::MODEL), checkpoint::tag(&state))
            }
        };
        let mut model = Gpt::load(info.model, &path, device)?;
        model.set_precision(crate::config::Precision::resolve(
            cfg.train.precision,
            device,
        ));
        Ok(Run {
            dir: dir.to_path_buf(),
            cfg,
            data,
            model,
            name,
        })
    }
}

/// A human summary of an evaluation: the headline figures, errors, and a row per hop.
pub fn report(title: &str, s: &Summary) -> String {
    use std::fmt::Write as _;
    let f = &s.figures;
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "  creativity {:.4}   utility {:.4}   novelty of valid {}   valid {:.1}%   ({} answers)",
        f.creativity,
        f.utility,
        f.novelty_valid.map_or("-".into(), |n| format!("{n:.4}")),
        100.0 * f.valid_rate,
        f.n
    );
    let errs: Vec<String> = score::ErrorType::ALL
        .iter()
        .map(|e| format!("{} {}", e.name(), f.errors[e.name()]))
        .collect();
    let _ = writeln!(out, "  errors: {}", errs.join(", "));
    let _ = writeln!(
        out,
        "  hallucinated edges: {} with no edge, {} with a wrong label; valid answers repeating a node: {}; equal to the reference: {}",
        f.edge_errors["no_edge"], f.edge_errors["wrong_label"], f.repeats_node, f.is_reference
    );
    if let Some(set) = &s.set {
        let pat: Vec<String> = set
            .patience
            .iter()
            .map(|(g, v)| format!("γ={g}: {v:.3}"))
            .collect();
        let _ = writeln!(
            out,
            "  sets of answers: s(S) {:.4}, coverage {:.4}, {:.2} distinct valid paths and {:.2} repeats per query, mean distance {}",
            set.score,
            set.coverage,
            set.distinct_valid,
            set.repeats,
            set.mean_distance.map_or("-".into(), |d| format!("{d:.3}"))
        );
        let _ = writeln!(out, "  patience curve: {}", pat.join(", "));
    }
    let _ = writeln!(
        out,
        "  {:>4} {:>6} {:>8} {:>11} {:>9}",
        "hop", "n", "valid", "creativity", "novelty"
    );
    let mut hops: Vec<u32> = s.by_hop_level.iter().map(|c| c.hop).collect();
    hops.dedup();
    for h in hops {
        let cells: Vec<&summary::Cell> = s.by_hop_level.iter().filter(|c| c.hop == h).collect();
        let n: usize = cells.iter().map(|c| c.figures.n).sum();
        let w = |get: &dyn Fn(&summary::Figures) -> f64| -> f64 {
            cells
                .iter()
                .map(|c| get(&c.figures) * c.figures.n as f64)
                .sum::<f64>()
                / n.max(1) as f64
        };
        let valid = w(&|f| f.valid_rate);
        let nov: Vec<f64> = cells
            .iter()
            .filter_map(|c| c.figures.novelty_valid)
            .collect();
        let _ = writeln!(
            out,
            "  {h:>4} {n:>6} {:>7.1}% {:>11.4} {:>9}",
            100.0 * valid,
            w(&|f| f.creativity),
            if nov.is_empty() {
                "-".into()
            } else {
                format!("{:.3}", nov.iter().sum::<f64>() / nov.len() as f64)
            }
        );
    }
    out
}

/// `lab eval`: decode and score the queries of `split` (the eval set, or the tuning split,
/// whose files take a `.tune` suffix) with `r`'s model and `s`, write the answers and summary
/// as `eval/<checkpoint>[.tune]<suffix>.*`, and return the report with the decoding speed.
pub fn evaluate_run(r: &Run, s: &Settings, split: Split, suffix: &str) -> Result<String> {
    let queries = r.data.split(split)?;
    let suffix = match split {
        Split::Eval => suffix.to_string(),
        Split::Tune => format!(".tune{suffix}"),
    };
    let t0 = std::time::Instant::now();
    let results = evaluate(&r.model, &r.data, &queries, s)?;
    let secs = t0.elapsed().as_secs_f64();
    let summary = summarise(&results);
    let stem = r.dir.join(rundir::EVAL).join(format!("{}{suffix}", r.name));
    let path = write(&stem, &results, &summary)?;
    let tokens: usize = results
        .iter()
        .flat_map(|a| &a.answers)
        .map(|a| a.output.split_whitespace().count() + 1)
        .sum();
    let mut out = report(
        &format!(
            "{} @ {} ({:?}, {} per query): {}",
            r.dir.display(),
            r.name,
            s.decode,
            s.samples,
            path.display()
        ),
        &summary,
    );
    if s.samples > 1 {
        let distinct: usize = results.iter().map(|a| a.distinct_valid()).sum();
        out += &format!(
            "  distinct valid paths per query: {:.3}\n",
            distinct as f64 / results.len().max(1) as f64
        );
    }
    // A longer budget than the run's: what the answers its budget cut off became.
    let default = r.dir.join(rundir::EVAL).join(format!("{}.jsonl", r.name));
    let default = [default.clone(), default.with_extension("jsonl.gz")]
        .into_iter()
        .find(|p| p.exists());
    if let (Split::Eval, 1, Some(d)) = (split, s.samples, default)
        && s.budget > r.cfg.decode_budget()
    {
        out += &cut_offs::report(&d, r.cfg.decode_budget(), &results, s.budget)?;
    }
    out += &format!(
        "  decoded {} queries in {secs:.2} s: {:.0} generated tokens/s\n",
        queries.len(),
        tokens as f64 / secs
    );
    Ok(out)
}
