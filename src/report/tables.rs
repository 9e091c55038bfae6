//! The descriptive tables a study's FINDINGS cites beside its verdicts (`lab report DIR --table
//! NAME`): a Welch depth contrast, C per (depth, heads), a bound for an unplaceable depth, and
//! the objectives' set figures, the depth × lr grid, and the runs two studies share. All from
//! `results.csv`, with the statistics of `stats`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use anyhow::{Result, bail};

use crate::report::Row;
use crate::report::findings;
use crate::report::stats::{MeanCi, at_log_x, bootstrap_best_of, welch};
use crate::tags;

/// The tables, by the name `--table` takes.
pub const NAMES: &[&str] = &[
    "depth-contrast",
    "heads",
    "unplaceable-bound",
    "sets",
    "grid",
    "twins",
];

/// Bootstrap resamples of the tables' P(best).
const BOOT: usize = 10_000;

/// `--table NAME`'s text for a study's rows. `bucket` picks the bucket (`1M`, `100k`), and
/// `sweeps` lists the sweeps whose runs stand for each depth: a depth's runs come from the
/// first sweep that has it, as an arm borrows.
/// `with` is a second study's rows, which `twins` alone reads.
pub fn table(
    name: &str,
    rows: &[Row],
    bucket: &str,
    sweeps: &[String],
    with: Option<&[Row]>,
) -> Result<String> {
    match (name, with) {
        ("twins", Some(other)) => return Ok(twins(rows, other)),
        ("twins", None) => {
            bail!("--table twins: needs --with (the other study's directory or results.csv)")
        }
        (_, Some(_)) => bail!("--with: only --table twins reads a second study"),
        _ => {}
    }
    match name {
        "depth-contrast" => depth_contrast(rows, bucket, sweeps),
        "heads" => Ok(heads(rows, sweeps)),
        "unplaceable-bound" => unplaceable_bound(rows, bucket, sweeps),
        "sets" => Ok(sets(rows, bucket)),
        "grid" => Ok(grid(rows, bucket)),
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

/// C values keyed by (L, lr bits).
type Cells = BTreeMap<(u64, u64), Vec<f64>>;

/// One run of a grid: its L, its lr's bits, its C.
type GridRun = (u64, u64, f64);

/// Per depth, the C values of its runs at the lr `pick` chooses among its cells, and that lr.
fn at_chosen_lr(
    cells: &Cells,
    pick: impl Fn(u64) -> Option<u64>,
) -> BTreeMap<u64, (f64, Vec<f64>)> {
    let depths: std::collections::BTreeSet<u64> = cells.keys().map(|k| k.0).collect();
    depths
        .into_iter()
        .filter_map(|l| {
            let lr = pick(l)?;
            Some((l, (f64::from_bits(lr), cells.get(&(l, lr))?.clone())))
        })
        .collect()
}

/// The depth test on each depth's runs at its chosen lr: P(best) per depth, P(interior), the
/// contrast of the best interior depth against the best end, and the verdict by the report's
/// rule (`findings::share_verdict`).
fn depth_test(by: &BTreeMap<u64, (f64, Vec<f64>)>, seed: u64) -> String {
    let n = by.len();
    if n < 3 {
        return format!("  {n} depths: too few for an interior optimum\n");
    }
    let s = findings::bootstrap_settings(
        by.iter()
            .map(|(l, (_, v))| ((*l as f64).to_bits(), v.clone()))
            .collect(),
        seed,
    );
    let interior = |i: usize, n: usize, _: f64| i > 0 && i + 1 < n;
    let (share, _) = findings::share_and_best(&s.means, &s.p, &interior);
    let (d, df, i, e) = findings::contrast(&s, &interior).expect("three depths");
    let min_n = s.values.iter().map(Vec::len).min().unwrap_or(0);
    let v = findings::share_verdict(share, min_n, Some(&d));
    // With one run a depth every resample is the runs themselves: the bootstrap's shares are
    // 1 and 0 whatever the spread, so they are not printed.
    let ps = if min_n < 2 {
        "n/a (one run a depth)".to_string()
    } else {
        let ps: Vec<String> = by
            .keys()
            .zip(&s.p)
            .map(|(l, p)| format!("L = {l} {p:.3}"))
            .collect();
        format!("{}; P(interior) = {share:.3}", ps.join(", "))
    };
    format!(
        "  P(best): {ps}; C(L = {i}) − C(L = {e}) = {:+.2} [{:+.2}, {:+.2}] (Welch, df {df:.1}): {}\n",
        d.mean,
        d.lo,
        d.hi,
        v.word().replace('_', " ")
    )
}

/// The share of the variance of `values` (L, lr, C) each factor explains: sums of squares of
/// depth, lr, their interaction and the seeds' residual over the total (exact for a balanced
/// grid, where every cell has the same number of seeds).
fn two_way(values: &[GridRun]) -> String {
    let n = values.len() as f64;
    if values.len() < 2 {
        return "  too few runs\n".into();
    }
    let grand = values.iter().map(|v| v.2).sum::<f64>() / n;
    let ss = |key: &dyn Fn(&GridRun) -> (u64, u64)| {
        let mut by: BTreeMap<(u64, u64), (f64, f64)> = BTreeMap::new();
        for v in values {
            let e = by.entry(key(v)).or_default();
            e.0 += v.2;
            e.1 += 1.0;
        }
        by.values()
            .map(|(sum, k)| k * (sum / k - grand).powi(2))
            .sum::<f64>()
    };
    let total: f64 = values.iter().map(|v| (v.2 - grand).powi(2)).sum();
    let depth = ss(&|v| (v.0, 0));
    let lr = ss(&|v| (0, v.1));
    let cells = ss(&|v| (v.0, v.1));
    let share = |x: f64| 100.0 * x / total;
    format!(
        "  share of C's variance (sums of squares, {} runs): depth {:.1}%, lr {:.1}%, depth × lr {:.1}%, seeds (residual) {:.1}%\n",
        values.len(),
        share(depth),
        share(lr),
        share(cells - depth - lr),
        share(total - cells)
    )
}

/// `--table grid`: a depth × lr grid in `bucket` (issue 52). At the grid's common compute: C per
/// (L, lr) over seeds; per depth its best lr by C and by the tuning loss (the selection a study
/// may make), with the depth test on each; the share of C's variance depth and lr explain.
/// Then at each run's last evaluation (equal epochs) under the default decode budget and every
/// final budget the runs were also scored at: the depth test at each depth's best lr.
fn grid(rows: &[Row], bucket: &str) -> String {
    let in_b: Vec<&Row> = rows.iter().filter(|r| r.get("bucket") == bucket).collect();
    let key = |r: &Row| Some((r.num("n_layer")? as u64, r.num("lr")?.to_bits()));
    let (common, at) = findings::at_compute(&in_b, findings::FLOPS);
    let mut cells: Cells = BTreeMap::new();
    for (r, c) in &at {
        if let Some(k) = key(r) {
            cells.entry(k).or_default().push(*c);
        }
    }
    let finals = findings::finals(&in_b);
    let mut tune: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
    for r in &finals {
        if let (Some(k), Some(t)) = (key(r), r.num(tags::TUNE_LOSS)) {
            tune.entry(k).or_default().push(t);
        }
    }
    let mut out = format!(
        "C at the common compute {} FLOPs (head left out), mean [95% t-interval] over seeds:\n",
        g3(common)
    );
    for ((l, lr), v) in &cells {
        let m = MeanCi::of(v);
        let _ = writeln!(
            out,
            "L = {l} lr {}: {} n = {}",
            f64::from_bits(*lr),
            mean_line(&m),
            m.n
        );
    }
    let mean_of =
        |m: &BTreeMap<(u64, u64), Vec<f64>>, k: &(u64, u64)| m.get(k).map(|v| MeanCi::of(v).mean);
    let best_lr = |m: &BTreeMap<(u64, u64), Vec<f64>>, l: u64, sign: f64| {
        m.keys()
            .filter(|k| k.0 == l)
            .max_by(|a, b| {
                let (x, y) = (
                    mean_of(m, a).unwrap_or(f64::NAN),
                    mean_of(m, b).unwrap_or(f64::NAN),
                );
                (sign * x).total_cmp(&(sign * y))
            })
            .map(|k| k.1)
    };
    for (what, by) in [
        (
            "its best lr by C",
            at_chosen_lr(&cells, |l| best_lr(&cells, l, 1.0)),
        ),
        (
            "its lr by the tuning loss (lowest)",
            at_chosen_lr(&cells, |l| best_lr(&tune, l, -1.0)),
        ),
    ] {
        let lrs: Vec<String> = by
            .iter()
            .map(|(l, (lr, v))| format!("L = {l}: {lr} (C {:.2})", MeanCi::of(v).mean))
            .collect();
        let _ = writeln!(out, "each depth at {what}: {}", lrs.join(", "));
        out += &depth_test(&by, 52);
    }
    let values: Vec<GridRun> = cells
        .iter()
        .flat_map(|((l, lr), v)| v.iter().map(move |c| (*l, *lr, *c)))
        .collect();
    out += &two_way(&values);
    // Equal epochs, under each decode budget.
    let mut budgets: Vec<(String, String)> = vec![("default".into(), tags::CREATIVITY.to_string())];
    let mut extra: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
    for r in &finals {
        for k in r.0.keys() {
            if let Some(b) = k
                .strip_prefix("eval/budget")
                .and_then(|k| k.strip_suffix("/creativity"))
                .and_then(|b| b.parse().ok())
            {
                extra.insert(b);
            }
        }
    }
    for b in extra {
        budgets.push((format!("{b} tokens"), tags::at_budget(tags::CREATIVITY, b)));
    }
    for (name, col) in budgets {
        let mut last: Cells = BTreeMap::new();
        for r in &finals {
            if let (Some(k), Some(c)) = (key(r), r.num(&col)) {
                last.entry(k).or_default().push(c);
            }
        }
        let by = at_chosen_lr(&last, |l| best_lr(&last, l, 1.0));
        let lrs: Vec<String> = by
            .iter()
            .map(|(l, (lr, v))| format!("L = {l}: {lr} (C {:.2})", MeanCi::of(v).mean))
            .collect();
        let _ = writeln!(
            out,
            "last evaluation, decode budget {name}, each depth at its best lr: {}",
            lrs.join(", ")
        );
        out += &depth_test(&by, 53);
    }
    out
}

/// The hash that ends a run's name: the digest of its resolved training config, the same for
/// the same run in two studies (`grid-1m-L2-…-3572ea2c`, `fair-cpu-seeds-1m-L2-…-3572ea2c`).
fn config_hash(run: &str) -> &str {
    run.rsplit('-').next().unwrap_or(run)
}

/// A twin's depth, lr (bits) and seed, by which the table sorts and twins must agree.
type RunKey = (u64, u64, u64);
/// One study's runs by config hash: their key and, per evaluated epoch, val/loss and C.
type Evals = BTreeMap<u64, (Option<f64>, Option<f64>)>;
fn runs_by_hash(rows: &[Row]) -> BTreeMap<String, (RunKey, Evals)> {
    let mut out: BTreeMap<String, (RunKey, Evals)> = BTreeMap::new();
    for r in rows {
        let num = |k: &str| r.num(k).unwrap_or(f64::NAN);
        let key = (
            num("n_layer") as u64,
            num("lr").to_bits(),
            num("seed") as u64,
        );
        let entry = out
            .entry(config_hash(r.get("run")).to_string())
            .or_insert_with(|| (key, Evals::new()));
        if let Some(e) = r.num("epoch") {
            entry
                .1
                .insert(e as u64, (r.num(tags::VAL_LOSS), r.num(tags::CREATIVITY)));
        }
    }
    out
}

/// The runs of `rows` that `other` holds too (the same config hash, depth, lr and seed), each
/// trained by its own study's code: whether their validation losses are the same at every
/// evaluation both hold, or the first epoch they part, and C at the last evaluation of each.
/// Same-config runs that part show how far a change in the last bits carries a run.
fn twins(rows: &[Row], other: &[Row]) -> String {
    let (mine, theirs) = (runs_by_hash(rows), runs_by_hash(other));
    let mut by: BTreeMap<RunKey, String> = BTreeMap::new();
    // Pairs that part, and |C difference| of those whose last evaluation has C in both.
    let (mut same, mut parted, mut apart) = (0, 0, Vec::new());
    for (hash, (key, a)) in &mine {
        let Some((_, b)) = theirs.get(hash).filter(|(k, _)| k == key) else {
            continue;
        };
        let label = format!("L = {} lr {} seed {}", key.0, f64::from_bits(key.1), key.2);
        let both: Vec<u64> = a.keys().filter(|e| b.contains_key(e)).copied().collect();
        let Some(&last) = both.last() else { continue };
        let part = both.iter().find(|e| a[e].0 != b[e].0);
        let c = |m: &Evals| m[&last].1.map_or("-".into(), |c| format!("{c:.2}"));
        let line = match part {
            None => {
                same += 1;
                format!(
                    "{label}: the same val/loss at all {} evaluations; C at epoch {last} {} and {}",
                    both.len(),
                    c(a),
                    c(b)
                )
            }
            Some(e) => {
                parted += 1;
                if let (Some(x), Some(y)) = (a[&last].1, b[&last].1) {
                    apart.push((x - y).abs());
                }
                let loss = |m: &Evals| m[e].0.map_or("-".into(), |v| format!("{v:.5}"));
                format!(
                    "{label}: apart from epoch {e} (val/loss {} and {}); C at epoch {last} {} and {}",
                    loss(a),
                    loss(b),
                    c(a),
                    c(b)
                )
            }
        };
        by.insert(*key, line);
    }
    let mut out = String::new();
    for line in by.values() {
        let _ = writeln!(out, "{line}");
    }
    let _ = write!(
        out,
        "{} twins: {same} the same at every evaluation both hold, {} apart",
        same + parted,
        parted
    );
    if !apart.is_empty() {
        let _ = write!(
            out,
            " (|C difference| at the last evaluation: {})",
            list(&apart)
        );
    }
    out.push('\n');
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

    /// The rows of a grid of 3 depths × 2 lrs × `seeds` seeds where lr moves C far more than
    /// depth, and L = 2 is best by 0.5 at each lr.
    fn grid_rows(seeds: u64) -> Vec<Row> {
        let mut rows = Vec::new();
        for (l, bump) in [(1u64, 0.0), (2, 0.5), (4, 0.0)] {
            for (lr, base, tune) in [(1e-3, 2.0, 1.5), (3e-3, 6.0, 1.2)] {
                for seed in 0..seeds {
                    let c = base + bump + 0.01 * seed as f64;
                    for (epoch, flops) in [(1, 5e11), (2, 1e12)] {
                        let m: BTreeMap<String, String> = [
                            ("run", format!("L{l}-{lr}-{seed}")),
                            ("bucket", "1M".to_string()),
                            ("n_layer", l.to_string()),
                            ("lr", lr.to_string()),
                            ("epoch", epoch.to_string()),
                            (findings::FLOPS, flops.to_string()),
                            (tags::CREATIVITY, c.to_string()),
                            // L = 4's tuning loss prefers the lr its C does not.
                            (
                                tags::TUNE_LOSS,
                                (tune - f64::from(l == 4 && lr < 2e-3)).to_string(),
                            ),
                            ("eval/budget44/creativity", (c + 1.0).to_string()),
                        ]
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect();
                        rows.push(Row(m));
                    }
                }
            }
        }
        rows
    }

    #[test]
    fn with_one_seed_a_cell_p_best_is_not_printed_and_the_verdict_is_inconclusive() {
        let t = grid(&grid_rows(1), "1M");
        assert!(t.contains("P(best): n/a (one run a depth)"), "{t}");
        assert!(!t.contains("P(interior)"), "{t}");
        assert!(t.contains(": inconclusive"), "{t}");
    }

    /// A grid of 3 depths × 2 lrs × 3 seeds where lr moves C far more than depth: the variance
    /// table says so, the tuning loss picks each depth's lr, and L = 2 at its best lr is an
    /// interior best with its contrast above 0 (reproduced); the 44-token budget is tested too.
    #[test]
    fn the_grid_table_splits_variance_and_tests_depth_under_each_selection() {
        let rows = grid_rows(3);
        let t = grid(&rows, "1M");
        assert!(t.contains("L = 2 lr 0.003: C 6.51"), "{t}");
        assert!(
            t.contains("each depth at its lr by the tuning loss (lowest): L = 1: 0.003 (C 6.01), L = 2: 0.003 (C 6.51), L = 4: 0.001 (C 2.01)"),
            "{t}"
        );
        let split = t.split("runs): ").nth(1).unwrap();
        let share = |what: &str| -> f64 {
            let rest = split.split(&format!("{what} ")).nth(1).unwrap();
            rest.split('%').next().unwrap().parse().unwrap()
        };
        assert!(share("lr") > 90.0 && share("depth") < 10.0, "{t}");
        assert!(t.contains("P(interior) = 1.000"), "{t}");
        assert!(t.contains(": reproduced"), "{t}");
        assert!(t.contains("decode budget 44 tokens"), "{t}");
    }

    /// Rows of one run's evaluations: (epoch, val/loss, C).
    fn run_rows(run: &str, l: u64, seed: u64, evals: &[(u64, f64, f64)]) -> Vec<Row> {
        evals
            .iter()
            .map(|(e, loss, c)| {
                let m: BTreeMap<String, String> = [
                    ("run", run.to_string()),
                    ("n_layer", l.to_string()),
                    ("lr", "0.01".to_string()),
                    ("seed", seed.to_string()),
                    ("epoch", e.to_string()),
                    (tags::VAL_LOSS, loss.to_string()),
                    (tags::CREATIVITY, c.to_string()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
                Row(m)
            })
            .collect()
    }

    /// Twins are matched by the hash that ends a run's name (and must agree on depth, lr and
    /// seed); a pair is "the same" only if every shared evaluation's val/loss is.
    #[test]
    fn twins_pairs_runs_by_config_hash_and_finds_where_they_part() {
        let mut a = run_rows("g-L2-s1-aaaa1111", 2, 1, &[(2, 3.0, 0.1), (4, 2.4, 0.3)]);
        a.extend(run_rows(
            "g-L1-s1-bbbb2222",
            1,
            1,
            &[(2, 1.5, 5.0), (4, 1.0, 8.0)],
        ));
        a.extend(run_rows("g-L4-s1-cccc3333", 4, 1, &[(2, 1.0, 1.0)]));
        // The same hash with another seed is not a twin.
        a.extend(run_rows("g-L8-s2-dddd4444", 8, 2, &[(2, 1.0, 1.0)]));
        let mut b = run_rows("f-L2-s1-aaaa1111", 2, 1, &[(2, 3.0, 0.1), (4, 2.5, 0.35)]);
        b.extend(run_rows(
            "f-L1-s1-bbbb2222",
            1,
            1,
            &[(2, 1.5, 5.0), (4, 1.0, 8.0)],
        ));
        b.extend(run_rows("f-L8-s1-dddd4444", 8, 1, &[(2, 1.0, 1.0)]));
        let t = twins(&a, &b);
        assert_eq!(
            t,
            "L = 1 lr 0.01 seed 1: the same val/loss at all 2 evaluations; C at epoch 4 8.00 and 8.00\n\
             L = 2 lr 0.01 seed 1: apart from epoch 4 (val/loss 2.40000 and 2.50000); C at epoch 4 0.30 and 0.35\n\
             2 twins: 1 the same at every evaluation both hold, 1 apart (|C difference| at the last evaluation: 0.05)\n"
        );
    }
}
