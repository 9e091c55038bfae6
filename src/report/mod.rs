//! Reports (SPEC §9): the paper's figures from a sweep's `results.csv`, each as SVG and PNG
//! with the CSV behind it, and a `report.md` that shows them. Drawing lives in `plot`.

pub mod arms;
pub mod findings;
pub mod objectives;
pub mod plot;
pub mod stats;
pub mod tables;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::fsutil::write_atomic;
use crate::tags;
use findings::FLOPS;
use plot::{Figure, Heat, Series, render};
use stats::MeanCi;

/// One row of results.csv.
#[derive(Clone)]
pub struct Row(BTreeMap<String, String>);

impl Row {
    /// Whether the table has the column `k` (empty or not in this row).
    pub fn has(&self, k: &str) -> bool {
        self.0.contains_key(k)
    }

    pub fn get(&self, k: &str) -> &str {
        self.0.get(k).map(String::as_str).unwrap_or("")
    }

    pub fn num(&self, k: &str) -> Option<f64> {
        self.0
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|v| v.is_finite())
    }
}

/// Read a CSV written by `lab sweep collect` (quoted fields allowed).
pub fn read_csv(path: &Path) -> Result<Vec<Row>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read", path.display()))?;
    let split = |line: &str| -> Vec<String> {
        let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '"' if quoted && chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                '"' => quoted = !quoted,
                ',' if !quoted => out.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        out.push(cur);
        out
    };
    let mut lines = text.lines();
    let header = split(
        lines
            .next()
            .with_context(|| format!("{}: empty", path.display()))?,
    );
    Ok(lines
        .filter(|l| !l.is_empty())
        .map(|l| Row(header.iter().cloned().zip(split(l)).collect()))
        .collect())
}

/// The last evaluated epoch of every run.
pub fn finals(rows: &[Row]) -> Vec<&Row> {
    let mut best: BTreeMap<&str, &Row> = BTreeMap::new();
    for r in rows {
        let e = r.num("epoch").unwrap_or(0.0);
        let keep = best
            .get(r.get("run"))
            .is_none_or(|b| b.num("epoch").unwrap_or(0.0) < e);
        if keep {
            best.insert(r.get("run"), r);
        }
    }
    best.into_values().collect()
}

fn buckets(rows: &[Row]) -> Vec<String> {
    let mut b: Vec<(f64, String)> = rows
        .iter()
        .map(|r| {
            (
                r.num("non_embedding_params").unwrap_or(0.0),
                r.get("bucket").to_string(),
            )
        })
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut seen = BTreeSet::new();
    b.into_iter()
        .filter(|(_, n)| seen.insert(n.clone()))
        .map(|(_, n)| n)
        .collect()
}

