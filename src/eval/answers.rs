//! Answers from any source for `lab score`: JSONL lines `{"id": …, "output": "…"}` read
//! leniently (a bad line is reported with its number and skipped), and the eval queries
//! written as plain-text prompts for anyone who wants to ask an LLM.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

use crate::config::Config;
use crate::dataset::DataDir;
use crate::dataset::evalset::EvalQuery;
use crate::dataset::example::prompt;
use crate::eval::score::{Alphas, Scored, score};
use crate::graph::labels_string;
use crate::rundir;

#[derive(Deserialize)]
struct Line {
    id: serde_json::Value,
    output: serde_json::Value,
}

/// Answers grouped by query, in file order, with the problems found on the way.
pub struct Parsed {
    /// (query index, output) per good line.
    pub answers: Vec<(usize, String)>,
    /// One message per skipped line: `FILE:LINE: reason`.
    pub problems: Vec<String>,
}

/// Whether an answer reached the decode budget without `<eos>` (SPEC §6 Revision): its words
/// (node and label tokens) number at least the budget, so the decoder stopped it.
pub fn cut_off(output: &str, budget: usize) -> bool {
    output.split_whitespace().count() >= budget
}

/// `(id, output)` of every line of an answers file the lab wrote (gzipped or not), in file
/// order; any line without both is an error naming the file and line. Lenient reading of
/// answers from other sources is [`read`]'s.
pub fn outputs(path: &Path) -> Result<Vec<(u64, String)>> {
    crate::fsutil::read_text(path)?
        .lines()
        .enumerate()
        .map(|(i, l)| {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("{}: line {}: not JSON", path.display(), i + 1))?;
            match (v["id"].as_u64(), v["output"].as_str()) {
                (Some(id), Some(o)) => Ok((id, o.to_string())),
                _ => anyhow::bail!("{}: line {}: no id and output", path.display(), i + 1),
            }
        })
        .collect()
}

/// Read an answers file. With `sets`, several lines may answer one id; otherwise a repeated
/// id is a problem. Any `output` string is accepted; a non-string `output` is a problem.
pub fn read(path: &Path, queries: &[EvalQuery], sets: bool) -> Result<Parsed> {
    let text = crate::fsutil::read_text(path)?;
    let by_id: HashMap<u64, usize> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| (q.id as u64, i))
        .collect();
    let mut seen = HashSet::new();
    let mut out = Parsed {
        answers: Vec::new(),
        problems: Vec::new(),
    };
    for (n, raw) in text.lines().enumerate() {
        let at = format!("{}:{}", path.display(), n + 1);
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = match serde_json::from_str(raw) {
            Ok(l) => l,
            Err(e) => {
                out.problems
                    .push(format!("{at}: malformed JSON line ({e})"));
                continue;
            }
        };
        let Some(id) = line.id.as_u64() else {
            out.problems.push(format!(
                "{at}: `id` must be a non-negative integer, got {}",
                line.id
            ));
            continue;
        };
        let Some(&q) = by_id.get(&id) else {
            out.problems.push(format!(
                "{at}: unknown id {id} (the eval set has ids 0..{})",
                queries.len()
            ));
            continue;
        };
        let Some(output) = line.output.as_str() else {
            out.problems.push(format!(
                "{at}: `output` must be a string, got {}",
                line.output
            ));
            continue;
        };
        if !seen.insert(id) && !sets {
            out.problems.push(format!(
                "{at}: duplicate id {id} (pass --sets to score several answers per query)"
            ));
            continue;
        }
        out.answers.push((q, output.to_string()));
    }
    Ok(out)
}

/// The eval queries as plain-text prompts, one JSON line `{"id", "prompt"}` each.
pub fn prompts(data: &DataDir) -> Result<String> {
    let g = &data.graph;
    let mut out = String::new();
    for q in data.eval()? {
        let x = &q.query;
        let include = labels_string(x.include);
        let exclude = labels_string(x.exclude);
        let text = format!(
            "In the labelled graph given in graph.txt (each line `UUUlVVV` is an undirected edge between \
             nodes UUU and VVV with label l), find a walk from {u} to {v} that uses {inc} and {exc}. \
             Answer with the walk only, as nodes and labels separated by spaces, for example \
             `{u} a XXX b {v}`. The query in the lab's own format is: {p}",
            u = g.node_name(x.u),
            v = g.node_name(x.v),
            inc = if include.is_empty() {
                "any labels".to_string()
            } else {
                format!("every one of the labels {}", spaced(&include))
            },
            exc = if exclude.is_empty() {
                "may use any label".to_string()
            } else {
                format!("none of the labels {}", spaced(&exclude))
            },
            p = prompt(g, x),
        );
        out.push_str(&serde_json::json!({"id": q.id, "prompt": text}).to_string());
        out.push('\n');
    }
    Ok(out)
}

fn spaced(letters: &str) -> String {
    letters
        .chars()
        .map(String::from)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How `lab score` scores: the weights, the set parameters, and where they came from.
#[derive(Clone)]
pub struct Scoring {
    pub alphas: Alphas,
    pub gamma: f64,
    pub coverage_k: u32,
    /// The decode budget: an answer of this many tokens or more had no `<eos>` within it, and
    /// counts as cut off (none without a config).
    pub budget: usize,
    /// `runs/x/config.toml`, `the SPEC defaults`, … (said in the output).
    pub source: String,
}

impl Scoring {
    pub fn describe(&self) -> String {
        let a = &self.alphas;
        format!(
            "weights: alpha_hops {} alpha_rarity {} alpha_include {} alpha_exclude {}, gamma {}, coverage_k {} (from {})",
            a.hops, a.rarity, a.include, a.exclude, self.gamma, self.coverage_k, self.source
        )
    }
}

/// An answers file scored against a data directory's eval set.
pub struct ScoredFile<'a> {
    pub results: Vec<crate::eval::Answers<'a>>,
    pub summary: crate::eval::summary::Summary,
    /// Good lines, and the eval set's size.
    pub answers: usize,
    pub queries: usize,
    /// One message per skipped line.
    pub problems: Vec<String>,
}

