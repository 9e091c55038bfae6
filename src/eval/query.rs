//! `lab query`: one query put to a trained model, its answers scored, the set's greedy order
//! and coverage when several were sampled, and the reference path, as the report to print.

use std::fmt::Write as _;

use anyhow::Result;

use crate::dataset::evalset::EvalQuery;
use crate::dataset::example::{parse_query, path_text, prompt};
use crate::eval::{Run, Settings, evaluate, sets};
use crate::rng::{Purpose, stream};
use crate::search::{Path, Searcher};

/// Ask `r`'s model the query `text` (`U V [ I… ] [ X… ]`) with `settings`; the report.
pub fn ask(r: &Run, text: &str, settings: &Settings) -> Result<String> {
    let mut out = String::new();
    let g = &r.data.graph;
    let q = parse_query(g, text)
        .map_err(|e| anyhow::anyhow!("query: {e:#}; the expected form is `U V [ I… ] [ X… ]`, for example \"{} {} [ a ] [ b ]\"", g.node_name(0), g.node_name(1)))?;
    let h_max = r.cfg.data.h_max_train;
    let mut searcher = Searcher::new(g);
    let mut rng = stream(settings.seed, Purpose::Sampling, u64::MAX);
    let reference = searcher.shortest(&q, h_max, &mut rng);
    let eq = EvalQuery {
        id: 0,
        hop: reference.as_ref().map_or(0, |p| p.hops() as u32),
        level: 1 + q.include.count_ones() + q.exclude.count_ones(),
        query: q,
        path: reference.clone().unwrap_or(Path {
            nodes: vec![q.u],
            labels: vec![],
        }),
        n_paths: 0,
    };
    let results = evaluate(&r.model, &r.data, std::slice::from_ref(&eq), settings)?;
    writeln!(
        out,
        "query {}  ({} @ {}, {:?})",
        prompt(g, &q),
        r.dir.display(),
        r.name,
        settings.decode
    )?;
    for (i, a) in results[0].answers.iter().enumerate() {
        let verdict = match a.error {
            None => format!(
                "valid, {} hops: novelty {:.3}, utility {:.1}, creativity {:.3}{}{}",
                a.hops.unwrap_or(0),
                a.novelty.unwrap_or(0.0),
                a.utility,
                a.creativity,
                if a.repeats_node {
                    ", repeats a node"
                } else {
                    ""
                },
                if a.is_reference {
                    ", the reference path"
                } else {
                    ""
                }
            ),
            Some(e) => format!(
                "invalid: {}{}",
                e.name(),
                a.edge_error
                    .map_or(String::new(), |d| format!(" ({})", d.describe()))
            ),
        };
        writeln!(
            out,
            "  answer {}: {}\n      {verdict}",
            i + 1,
            if a.output.is_empty() {
                "(empty)"
            } else {
                &a.output
            }
        )?;
    }
    if let Some(set) = &results[0].set {
        let items = sets::items(&results[0].answers);
        let plain: Vec<sets::Item> = items.iter().map(|(i, _)| i.clone()).collect();
        let g = sets::greedy(&plain);
        writeln!(
            out,
            "set of {} answers: {} distinct valid paths, {} repeated answers; greedy order (CREATE, γ = {}):",
            set.answers, set.distinct_valid, set.repeats, settings.gamma
        )?;
        for (rank, (&i, &gain)) in g.order.iter().zip(&g.gains).enumerate() {
            writeln!(
                out,
                "  {}. {}  f = U·N = {:.3}, min distance {:.3}, contributes γ^{rank}·{gain:.3} = {:.3}",
                rank + 1,
                plain[i].key,
                plain[i].f,
                if plain[i].f > 0.0 {
                    gain / plain[i].f
                } else {
                    0.0
                },
                settings.gamma.powi(rank as i32) * gain
            )?;
        }
        let pat: Vec<String> = set
            .patience
            .iter()
            .map(|(g, v)| format!("γ={g}: {v:.3}"))
            .collect();
        writeln!(
            out,
            "  s(S) = {:.3}; patience curve {}",
            set.score,
            pat.join(", ")
        )?;
        writeln!(
            out,
            "  coverage: {} of the {} valid paths of at most {} hops = {:.4}",
            items
                .iter()
                .filter(|(_, p)| p.hops() as u32 <= eq.hop + settings.coverage_k)
                .count(),
            set.paths_within,
            eq.hop + settings.coverage_k,
            set.coverage
        )?;
    }
    match &reference {
        Some(p) => {
            let d = p.hops();
            let n = searcher.count_walks(&q, d as u32)[d];
            writeln!(
                out,
                "reference (a shortest valid path, by the lab's search): {}\n  {d} hops; {n} valid paths have exactly {d} hops",
                path_text(g, p)
            )?;
        }
        None => writeln!(
            out,
            "reference: no valid path of at most {h_max} hops (data.h_max_train)"
        )?,
    }
    Ok(out)
}