/// A heatmap of `value` over categories of `column` (x) and log-binned FLOPs (y). Each cell
/// first averages each head count's runs (seeds), then takes the mean over head counts or,
/// with `best_head`, the best head count.
fn flops_heatmap(rows: &[&Row], column: &str, value: &str, best_head: bool) -> (Heat, String) {
    let mut cols: Vec<f64> = rows.iter().filter_map(|r| r.num(column)).collect();
    cols.sort_by(f64::total_cmp);
    cols.dedup();
    let logs: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.num(FLOPS))
        .filter(|f| *f > 0.0)
        .map(f64::log10)
        .collect();
    let (lo, hi) = logs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        });
    let epochs: BTreeSet<&str> = rows.iter().map(|r| r.get("epoch")).collect();
    let nbins = epochs.len().clamp(1, 8);
    let width = ((hi - lo) / nbins as f64).max(1e-9);
    let bin = |f: f64| (((f.log10() - lo) / width).floor() as usize).min(nbins - 1);
    let mut acc: BTreeMap<(usize, usize, &str), (f64, usize)> = BTreeMap::new();
    for r in rows {
        let (Some(x), Some(f), Some(v)) = (r.num(column), r.num(FLOPS), r.num(value)) else {
            continue;
        };
        let xi = cols.iter().position(|c| *c == x).unwrap();
        let e = acc.entry((xi, bin(f), r.get("n_head"))).or_insert((0.0, 0));
        e.0 += v;
        e.1 += 1;
    }
    // Per cell: each head count with its mean and number of runs.
    type Heads<'a> = Vec<(&'a str, f64, usize)>;
    let mut per_cell: BTreeMap<(usize, usize), Heads> = BTreeMap::new();
    for (&(x, y, h), &(s, n)) in &acc {
        per_cell
            .entry((x, y))
            .or_default()
            .push((h, s / n as f64, n));
    }
    let how = if best_head {
        "best_head"
    } else {
        "mean_over_heads"
    };
    let mut csv = format!("{column},flops_lo,flops_hi,{value}_{how},heads,runs\n");
    let cells: Vec<(usize, usize, f64)> = per_cell
        .iter()
        .map(|(&(x, y), hs)| {
            let v = if best_head {
                hs.iter().map(|h| h.1).fold(f64::NEG_INFINITY, f64::max)
            } else {
                hs.iter().map(|h| h.1).sum::<f64>() / hs.len() as f64
            };
            let (a, b) = (
                10f64.powf(lo + y as f64 * width),
                10f64.powf(lo + (y + 1) as f64 * width),
            );
            let runs: usize = hs.iter().map(|h| h.2).sum();
            let _ = writeln!(csv, "{},{a:.4e},{b:.4e},{v},{},{runs}", cols[x], hs.len());
            (x, y, v)
        })
        .collect();
    let heat = Heat {
        columns: cols.iter().map(|c| format!("{c:.0}")).collect(),
        rows: (0..nbins)
            .map(|i| format!("{:.1e}", 10f64.powf(lo + (i as f64 + 0.5) * width)))
            .collect(),
        cells,
    };
    (heat, csv)
}

/// Writes figures and their CSVs into `out`, collecting the report's sections.
struct Writer {
    out: PathBuf,
    md: String,
    figures: Vec<PathBuf>,
}

impl Writer {
    fn figure(&mut self, stem: &str, fig: &Figure, csv: &str, what: &str) -> Result<()> {
        let (svg, png) = render(&self.out.join(stem), fig)?;
        write_atomic(&self.out.join(format!("{stem}.csv")), csv.as_bytes())?;
        let _ = writeln!(
            self.md,
            "### {what}\n\n![{what}]({stem}.svg)\n\n[data]({stem}.csv) · `{stem}.png` beside it (not committed)\n"
        );
        self.figures.push(svg);
        self.figures.push(png);
        Ok(())
    }
}

/// Write the report of a sweep directory or a results.csv; returns the path of report.md.
/// The `results.csv` of a sweep or results directory, or the file given.
pub fn csv_of(input: &Path) -> Result<PathBuf> {
    let csv = if input.is_dir() {
        input.join("results.csv")
    } else {
        input.to_path_buf()
    };
    if !csv.exists() {
        bail!(
            "{}: no results.csv (run `lab sweep collect SPEC` first)",
            csv.display()
        );
    }
    Ok(csv)
}