/// Read and score an answers file (as sets with `sets`), every answer checked against the
/// graph and its query, with `scoring`'s weights.
pub fn score_file<'a>(
    d: &DataDir,
    queries: &'a [EvalQuery],
    path: &Path,
    sets: bool,
    scoring: &Scoring,
) -> Result<ScoredFile<'a>> {
    let parsed = read(path, queries, sets)?;
    let mut grouped: Vec<Vec<Scored>> = vec![Vec::new(); queries.len()];
    for (i, text) in &parsed.answers {
        let q = &queries[*i];
        let finished = !cut_off(text, scoring.budget);
        grouped[*i].push(score(
            &d.graph,
            &q.query,
            Some(&q.path),
            text,
            finished,
            &scoring.alphas,
        ));
    }
    let results: Vec<crate::eval::Answers> = queries
        .iter()
        .zip(grouped)
        .filter(|(_, a)| !a.is_empty())
        .map(|(query, answers)| crate::eval::Answers {
            query,
            answers,
            set: None,
        })
        .collect();
    let results = if sets {
        crate::eval::with_sets(d, results, scoring.gamma, scoring.coverage_k)
    } else {
        results
    };
    Ok(ScoredFile {
        summary: crate::eval::summarise(&results),
        results,
        answers: parsed.answers.len(),
        queries: queries.len(),
        problems: parsed.problems,
    })
}

/// Scoring weights given one by one (`lab score`'s flags): each overrides the run's or the
/// config's value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub alpha_hops: Option<f64>,
    pub alpha_rarity: Option<f64>,
    pub alpha_include: Option<f64>,
    pub alpha_exclude: Option<f64>,
    pub gamma: Option<f64>,
    pub coverage_k: Option<u32>,
}

/// The data directory and scoring weights of `lab score`: the run's or config's `[eval]`
/// values, each overridden by its flag, else the SPEC defaults.
pub fn scoring(
    data: Option<PathBuf>,
    run: Option<PathBuf>,
    config: Option<PathBuf>,
    w: &Overrides,
) -> Result<(PathBuf, Scoring)> {
    let (cfg, source, run_data) = match (&run, &config) {
        (Some(r), _) => {
            let p = r.join(rundir::CONFIG);
            let data = rundir::read_run_info(r)?.data_dir;
            (Some(Config::load(&p)?), p.display().to_string(), Some(data))
        }
        (None, Some(c)) => (Some(Config::load(c)?), c.display().to_string(), None),
        (None, None) => (None, "the SPEC defaults".to_string(), None),
    };
    // Answers scored without a config came from no budget of the lab's: none is cut off.
    let budget = cfg.as_ref().map_or(usize::MAX, Config::decode_budget);
    let e = cfg.map(|c| c.eval).unwrap_or_default();
    let mut s = Scoring {
        alphas: Alphas::of(&e),
        gamma: e.gamma,
        coverage_k: e.coverage_k,
        budget,
        source,
    };
    let flags = [
        (&mut s.alphas.hops, w.alpha_hops),
        (&mut s.alphas.rarity, w.alpha_rarity),
        (&mut s.alphas.include, w.alpha_include),
        (&mut s.alphas.exclude, w.alpha_exclude),
        (&mut s.gamma, w.gamma),
    ];
    let mut any = w.coverage_k.is_some();
    for (slot, flag) in flags {
        if let Some(v) = flag {
            *slot = v;
            any = true;
        }
    }
    if let Some(k) = w.coverage_k {
        s.coverage_k = k;
    }
    if any {
        s.source.push_str(", with flags");
    }
    let data = data
        .or(run_data)
        .ok_or_else(|| anyhow::anyhow!("--data: needed without --run"))?;
    Ok((data, s))
}

/// `lab score`: score the answers file against the data directory's eval set and write the
/// scored answers and summary to `out` (without its `.jsonl`), or beside the answers with
/// `.scored` in place of `.jsonl`. Returns the report, and the skipped lines' messages.
pub fn score_and_write(
    data: &Path,
    answers: &Path,
    sets: bool,
    out: Option<PathBuf>,
    scoring: &Scoring,
) -> Result<(String, Vec<String>)> {
    let d = DataDir::open(data)?;
    let queries = d.eval()?;
    let scored = score_file(&d, &queries, answers, sets, scoring)?;
    let stem = match out {
        Some(o) => o.with_extension(""),
        None => answers.with_extension("scored"),
    };
    let path = super::write(&stem, &scored.results, &scored.summary)?;
    let mut text = format!("{}\n", scoring.describe());
    text += &super::report(
        &format!(
            "{}: {} answers to {} of {} queries: {}",
            answers.display(),
            scored.answers,
            scored.results.len(),
            scored.queries,
            path.display()
        ),
        &scored.summary,
    );
    if !scored.problems.is_empty() {
        text += &format!(
            "  {} lines skipped (listed on stderr)\n",
            scored.problems.len()
        );
    }
    Ok((text, scored.problems))
}
