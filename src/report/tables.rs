//! The descriptive tables a study's FINDINGS cites beside its verdicts (`lab report DIR --table
//! NAME`): a Welch depth contrast, C per (depth, heads), a bound for an unplaceable depth, and
//! the objectives' set figures. All from `results.csv`, with the statistics of `stats`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Result, bail};

use crate::report::Row;
use crate::report::stats::{MeanCi, at_log_x, bootstrap_best_of, welch};
use crate::tags;

/// The tables, by the name `--table` takes.
pub const NAMES: &[&str] = &["depth-contrast", "heads", "unplaceable-bound", "sets"];

/// Bootstrap resamples of the tables' P(best).
const BOOT: usize = 10_000;

/// `--table NAME`'s text for a study's rows. `bucket` picks the bucket (`1M`, `100k`), and
/// `sweeps` lists the sweeps whose runs stand for each depth: a depth's runs come from the
/// first sweep that has it, as an arm borrows.
pub fn table(name: &str, rows: &[Row], bucket: &str, sweeps: &[String]) -> Result<String> {
    match name {
        "depth-contrast" => depth_contrast(rows, bucket, sweeps),
        "heads" => Ok(heads(rows, sweeps)),
        "unplaceable-bound" => unplaceable_bound(rows, bucket, sweeps),
        "sets" => Ok(sets(rows, bucket)),
        other => bail!(
            "--table: unknown table {other:?}; one of {}",
            NAMES.join(", ")
        ),
    }
}

/// Two decimals, the values of a cell as the tables list them.
fn list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `2.41e+13`: three significant digits, as C's `%.3g` writes a large number.
fn g3(x: f64) -> String {
    let exp = x.abs().log10().floor() as i32;
    let trim = |t: String| {
        if t.contains('.') {
            t.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            t
        }
    };
    if (-5..3).contains(&exp) {
        return trim(format!("{x:.*}", (2 - exp).max(0) as usize));
    }
    // The mantissa rounded to three digits may reach 10 (9.996e13 is 1e+14).
    let (m, exp) = match x / 10f64.powi(exp) {
        m if format!("{m:.2}").starts_with("10") => (m / 10.0, exp + 1),
        m => (m, exp),
    };
    let m = trim(format!("{m:.2}"));
    format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// Per depth, the rows of the first of `sweeps` that has that depth in `bucket`.
fn by_depth<'a>(rows: &'a [Row], bucket: &str, sweeps: &[String]) -> BTreeMap<u64, Vec<&'a Row>> {
    let mut by: BTreeMap<u64, BTreeMap<usize, Vec<&Row>>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.get("bucket") == bucket) {
        if let (Some(i), Some(l)) = (
            sweeps.iter().position(|s| s == r.get("sweep")),
            r.num("n_layer"),
        ) {
            by.entry(l as u64)
                .or_default()
                .entry(i)
                .or_default()
                .push(r);
        }
    }
    by.into_iter()
        .filter_map(|(l, v)| v.into_values().next().map(|rs| (l, rs)))
        .collect()
}

/// C at each run's last evaluation.
fn last_c(rows: &[&Row]) -> Vec<f64> {
    crate::report::findings::finals(rows)
        .iter()
        .filter_map(|r| r.num(tags::CREATIVITY))
        .collect()
}

fn mean_line(m: &MeanCi) -> String {
    format!("C {:.2} [{:.2}, {:.2}]", m.mean, m.lo, m.hi)
}