pub fn write(input: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let csv = csv_of(input)?;
    let all = read_csv(&csv)?;
    let arms = arms::load(csv.parent().unwrap_or(Path::new(".")))?;
    // The figures read the first arm (the study's baseline); every arm gets its own verdicts.
    let rows: Vec<Row> = match &arms {
        Some(a) => all.iter().filter(|r| a[0].holds(r)).cloned().collect(),
        None => all.clone(),
    };
    if rows.is_empty() {
        bail!(
            "{}: no rows{} (no run has an evaluated epoch yet)",
            csv.display(),
            arms.as_ref()
                .map(|a| format!(" in arm {:?} of {}", a[0].name, arms::FILE))
                .unwrap_or_default()
        );
    }
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| csv.parent().unwrap_or(Path::new(".")).join("report"));
    std::fs::create_dir_all(&out)
        .with_context(|| format!("{}: cannot create directory", out.display()))?;
    let mut w = Writer {
        out: out.clone(),
        md: format!(
            "# Report: {}\n\nFrom `{}`: {} rows (runs × evaluated epochs). Creativity C is the mean over eval \
             queries of utility × novelty (SPEC §6); FLOPs are cumulative training FLOPs (SPEC §5).\n\n",
            rows[0].get("sweep"),
            csv.display(),
            rows.len()
        ),
        figures: Vec::new(),
    };
    if let Some(a) = &arms {
        let _ = writeln!(
            w.md,
            "The figures read arm `{}` of `{}` ({} rows); each arm's verdicts are below.",
            a[0].name,
            arms::FILE,
            rows.len()
        );
        for (sweep, n) in arms::left_out(a, &all) {
            let _ = writeln!(w.md, "- left out (in no arm): `{sweep}`, {n} rows");
        }
        let _ = writeln!(w.md);
    }
    let all_buckets = buckets(&rows);
    let finals = finals(&rows);

    heatmaps(&mut w, &rows, &all_buckets)?;
    let (depth, width) = findings::groups(&rows);
    curves_at_compute(&mut w, &depth, &width)?;

    hop_depth_figures(&mut w, &findings::hop_depth(&depth))?;

    tradeoff_figure(&mut w, &finals, &all_buckets)?;

    error_figures(&mut w, &rows, &finals, &all_buckets)?;

    cut_off_table(&mut w, &finals);

    compute_figures(&mut w, &rows, &finals, &depth, &all_buckets)?;

    let questions = objectives(&mut w, &rows)?;

    let found = findings::findings(&rows);
    claims_table(&mut w, "The paper's claims", &found)?;
    let mut by_arm = Vec::new();
    for a in arms.iter().flatten().skip(1) {
        let in_arm: Vec<Row> = all.iter().filter(|r| a.holds(r)).cloned().collect();
        if !in_arm.iter().any(|r| a.owns(r)) {
            // Borrowed runs alone would repeat the arm they come from.
            let _ = writeln!(w.md, "## Arm `{}`: none of its own runs yet\n", a.name);
            by_arm.push(serde_json::json!({"arm": a, "rows": 0, "claims": []}));
            continue;
        }
        let f = findings::findings(&in_arm);
        let hops = findings::hop_depth_json(&findings::hop_depth(&findings::groups(&in_arm).0));
        claims_table(
            &mut w,
            &format!(
                "The paper's claims in arm `{}` ({} rows)",
                a.name,
                in_arm.len()
            ),
            &f,
        )?;
        by_arm.push(serde_json::json!({
            "arm": a, "rows": in_arm.len(), "claims": f, "hop_depth": hops,
        }));
    }
    let _ = writeln!(
        w.md,
        "The tests, and the numbers behind each verdict, are in `findings.json`.\n"
    );
    let mut doc = serde_json::json!({
        "input": csv.display().to_string(),
        "command": format!("lab report {}", input.display()),
        "compute_axis": "flops: training FLOPs without the LM head (SPEC §5)",
        "claims": found,
        "hop_depth": findings::hop_depth_json(&findings::hop_depth(&depth)),
    });
    if !questions.is_empty() {
        doc["objectives"] = serde_json::to_value(&questions)?;
    }
    if let Some(a) = &arms {
        doc["arm"] = serde_json::to_value(&a[0])?;
        doc["other_arms"] = serde_json::Value::Array(by_arm);
        doc["left_out"] = serde_json::to_value(arms::left_out(a, &all))?;
    }
    write_atomic(
        &out.join("findings.json"),
        (serde_json::to_string_pretty(&doc)? + "\n").as_bytes(),
    )?;

    let md = out.join("report.md");
    write_atomic(&md, w.md.as_bytes())?;
    Ok(md)
}

/// Figure 3's heatmaps: C by depth and by width against FLOPs, per bucket, mean over head
/// counts and at the best head count.
fn heatmaps(w: &mut Writer, rows: &[Row], all_buckets: &[String]) -> Result<()> {
    let _ = writeln!(w.md, "## Creativity across depth and width (Figure 3)\n");
    let _ = writeln!(
        w.md,
        "Compute is the paper's count, 6·N + 12·L·E·T per token with the LM head left out \
     (`flops`); `results.csv` also has `flops_with_head`.\n"
    );
    for b in all_buckets {
        let in_b: Vec<&Row> = rows.iter().filter(|r| r.get("bucket") == b).collect();
        for (field, stem, what, axis) in [
            ("n_layer", "depth", "Depth", "depth L"),
            ("e_over_l", "width", "Width", "E/L"),
        ] {
            let distinct: BTreeSet<&str> = in_b.iter().map(|r| r.get(field)).collect();
            if distinct.len() < 2 {
                continue;
            }
            for best_head in [false, true] {
                let (heat, data) = flops_heatmap(&in_b, field, tags::CREATIVITY, best_head);
                let (tag, how) = if best_head {
                    ("_best_head", "best head count")
                } else {
                    ("", "mean over head counts")
                };
                let fig = Figure::Heatmap {
                    title: format!("Creativity by {stem}, bucket {b} ({how})"),
                    x_label: axis.into(),
                    y_label: "training FLOPs, LM head excluded".into(),
                    value_label: "C".into(),
                    heat,
                };
                w.figure(
                    &format!("{stem}_{b}{tag}"),
                    &fig,
                    &data,
                    &format!("{what} heatmap, bucket {b}: C by {axis} and FLOPs, {how}"),
                )?;
            }
        }
    }
    Ok(())
}

/// C against depth and against E/L at each group's common compute, a line per group.
fn curves_at_compute(
    w: &mut Writer,
    depth: &[findings::Group],
    width: &[findings::Group],
) -> Result<()> {
    for (groups, key, axis, stem, flops) in [
        (depth, "n_layer", "depth L", "depth_curve", FLOPS),
        (
            width,
            "e_over_l",
            "E/L",
            "width_curve",
            findings::FLOPS_WITH_HEAD,
        ),
    ] {
        let mut data = format!("group,{key},common_{flops},c_mean,c_lo,c_hi,runs\n");
        let mut series = Vec::new();
        for (b, rs) in groups.iter() {
            let (common, by) = findings::at_common_compute(rs, key, flops);
            let mut s = Series::line(b);
            for (k, v) in by {
                let m = MeanCi::of(&v);
                let k = f64::from_bits(k);
                let _ = writeln!(
                    data,
                    "{b},{k},{common:.4e},{},{},{},{}",
                    m.mean, m.lo, m.hi, m.n
                );
                s.push_interval(k, m.mean, m.lo, m.hi);
            }
            series.push(s);
        }
        if series.is_empty() {
            continue;
        }
        let fig = Figure::Lines {
            title: format!("Creativity by {axis} at equal compute (mean, 95% CI over seeds)"),
            x_label: axis.into(),
            y_label: "C at the largest compute every run reached".into(),
            series,
            log_x: key == "n_layer",
            log_y: false,
        };
        w.figure(
            stem,
            &fig,
            &data,
            &format!(
                "C against {axis} at equal compute, a line per group: mean over seeds with a \
                 95% t-interval"
            ),
        )?;
    }

    Ok(())
}

/// Figure 4: pooled normalised novelty against the number of constraints, a line per bucket.
fn tradeoff_figure(w: &mut Writer, finals: &[&Row], all_buckets: &[String]) -> Result<()> {
    let _ = writeln!(w.md, "## The novelty–utility tradeoff (Figure 4)\n");
    let mut data = String::from("bucket,constraints,novelty_pooled_mean,lo,hi,runs\n");
    let mut series = Vec::new();
    for b in all_buckets {
        let mut s = Series::line(b);
        for c in 0..16 {
            let v: Vec<f64> = finals
                .iter()
                .filter(|r| r.get("bucket") == b)
                .filter_map(|r| r.num(&tags::novelty_pooled(c)))
                .collect();
            if !v.is_empty() {
                let m = MeanCi::of(&v);
                let _ = writeln!(data, "{b},{c},{},{},{},{}", m.mean, m.lo, m.hi, m.n);
                s.push_interval(c as f64, m.mean, m.lo, m.hi);
            }
        }
        series.push(s);
    }
    let fig = Figure::Lines {
        title: "Novelty of valid answers against utility demanded (mean, 95% CI)".into(),
        x_label: "constraints |I| + |X|".into(),
        y_label: "pooled novelty / novelty of 1-hop answers".into(),
        series,
        log_x: false,
        log_y: false,
    };
    w.figure(
        "tradeoff",
        &fig,
        &data,
        "Normalised novelty against the number of constraints, a line per bucket: every valid \
         answer of a constraint count pooled, over the mean of the valid 1-hop answers at that \
         count; runs at their last epoch, mean and 95% t-interval over runs",
    )?;
    Ok(())
}