/// C at the last evaluation per depth, and the best interior depth against the better end
/// (L min or L max) as a difference of means with its Welch 95% t-interval.
fn depth_contrast(rows: &[Row], bucket: &str, sweeps: &[String]) -> Result<String> {
    let c: BTreeMap<u64, Vec<f64>> = by_depth(rows, bucket, sweeps)
        .into_iter()
        .map(|(l, rs)| (l, last_c(&rs)))
        .collect();
    if c.len() < 3 {
        bail!(
            "{}: {} depths in bucket {bucket}; need 3",
            sweeps.join(","),
            c.len()
        );
    }
    let mut out = String::new();
    for (l, v) in &c {
        let m = MeanCi::of(v);
        writeln!(out, "L = {l}: {} n = {}  ({})", mean_line(&m), m.n, list(v))?;
    }
    let depths: Vec<u64> = c.keys().copied().collect();
    let mean = |l: &u64| MeanCi::of(&c[l]).mean;
    // The first of equals, as the lab's other tests break ties.
    let best = |ls: &[u64]| {
        ls.iter()
            .copied()
            .fold(None, |b: Option<u64>, l| match b {
                Some(b) if mean(&b) >= mean(&l) => Some(b),
                _ => Some(l),
            })
            .expect("three depths")
    };
    let inner = best(&depths[1..depths.len() - 1]);
    let end = best(&[depths[0], depths[depths.len() - 1]]);
    let (d, df) = welch(&c[&inner], &c[&end]);
    writeln!(
        out,
        "best interior L = {inner} minus best end L = {end}: {:+.2} [{:+.2}, {:+.2}] (Welch, df {df:.1})",
        d.mean, d.lo, d.hi
    )?;
    Ok(out)
}

/// C at the last evaluation per (depth, width, heads) of `sweeps`, and P(best depth) when each
/// depth is scored by its best head count (descriptive: the best head is picked on the same
/// runs, which favours depths with more head counts).
fn heads(rows: &[Row], sweeps: &[String]) -> String {
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| sweeps.iter().any(|s| s == r.get("sweep")))
        .collect();
    let mut c: BTreeMap<(u64, u64, u64), Vec<f64>> = BTreeMap::new();
    for r in crate::report::findings::finals(&mine) {
        let k = |f: &str| r.num(f).unwrap_or(0.0) as u64;
        if let Some(x) = r.num(tags::CREATIVITY) {
            c.entry((k("n_layer"), k("n_embd"), k("n_head")))
                .or_default()
                .push(x);
        }
    }
    let mut out = String::new();
    for ((l, e, h), v) in &c {
        let m = MeanCi::of(v);
        let _ = writeln!(
            out,
            "L{l} E{e} H{h} hd{}: {} n={}",
            e / h,
            mean_line(&m),
            m.n
        );
    }
    let mut cells: BTreeMap<u64, Vec<Vec<f64>>> = BTreeMap::new();
    for ((l, _, _), v) in c {
        cells.entry(l).or_default().push(v);
    }
    let groups: Vec<Vec<Vec<f64>>> = cells.values().cloned().collect();
    let p = bootstrap_best_of(&groups, BOOT, 22);
    let shares: Vec<String> = cells
        .keys()
        .zip(&p)
        .map(|(l, p)| format!("L = {l} {p:.3}"))
        .collect();
    let _ = writeln!(
        out,
        "P(best depth), best head per depth: {}",
        shares.join(", ")
    );
    out
}