/// A cell of the cut-off table: its bucket and the bits of L, E, H and lr.
type Cell = (String, [u64; 4]);

/// The decode budget's share of cut-off answers per cell (bucket, L, E, H, lr) at each run's
/// last evaluation, beside C: a budget that censors long answers moves C most where the models
/// write long answers (SPEC §6 Revision). Nothing without the column.
fn cut_off_table(w: &mut Writer, finals: &[&Row]) {
    let mut cells: BTreeMap<Cell, Vec<(f64, f64)>> = BTreeMap::new();
    for r in finals {
        if let (Some(cut), Some(c)) = (r.num(tags::CUT_OFF), r.num(tags::CREATIVITY)) {
            let key =
                ["n_layer", "n_embd", "n_head", "lr"].map(|k| r.num(k).unwrap_or(0.0).to_bits());
            cells
                .entry((r.get("bucket").to_string(), key))
                .or_default()
                .push((c, cut));
        }
    }
    if cells.is_empty() {
        return;
    }
    let _ = writeln!(
        w.md,
        "## The decode budget: answers cut off (SPEC §6)
"
    );
    let _ = writeln!(
        w.md,
        "Share of greedy answers that reached the decode budget without `<eos>` (scored as \
         parse failures), per cell at each run's last evaluation, mean over runs (range), \
         beside C.\n"
    );
    let _ = writeln!(w.md, "| bucket | L | E | H | lr | runs | C | cut off |");
    let _ = writeln!(w.md, "|---|---|---|---|---|---|---|---|");
    for ((b, key), v) in &cells {
        let [l, e, h, lr] = key.map(f64::from_bits);
        let n = v.len() as f64;
        let c = v.iter().map(|x| x.0).sum::<f64>() / n;
        let cuts: Vec<f64> = v.iter().map(|x| x.1).collect();
        let mean = cuts.iter().sum::<f64>() / n;
        let (lo, hi) = cuts
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                (a.min(*x), b.max(*x))
            });
        let _ = writeln!(
            w.md,
            "| {b} | {l} | {e} | {h} | {lr} | {} | {c:.3} | {:.1}% ({:.1}–{:.1}%) |",
            v.len(),
            100.0 * mean,
            100.0 * lo,
            100.0 * hi
        );
    }
    let _ = writeln!(w.md);
}

/// Figure 5: each error type's mean count per run, and the hallucination/invalid-path roll-up.
fn error_figures(
    w: &mut Writer,
    rows: &[Row],
    finals: &[&Row],
    all_buckets: &[String],
) -> Result<()> {
    let _ = writeln!(w.md, "## Error types (Figure 5)\n");
    for (prefix, stem, what, log) in [
        (
            tags::ERR,
            "errors",
            "Error types (mean count per run)",
            true,
        ),
        (
            tags::ROLLUP,
            "errors_rollup",
            "Hallucination against invalid path (mean count per run, 95% CI)",
            false,
        ),
    ] {
        let types: Vec<String> = rows[0]
            .0
            .keys()
            .filter_map(|k| k.strip_prefix(prefix).map(str::to_string))
            .collect();
        let mut data = String::from("bucket,error,mean_count,lo,hi,runs\n");
        let (mut series, mut spread) = (Vec::new(), Vec::new());
        for b in all_buckets {
            let in_b: Vec<&&Row> = finals.iter().filter(|r| r.get("bucket") == b).collect();
            let ms: Vec<MeanCi> = types
                .iter()
                .map(|t| {
                    let v: Vec<f64> = in_b
                        .iter()
                        .filter_map(|r| r.num(&format!("{prefix}{t}")))
                        .collect();
                    MeanCi::of(&v)
                })
                .collect();
            for (t, m) in types.iter().zip(&ms) {
                let _ = writeln!(data, "{b},{t},{},{},{},{}", m.mean, m.lo, m.hi, m.n);
            }
            series.push((b.clone(), ms.iter().map(|m| m.mean).collect()));
            spread.push(
                ms.iter()
                    .map(|m| if m.n >= 2 { m.half() } else { 0.0 })
                    .collect(),
            );
        }
        let fig = Figure::Bars {
            title: format!("{what}, last epoch"),
            y_label: if log {
                "answers (log scale)"
            } else {
                "answers"
            }
            .into(),
            categories: types
                .iter()
                .map(|t| {
                    t.replace("hallucinated_", "halluc. ")
                        .replace("_violation", " viol.")
                })
                .collect(),
            series,
            spread: (!log).then_some(spread),
        };
        w.figure(stem, &fig, &data, &format!("{what}, by bucket"))?;
    }
    Ok(())
}

/// C against compute per depth and bucket, every figure against FLOPs, and the set figures.
fn compute_figures(
    w: &mut Writer,
    rows: &[Row],
    finals: &[&Row],
    depth: &[findings::Group],
    all_buckets: &[String],
) -> Result<()> {
    let _ = writeln!(w.md, "## Creativity against compute\n");
    for (b, rs) in depth {
        let mut data = String::from("bucket,n_layer,epoch,flops_mean,c_mean,c_lo,c_hi,runs\n");
        let mut by: BTreeMap<(u64, u64), Vec<&Row>> = BTreeMap::new();
        for r in rs {
            let (Some(l), Some(e)) = (r.num("n_layer"), r.num("epoch")) else {
                continue;
            };
            by.entry((l as u64, e as u64)).or_default().push(r);
        }
        let mut series: BTreeMap<u64, Series> = BTreeMap::new();
        for ((l, e), v) in by {
            let f: Vec<f64> = v.iter().filter_map(|r| r.num(FLOPS)).collect();
            let c: Vec<f64> = v.iter().filter_map(|r| r.num(tags::CREATIVITY)).collect();
            let (fm, m) = (MeanCi::of(&f).mean, MeanCi::of(&c));
            let _ = writeln!(
                data,
                "{b},{l},{e},{fm:.4e},{},{},{},{}",
                m.mean, m.lo, m.hi, m.n
            );
            series
                .entry(l)
                .or_insert_with(|| Series::line(&format!("L = {l}")))
                .push_interval(fm, m.mean, m.lo, m.hi);
        }
        let fig = Figure::Lines {
            title: format!("Creativity against compute by depth, bucket {b} (mean, 95% CI)"),
            x_label: "training FLOPs, LM head excluded".into(),
            y_label: "creativity C".into(),
            series: series.into_values().collect(),
            log_x: true,
            log_y: false,
        };
        w.figure(
            &format!("compute_{b}"),
            &fig,
            &data,
            &format!(
                "C against compute, a line per depth, bucket {b}: mean over seeds at each \
                 evaluation with a 95% t-interval"
            ),
        )?;
    }
    against_flops(
        w,
        rows,
        all_buckets,
        tags::CREATIVITY,
        "creativity C",
        "creativity_flops",
    )?;

    if rows.iter().any(|r| r.num(tags::SET_SCORE).is_some()) {
        let _ = writeln!(w.md, "## Sets of sampled answers (SPEC §7)\n");
        against_flops(
            w,
            rows,
            all_buckets,
            tags::SET_SCORE,
            "set score s(S)",
            "set_score_flops",
        )?;
        against_flops(
            w,
            rows,
            all_buckets,
            tags::SET_COVERAGE,
            "coverage of the valid paths",
            "coverage_flops",
        )?;
        let mut data = String::from("bucket,run,coverage,novelty_valid\n");
        let mut series = Vec::new();
        for b in all_buckets {
            let mut pts = Vec::new();
            for r in finals.iter().filter(|r| r.get("bucket") == b) {
                if let (Some(c), Some(n)) =
                    (r.num(tags::SET_COVERAGE), r.num(tags::SET_NOVELTY_VALID))
                {
                    let _ = writeln!(data, "{b},{},{c},{n}", r.get("run"));
                    pts.push((c, n));
                }
            }
            series.push(Series::scatter(b, pts));
        }
        let fig = Figure::Lines {
            title: "Novelty against coverage, one point per model".into(),
            x_label: "coverage of the valid paths".into(),
            y_label: "mean novelty of valid sampled answers".into(),
            series,
            log_x: false,
            log_y: false,
        };
        w.figure(
            "novelty_coverage",
            &fig,
            &data,
            "The novelty–coverage tradeoff measured on sets: a point per model at its last epoch",
        )?;
    }
    Ok(())
}