/// The depth test at the common compute with a depth that cannot be placed there (its first
/// evaluation costs more): each such run's C at its first evaluation stands in, an upper bound
/// if C does not fall before it, so the P(interior) this gives is a lower bound.
fn unplaceable_bound(rows: &[Row], bucket: &str, sweeps: &[String]) -> Result<String> {
    let mut runs: BTreeMap<u64, Vec<Vec<(f64, f64)>>> = BTreeMap::new();
    for (l, rs) in by_depth(rows, bucket, sweeps) {
        let mut by_run: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
        for r in rs {
            if let (Some(f), Some(x)) = (r.num("flops"), r.num(tags::CREATIVITY)) {
                by_run.entry(r.get("run")).or_default().push((f, x));
            }
        }
        for mut p in by_run.into_values() {
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            runs.entry(l).or_default().push(p);
        }
    }
    if runs.len() < 3 {
        bail!(
            "{}: {} depths in bucket {bucket}; need 3",
            sweeps.join(","),
            runs.len()
        );
    }
    let common = runs
        .values()
        .flatten()
        .filter_map(|p| p.last().map(|x| x.0))
        .fold(f64::INFINITY, f64::min);
    let mut out = format!(
        "{bucket}, {}: common compute {} FLOPs\n",
        sweeps.join(","),
        g3(common)
    );
    let mut c: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (l, ps) in &runs {
        let v: Vec<f64> = ps
            .iter()
            .map(|p| {
                if p[0].0 >= common {
                    p[0].1
                } else {
                    at_log_x(p, common).unwrap_or(f64::NAN)
                }
            })
            .collect();
        let bounded = ps.iter().any(|p| p[0].0 > common);
        writeln!(
            out,
            "L = {l}: C {:.2}  ({}){}",
            MeanCi::of(&v).mean,
            list(&v),
            if bounded {
                "  (upper bound: C at the first evaluation)"
            } else {
                ""
            }
        )?;
        c.insert(*l, v);
    }
    let groups: Vec<Vec<Vec<f64>>> = c.values().map(|v| vec![v.clone()]).collect();
    let p = bootstrap_best_of(&groups, BOOT, 0);
    let depths: Vec<&u64> = c.keys().collect();
    let shares: Vec<String> = depths
        .iter()
        .zip(&p)
        .map(|(l, p)| format!("L = {l} {p:.3}"))
        .collect();
    writeln!(out, "P(best): {}", shares.join(", "))?;
    let interior: f64 = p[1..p.len() - 1].iter().sum();
    writeln!(out, "P(interior best) = {interior:.3}")?;
    Ok(out)
}

/// Per (depth, setting) of the objectives study in `bucket` (a sweep-name part: `100k`, `1m`),
/// the mean over seeds of the sampled answers' valid rate, distinct valid paths and repeats
/// per query and set score at each run's last evaluation, and the plain runs' temperatures.
fn sets(rows: &[Row], bucket: &str) -> String {
    let prefix = format!("objectives-{bucket}");
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            let s = r.get("sweep");
            s == prefix || s.starts_with(&format!("{prefix}-"))
        })
        .collect();
    let mut cells: BTreeMap<(u64, String), Vec<&Row>> = BTreeMap::new();
    for r in crate::report::findings::finals(&mine) {
        if r.num(tags::SET_SCORE).is_none() {
            continue;
        }
        let hash = match (
            r.num("hash_prefix").unwrap_or(0.0) > 0.0,
            r.get("hash_draw"),
        ) {
            (false, _) => "",
            (true, "once") => " + hash once",
            (true, _) => " + hash",
        };
        let setting = format!("{}{hash}", r.get("objective"));
        cells
            .entry((r.num("n_layer").unwrap_or(0.0) as u64, setting))
            .or_default()
            .push(r);
    }
    let mut out = String::from(
        "| L | setting | runs | valid rate | distinct valid / query | repeats / query | s(S) | temperatures |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for ((l, setting), v) in &cells {
        let mean = |k: &str| v.iter().filter_map(|r| r.num(k)).sum::<f64>() / v.len() as f64;
        let temps: Vec<&str> = v.iter().map(|r| r.get(tags::SET_TEMPERATURE)).collect();
        let temps = if temps.iter().all(|t| t.is_empty()) {
            "greedy".to_string()
        } else {
            temps.join(", ")
        };
        let _ = writeln!(
            out,
            "| {l} | {setting} | {} | {:.3} | {:.2} | {:.2} | {:.2} | {temps} |",
            v.len(),
            mean(tags::SET_VALID_RATE),
            mean(tags::SET_DISTINCT_VALID),
            mean(tags::SET_REPEATS),
            mean(tags::SET_SCORE)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g3_writes_as_printf_does() {
        assert_eq!(g3(2.41e13), "2.41e+13");
        assert_eq!(g3(9.996e13), "1e+14");
        assert_eq!(g3(2.4e13), "2.4e+13");
        assert_eq!(g3(3e13), "3e+13");
        assert_eq!(g3(12.345), "12.3");
        assert_eq!(g3(0.5), "0.5");
    }
}