/// Creativity by hop count, a line per depth (mean, 95% CI over runs at their last
/// evaluation), one figure per bucket: where depth's effect could change sign with the hops.
fn hop_depth_figures(w: &mut Writer, cells: &[findings::HopDepth]) -> Result<()> {
    let mut by: BTreeMap<&str, Vec<&findings::HopDepth>> = BTreeMap::new();
    for c in cells {
        by.entry(&c.bucket).or_default().push(c);
    }
    if !by.is_empty() {
        let _ = writeln!(w.md, "## Creativity by hop count and depth\n");
    }
    for (b, cs) in by {
        let mut data = String::from("bucket,hop,n_layer,c_mean,c_lo,c_hi,runs\n");
        let mut lines: BTreeMap<u64, Series> = BTreeMap::new();
        for c in &cs {
            for (l, m) in &c.by_depth {
                let _ = writeln!(
                    data,
                    "{b},{},{l},{},{},{},{}",
                    c.hop, m.mean, m.lo, m.hi, m.n
                );
                lines
                    .entry(*l)
                    .or_insert_with(|| Series::line(&format!("L = {l}")))
                    .push_interval(c.hop as f64, m.mean, m.lo, m.hi);
            }
        }
        let fig = Figure::Lines {
            title: format!("Creativity by hop count, bucket {b} (mean, 95% CI over seeds)"),
            x_label: "hops".into(),
            y_label: "C over that hop's eval queries, last evaluation".into(),
            series: lines.into_values().collect(),
            log_x: false,
            log_y: false,
        };
        w.figure(
            &format!("hop_depth_{b}"),
            &fig,
            &data,
            &format!(
                "C by hop count, a line per depth, bucket {b}: does depth help only on many hops?"
            ),
        )?;
    }
    Ok(())
}

/// A markdown table of claims and their verdicts under `title`.
fn claims_table(w: &mut Writer, title: &str, found: &[findings::Finding]) -> Result<()> {
    let _ = writeln!(w.md, "## {title}\n");
    verdict_table(w, ["claim", "verdict"], found)
}

/// A numbered test and its outcome, a row of [`verdict_table`].
trait Tested {
    fn row(&self) -> (u32, &str, &impl serde::Serialize, &str);
}

impl Tested for findings::Finding {
    fn row(&self) -> (u32, &str, &impl serde::Serialize, &str) {
        (self.claim, self.name, &self.verdict, &self.statistic)
    }
}

impl Tested for objectives::Question {
    fn row(&self) -> (u32, &str, &impl serde::Serialize, &str) {
        (self.question, self.name, &self.answer, &self.statistic)
    }
}

/// A markdown table of numbered tests: `head` names the first two columns, then the statistic.
fn verdict_table<T: Tested>(w: &mut Writer, head: [&str; 2], tests: &[T]) -> Result<()> {
    let _ = writeln!(
        w.md,
        "| {} | {} | statistic |\n| --- | --- | --- |",
        head[0], head[1]
    );
    for t in tests {
        let (n, name, verdict, statistic) = t.row();
        let verdict = serde_json::to_value(verdict)?;
        let _ = writeln!(
            w.md,
            "| {n}. {name} | {} | {statistic} |",
            verdict.as_str().unwrap_or("")
        );
    }
    let _ = writeln!(w.md);
    Ok(())
}

/// When runs differ by objective or hash prefix: greedy creativity, set score and coverage per
/// (bucket, depth, setting) at each run's last evaluation, mean and 95% interval over seeds;
/// and the four questions' answers (`objectives::questions`).
fn objectives(w: &mut Writer, rows: &[Row]) -> Result<Vec<objectives::Question>> {
    if !objectives::varies(rows) {
        return Ok(Vec::new());
    }
    let mut data = String::from("bucket,n_layer,setting,metric,mean,lo,hi,runs\n");
    let (mut cats, mut cells) = (Vec::new(), Vec::new());
    for ((bucket, depth), by) in objectives::cells(rows) {
        for (setting, rs) in by {
            cats.push(format!("{bucket} L{depth} {}", setting.label()));
            cells.push(((bucket.clone(), depth, setting), findings::finals(&rs)));
        }
    }
    let (mut series, mut spread) = (Vec::new(), Vec::new());
    for (col, name, scale) in [
        (tags::CREATIVITY, "greedy creativity C", 1.0),
        (tags::SET_SCORE, "set score s(S)", 1.0),
        (tags::SET_COVERAGE, "coverage x 100", 100.0),
    ] {
        let (mut means, mut halves) = (Vec::new(), Vec::new());
        for ((bucket, depth, setting), rs) in &cells {
            let v: Vec<f64> = rs.iter().filter_map(|r| r.num(col)).collect();
            let m = MeanCi::of(&v);
            let _ = writeln!(
                data,
                "{bucket},{depth},{},{col},{},{},{},{}",
                setting.label(),
                m.mean,
                m.lo,
                m.hi,
                m.n
            );
            means.push(if m.n > 0 { m.mean * scale } else { 0.0 });
            halves.push(if m.half().is_finite() {
                m.half() * scale
            } else {
                0.0
            });
        }
        series.push((name.to_string(), means));
        spread.push(halves);
    }
    let _ = writeln!(w.md, "## Training objectives\n");
    let fig = Figure::Bars {
        title: "Objectives at the last evaluation (mean, 95% CI over seeds)".into(),
        y_label: "value".into(),
        categories: cats,
        series,
        spread: Some(spread),
    };
    w.figure(
        "objectives",
        &fig,
        &data,
        "Greedy creativity, set score and coverage per bucket, depth, objective and hash setting",
    )?;
    let qs = objectives::questions(rows);
    verdict_table(w, ["question", "answer"], &qs)?;
    Ok(qs)
}

/// A figure of `col` against cumulative FLOPs: every run at every epoch, a series per bucket.
fn against_flops(
    w: &mut Writer,
    rows: &[Row],
    buckets: &[String],
    col: &str,
    what: &str,
    stem: &str,
) -> Result<()> {
    let mut data = format!("bucket,run,epoch,flops,{col}\n");
    let mut series = Vec::new();
    for b in buckets {
        let mut pts = Vec::new();
        for r in rows.iter().filter(|r| r.get("bucket") == b) {
            if let (Some(f), Some(v)) = (r.num("flops"), r.num(col)) {
                let _ = writeln!(data, "{b},{},{},{f},{v}", r.get("run"), r.get("epoch"));
                pts.push((f, v));
            }
        }
        series.push(Series::scatter(b, pts));
    }
    let fig = Figure::Lines {
        title: format!("{what} against training FLOPs"),
        x_label: "cumulative training FLOPs".into(),
        y_label: what.into(),
        series,
        log_x: true,
        log_y: false,
    };
    w.figure(
        stem,
        &fig,
        &data,
        &format!(
            "{what} of every run at every epoch against its cumulative FLOPs, a series per bucket"
        ),
    )
}
