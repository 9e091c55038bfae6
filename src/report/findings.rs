//! The paper's five claims (seed 002, Figs 3–5) tested on a study's `results.csv`: each gets a
//! verdict from a stated test over seeds, the numbers behind it, and the command to recompute it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use crate::report::Row;
use crate::report::stats::{MeanCi, around, at_log_x, bootstrap_best, slope_ci, spearman, welch};
use crate::tags;

/// Bootstrap resamples per test.
const BOOT: usize = 10_000;
/// A bootstrap verdict needs this share of resamples.
const SURE: f64 = 0.95;
/// Claim 3's band of E/L (the paper: "about 200–300").
pub const WIDTH_BAND: (f64, f64) = (200.0, 300.0);
/// The compute axis of the depth test and the heatmaps: the paper's count, the LM head left
/// out (SPEC §5). Runs of one bucket have about the same count per token on it.
pub const FLOPS: &str = "flops";
/// The compute axis of the width test: widths differ several-fold in LM-head FLOPs per token,
/// so they are matched, and compared, with the head counted.
pub const FLOPS_WITH_HEAD: &str = "flops_with_head";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Reproduced,
    NotReproduced,
    Inconclusive,
    NotTested,
}

impl Verdict {
    /// The verdict's word, as `findings.json` writes it.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::NotReproduced => "not_reproduced",
            Verdict::Inconclusive => "inconclusive",
            Verdict::NotTested => "not_tested",
        }
    }
}

impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.word())
    }
}

/// One claim's outcome.
#[derive(Debug, Serialize)]
pub struct Finding {
    pub claim: u32,
    pub name: &'static str,
    pub paper: &'static str,
    pub verdict: Verdict,
    pub test: &'static str,
    pub statistic: String,
    pub numbers: Value,
}

/// The runs of a group, each as its eval curve: (FLOPs, row) sorted by FLOPs.
type Curves<'a> = BTreeMap<&'a str, Vec<(f64, &'a Row)>>;

fn curves<'a>(rows: &[&'a Row], axis: &str) -> Curves<'a> {
    let mut c: Curves = BTreeMap::new();
    for r in rows {
        if let Some(f) = r.num(axis) {
            c.entry(r.get("run")).or_default().push((f, r));
        }
    }
    for v in c.values_mut() {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    c
}

/// A group of runs' rows under its label.
pub type Group<'a> = (String, Vec<&'a Row>);

/// The groups of a study: depth groups (one bucket, ≥ 3 depths) and width groups (one depth,
/// ≥ 3 widths), by their `bucket` label, smallest parameter count first.
pub fn groups(rows: &[Row]) -> (Vec<Group<'_>>, Vec<Group<'_>>) {
    let mut by: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by.entry(r.get("bucket")).or_default().push(r);
    }
    let distinct = |v: &[&Row], k: &str| v.iter().map(|r| r.get(k)).collect::<BTreeSet<_>>().len();
    let size = |v: &[&Row]| {
        v.iter()
            .filter_map(|r| r.num("non_embedding_params"))
            .fold(0.0, f64::max)
    };
    let (mut depth, mut width) = (Vec::new(), Vec::new());
    for (b, v) in by {
        if distinct(&v, "n_layer") >= 3 {
            depth.push((b.to_string(), v));
        } else if distinct(&v, "n_layer") == 1 && distinct(&v, "n_embd") >= 3 {
            width.push((b.to_string(), v));
        }
    }
    depth.sort_by(|a, b| size(&a.1).total_cmp(&size(&b.1)));
    (depth, width)
}

thread_local! {
    /// While [`recording`] runs: the (run, epoch) of every evaluation [`at_compute`] reads.
    static READS: RefCell<Option<BTreeSet<(String, u64)>>> = const { RefCell::new(None) };
}

/// Run `f`, and return with its value the evaluations that the common-compute figures in it
/// read, by run: what `lab sweep slim` keeps the answers of.
pub fn recording<T>(f: impl FnOnce() -> T) -> (T, BTreeMap<String, BTreeSet<u64>>) {
    READS.with(|r| *r.borrow_mut() = Some(BTreeSet::new()));
    let value = f();
    let reads = READS.with(|r| r.borrow_mut().take()).unwrap_or_default();
    let mut by: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (run, epoch) in reads {
        by.entry(run).or_default().insert(epoch);
    }
    (value, by)
}

/// The C of every run of a group at one common compute: the most that every run reached.
/// Returns that compute and each run's first row with its C there.
pub fn at_compute<'a>(rows: &[&'a Row], axis: &str) -> (f64, Vec<(&'a Row, f64)>) {
    let c = curves(rows, axis);
    let common = c
        .values()
        .filter_map(|v| v.last().map(|p| p.0))
        .fold(f64::INFINITY, f64::min);
    let at = c
        .values()
        .filter_map(|v| {
            let (pts, at): (Vec<(f64, f64)>, Vec<&Row>) = v
                .iter()
                .filter_map(|(f, r)| r.num(tags::CREATIVITY).map(|x| ((*f, x), *r)))
                .unzip();
            let (i, j) = around(&pts, common)?;
            READS.with(|reads| {
                if let Some(set) = reads.borrow_mut().as_mut() {
                    for r in [at[i], at[j]] {
                        let epoch = r.num("epoch").unwrap_or(0.0) as u64;
                        set.insert((r.get("run").to_string(), epoch));
                    }
                }
            });
            at_log_x(&pts, common).map(|x| (v[0].1, x))
        })
        .collect();
    (common, at)
}

/// [`at_compute`], the runs' C grouped by the value of `key` (one per seed and head).
pub fn at_common_compute(rows: &[&Row], key: &str, axis: &str) -> (f64, BTreeMap<u64, Vec<f64>>) {
    let (common, at) = at_compute(rows, axis);
    let mut out: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (r, x) in at {
        if let Some(k) = r.num(key) {
            out.entry(k.to_bits()).or_default().push(x);
        }
    }
    (common, out)
}

fn key_value(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// Whether a group's label is one of the paper's parameter buckets (1M, 10M, 100M) or another
/// group that votes (a sweep's own label), rather than a bucket below the paper's (100k).
pub fn votes(bucket: &str) -> bool {
    bucket
        .strip_suffix('k')
        .is_none_or(|n| n.parse::<f64>().is_err())
}

/// A claim's verdict from its cells (group label, verdict): from the paper's buckets only
/// ([`votes`]); the cells of smaller buckets are said beside it, not voted, in the returned
/// sentence (empty without them).
fn overall(cells: &[(&str, Verdict)]) -> (Verdict, String) {
    let voting: Vec<Verdict> = cells.iter().filter(|c| votes(c.0)).map(|c| c.1).collect();
    let v = all_of(
        &voting,
        [
            Verdict::Reproduced,
            Verdict::NotReproduced,
            Verdict::Inconclusive,
            Verdict::NotTested,
        ],
    );
    let mut beside: BTreeMap<&str, Vec<Verdict>> = BTreeMap::new();
    for (b, v) in cells.iter().filter(|c| !votes(c.0)) {
        beside.entry(b).or_default().push(*v);
    }
    let words: Vec<String> = beside
        .iter()
        .map(|(b, vs)| {
            let words: Vec<&str> = vs.iter().map(|v| v.word()).collect();
            format!("{b} {}", words.join("/"))
        })
        .collect();
    let sentence = if words.is_empty() {
        String::new()
    } else {
        format!(
            ". The verdict is the paper's buckets' (1M, 10M, 100M); beside it, not voted: {}",
            words.join(", ")
        )
    };
    (v, sentence)
}

/// Several cells' verdicts as one, given as [yes, no, unsure, untested]: yes only if every
/// cell says yes, no if any says no, untested without cells, unsure otherwise.
pub fn all_of<T: Copy + PartialEq>(vs: &[T], [yes, no, unsure, untested]: [T; 4]) -> T {
    if vs.is_empty() {
        untested
    } else if vs.iter().all(|v| *v == yes) {
        yes
    } else if vs.contains(&no) {
        no
    } else {
        unsure
    }
}

pub fn ci_json(m: &MeanCi) -> Value {
    json!({"mean": m.mean, "lo": m.lo, "hi": m.hi, "n": m.n})
}

/// Claim 1: creativity rises with compute at every depth.
fn compute(depth: &[Group]) -> Finding {
    let mut verdicts = Vec::new();
    let mut numbers = Vec::new();
    for (b, rows) in depth {
        let mut by_l: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
        for r in rows {
            by_l.entry(r.num("n_layer").unwrap_or(0.0) as u64)
                .or_default()
                .push(r);
        }
        for (l, rs) in by_l {
            let c = curves(&rs, FLOPS);
            let gains: Vec<f64> = c
                .values()
                .filter(|v| v.len() >= 2)
                .filter_map(|v| {
                    Some(v.last()?.1.num(tags::CREATIVITY)? - v[0].1.num(tags::CREATIVITY)?)
                })
                .collect();
            let (fx, cy): (Vec<f64>, Vec<f64>) = c
                .values()
                .flatten()
                .filter_map(|(f, r)| Some((f.ln(), r.num(tags::CREATIVITY)?)))
                .unzip();
            let m = MeanCi::of(&gains);
            let rho = spearman(&fx, &cy);
            let v = if m.n < 2 {
                Verdict::Inconclusive
            } else if m.above_zero() {
                Verdict::Reproduced
            } else if m.below_zero() {
                Verdict::NotReproduced
            } else {
                Verdict::Inconclusive
            };
            verdicts.push((b.as_str(), v));
            numbers.push(json!({"bucket": b, "n_layer": l, "gain_last_minus_first": ci_json(&m), "spearman_flops_c": rho}));
        }
    }
    let (v, beside) = overall(&verdicts);
    let rising = verdicts
        .iter()
        .filter(|v| v.1 == Verdict::Reproduced)
        .count();
    Finding {
        claim: 1,
        name: "compute",
        paper: "Creativity rises with training compute at every depth (Fig. 3).",
        verdict: v,
        test: "Per (bucket, L): C at the last evaluation minus C at the first, one value per \
               run; reproduced where the 95% t-interval over runs lies above 0, not reproduced \
               where it lies below. The claim holds if it holds at every depth. Spearman's ρ \
               between log FLOPs and C over all evaluations is given beside it.",
        statistic: format!(
            "{rising} of {} (bucket, depth) cells rise with a 95% interval above 0{beside}",
            verdicts.len()
        ),
        numbers: Value::Array(numbers),
    }
}

/// Claims 2 and 3: an interior optimum of `key` at a common compute, by bootstrap over seeds.
fn best_setting(rows: &[&Row], key: &str, axis: &str, seed: u64) -> (f64, Settings) {
    let (common, by) = at_common_compute(rows, key, axis);
    (common, bootstrap_settings(by, seed))
}

/// The settings of an optimum test: each setting with its mean C and interval, the bootstrap
/// share of resamples in which it is best, and its runs' C values.
pub struct Settings {
    pub means: Vec<(f64, MeanCi)>,
    pub p: Vec<f64>,
    pub values: Vec<Vec<f64>>,
}

/// Each setting's mean C with its interval, and the bootstrap share of resamples in which it
/// is best, from the C values of its runs (keyed by the setting's bits).
pub fn bootstrap_settings(by: BTreeMap<u64, Vec<f64>>, seed: u64) -> Settings {
    let keys: Vec<f64> = by.keys().map(|k| key_value(*k)).collect();
    let values: Vec<Vec<f64>> = by.into_values().collect();
    let p = bootstrap_best(&values, BOOT, seed);
    let means = keys
        .iter()
        .zip(&values)
        .map(|(k, g)| (*k, MeanCi::of(g)))
        .collect();
    Settings { means, p, values }
}

/// The contrast an optimum verdict also needs (SPEC §9 Revision, statistics): the claimed
/// settings' best mean minus the others' best, a Welch interval over their runs with its
/// degrees of freedom and the two settings; None when every setting is on one side.
pub fn contrast(
    s: &Settings,
    good: &impl Fn(usize, usize, f64) -> bool,
) -> Option<(MeanCi, f64, f64, f64)> {
    let n = s.means.len();
    let best_of = |claimed: bool| {
        (0..n)
            .filter(|&i| good(i, n, s.means[i].0) == claimed)
            .max_by(|&a, &b| s.means[a].1.mean.total_cmp(&s.means[b].1.mean))
    };
    let (g, o) = (best_of(true)?, best_of(false)?);
    let (d, df) = welch(&s.values[g], &s.values[o]);
    Some((d, df, s.means[g].0, s.means[o].0))
}

/// A bootstrap share and its contrast as one verdict: reproduced when at least `SURE` of the
/// resamples put the best at a claimed setting and the contrast's interval lies above 0, not
/// reproduced when at most 1 − `SURE` do and it lies below 0, inconclusive otherwise (an
/// interval that holds 0 whatever the share, or fewer than two runs a setting). Without a
/// contrast (every setting on one side) the share decides alone.
pub fn share_verdict(share: f64, min_n: usize, c: Option<&MeanCi>) -> Verdict {
    let (above, below) = c.map_or((true, true), |c| (c.above_zero(), c.below_zero()));
    if min_n < 2 {
        Verdict::Inconclusive
    } else if share >= SURE && above {
        Verdict::Reproduced
    } else if share <= 1.0 - SURE && below {
        Verdict::NotReproduced
    } else {
        Verdict::Inconclusive
    }
}

/// A contrast as JSON: the difference, its interval, degrees of freedom and the two settings.
fn contrast_json(key: &str, c: Option<&(MeanCi, f64, f64, f64)>) -> Value {
    c.map_or(Value::Null, |(d, df, g, o)| {
        json!({"claimed": {key: g}, "other": {key: o}, "difference": ci_json(d), "df": df})
    })
}

/// A contrast as words: `best claimed − best other = d [lo, hi] (Welch, df n)`.
fn contrast_line(setting: &str, c: Option<&(MeanCi, f64, f64, f64)>) -> String {
    c.map_or(String::new(), |(d, df, g, o)| {
        format!(
            ", C({setting} = {g}) − C({setting} = {o}) = {:.3} [{:.3}, {:.3}] (Welch, df {df:.1})",
            d.mean, d.lo, d.hi
        )
    })
}

/// The resamples' share whose best setting is `good`, and the setting with the best mean.
pub fn share_and_best(
    means: &[(f64, MeanCi)],
    p: &[f64],
    good: &impl Fn(usize, usize, f64) -> bool,
) -> (f64, f64) {
    let share = means
        .iter()
        .zip(p)
        .enumerate()
        .filter(|(i, ((k, _), _))| good(*i, means.len(), *k))
        .map(|(_, (_, p))| *p)
        .sum();
    let best = means
        .iter()
        .max_by(|a, b| a.1.mean.total_cmp(&b.1.mean))
        .map_or(f64::NAN, |m| m.0);
    (share, best)
}

/// The depth test on C at each run's last evaluation instead (equal epochs, so equal data, not
/// equal compute): the other reading of a fixed budget, and the only one that keeps every
/// depth when the depths' compute per token differs several-fold (L × E held fixed).
fn at_last_evaluation(
    rows: &[&Row],
    key: &str,
    seed: u64,
    good: impl Fn(usize, usize, f64) -> bool,
) -> (String, Value) {
    let mut by: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for r in finals(rows) {
        if let (Some(k), Some(c)) = (r.num(key), r.num(tags::CREATIVITY)) {
            by.entry(k.to_bits()).or_default().push(c);
        }
    }
    let s = bootstrap_settings(by, seed);
    let (share, best) = share_and_best(&s.means, &s.p, &good);
    let c = contrast(&s, &good);
    (
        format!(
            "best L = {best}, P(interior) = {share:.3}{}",
            contrast_line("L", c.as_ref())
        ),
        json!({
            "c_by_setting": c_by_setting(key, &s.means),
            "p_best": p_best(key, &s.means, &s.p),
            "p_claimed": share,
            "contrast": contrast_json(key, c.as_ref()),
        }),
    )
}

/// Each setting of `key` with its mean C and interval, as the optimum tests report them.
fn c_by_setting(key: &str, means: &[(f64, MeanCi)]) -> Value {
    means
        .iter()
        .map(|(k, m)| json!({key: k, "c": ci_json(m)}))
        .collect()
}

/// Each setting of `key` with the share of bootstrap resamples in which it is best.
fn p_best(key: &str, means: &[(f64, MeanCi)], p: &[f64]) -> Value {
    means
        .iter()
        .zip(p)
        .map(|((k, _), p)| json!({key: k, "p": p}))
        .collect()
}

/// One group's optimum test: C at the group's common compute for each setting of `key`, and the
/// share of bootstrap resamples whose best setting is `good` (given its index, the number of
/// settings and its value).
struct Optimum {
    verdict: Verdict,
    best: f64,
    share: f64,
    /// The contrast as words (empty without one).
    contrast: String,
    numbers: Value,
}

impl Optimum {
    fn describe(&self, setting: &str, share: &str) -> String {
        let left: Vec<String> = self.numbers["left_out"]
            .as_array()
            .map(|v| {
                v.iter()
                    .filter_map(|x| x.as_f64())
                    .map(|x| x.to_string())
                    .collect()
            })
            .unwrap_or_default();
        if self.best.is_nan() && !left.is_empty() {
            format!(
                "{setting} = {} has no evaluation at or below the common compute: inconclusive",
                left.join(", ")
            )
        } else if self.best.is_nan() {
            "too few settings reach a common compute".into()
        } else {
            format!(
                "best {setting} = {}, {share} = {:.3}{}",
                self.best, self.share, self.contrast
            )
        }
    }
}

/// `optimum`'s test, with `need_all`: a setting with no evaluation at or below the common
/// compute (a model whose first evaluation already costs more than every run of another
/// reached) makes the test inconclusive instead of leaving it out, since which settings are
/// interior depends on them all.
fn optimum(
    (group, rows): (&str, &[&Row]),
    key: &str,
    axis: &str,
    seed: u64,
    need_all: bool,
    good: impl Fn(usize, usize, f64) -> bool,
) -> Option<Optimum> {
    let (common, s) = best_setting(rows, key, axis, seed);
    let means = &s.means;
    let mut all: Vec<f64> = rows.iter().filter_map(|r| r.num(key)).collect();
    all.sort_by(f64::total_cmp);
    all.dedup();
    let left_out: Vec<f64> = all
        .iter()
        .copied()
        .filter(|k| !means.iter().any(|m| m.0 == *k))
        .collect();
    if means.len() < 3 || (need_all && !left_out.is_empty()) {
        // Too few settings have an evaluation at or below the common compute to tell an
        // optimum: inconclusive, and said so, with C of the settings that do reach it.
        return Some(Optimum {
            verdict: Verdict::Inconclusive,
            best: f64::NAN,
            share: f64::NAN,
            numbers: json!({
                "group": group,
                "compute_axis": axis,
                "common_compute": common,
                "settings_at_common_compute": means.len(),
                "c_by_setting": c_by_setting(key, means),
                "left_out": left_out,
            }),
            contrast: String::new(),
        });
    }
    let (share, best) = share_and_best(means, &s.p, &good);
    let min_n = means.iter().map(|m| m.1.n).min().unwrap_or(0);
    let c = contrast(&s, &good);
    let verdict = share_verdict(share, min_n, c.as_ref().map(|c| &c.0));
    let numbers = json!({
        "group": group,
        "compute_axis": axis,
        "common_compute": common,
        "c_by_setting": c_by_setting(key, means),
        "p_best": p_best(key, means, &s.p),
        "p_claimed": share,
        "contrast": contrast_json(key, c.as_ref()),
        "left_out": left_out,
    });
    Some(Optimum {
        verdict,
        best,
        share,
        contrast: contrast_line(key_word(key), c.as_ref()),
        numbers,
    })
}

/// A setting's name in words: L for depth, E/L for shape.
fn key_word(key: &str) -> &str {
    match key {
        "n_layer" => "L",
        "e_over_l" => "E/L",
        k => k,
    }
}

fn depth_claim(depth: &[Group]) -> Finding {
    let (mut verdicts, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (b, rows)) in depth.iter().enumerate() {
        let interior = |i: usize, n: usize, _: f64| i > 0 && i + 1 < n;
        let seed = 2 + i as u64;
        if let Some(mut o) = optimum((b, rows), "n_layer", FLOPS, seed, true, interior) {
            // The same test with the LM head counted, beside the verdict: at small E the head
            // is much of the compute, and it favours the deep, narrow models.
            let mut line = format!("{b}: {}", o.describe("L", "P(interior)"));
            if let Some(h) = optimum((b, rows), "n_layer", FLOPS_WITH_HEAD, seed, true, interior) {
                line += &format!(" (LM head counted: {})", h.describe("L", "P(interior)"));
                o.numbers["with_head"] = h.numbers;
            }
            let (last, n) = at_last_evaluation(rows, "n_layer", seed, interior);
            line += &format!("; at the last evaluation (equal epochs): {last}");
            o.numbers["at_last_evaluation"] = n;
            stat.push(line);
            verdicts.push((b.as_str(), o.verdict));
            numbers.push(o.numbers);
        }
    }
    let (verdict, beside) = overall(&verdicts);
    Finding {
        claim: 2,
        name: "depth",
        paper: "At a fixed parameter budget and compute there is an interior optimum depth; \
                both the shallowest and the deepest models are worse (Fig. 3), more so at scale.",
        verdict,
        test: "Per bucket: each run's C at the largest compute every run of the bucket reached \
               (log-linear between evaluations); a seeded bootstrap over seeds (10,000 \
               resamples within each depth) counts how often the best mean is at an interior \
               depth, and the contrast is the best interior depth's C minus the best edge \
               depth's (a Welch interval over their runs). Reproduced if the share is ≥ 0.95 \
               and the contrast's interval lies above 0, not reproduced if the share is ≤ 0.05 \
               and the interval lies below 0, else inconclusive (an interval holding 0 is \
               inconclusive whatever the share). The claim holds if it holds in every one of \
               the paper's buckets (1M, 10M, 100M); smaller buckets are given beside. Compute is the paper's count; the same \
               test with the LM head counted is given beside it (`with_head`), not voted. A \
               depth with no evaluation at or below the common compute makes the bucket \
               inconclusive (`left_out`); the same bootstrap on C at each run's last evaluation \
               (equal epochs) is given beside it (`at_last_evaluation`), not voted.",
        statistic: stat.join("; ") + &beside,
        numbers: Value::Array(numbers),
    }
}

fn width_claim(width: &[Group]) -> Finding {
    let (mut verdicts, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for (i, (b, rows)) in width.iter().enumerate() {
        let in_band = |_: usize, _: usize, r: f64| (WIDTH_BAND.0..=WIDTH_BAND.1).contains(&r);
        let seed = 20 + i as u64;
        if let Some(o) = optimum((b, rows), "e_over_l", FLOPS_WITH_HEAD, seed, false, in_band) {
            stat.push(format!("{b}: {}", o.describe("E/L", "P(best in 200–300)")));
            verdicts.push((b.as_str(), o.verdict));
            numbers.push(o.numbers);
        }
    }
    let (verdict, beside) = overall(&verdicts);
    Finding {
        claim: 3,
        name: "width",
        paper: "The best models have E/L of about 200–300 (Fig. 3).",
        verdict,
        test: "At one depth, each run's C at the largest compute every width reached, LM head \
               counted (the widths are matched on it); a seeded \
               bootstrap over seeds counts how often the best mean has E/L in [200, 300], and \
               the contrast is the best in-band width's C minus the best out-of-band width's (a \
               Welch interval). Reproduced if the share is ≥ 0.95 and the contrast lies above 0, \
               not reproduced if ≤ 0.05 and it lies below 0, else inconclusive; only the \
               paper's buckets vote.",
        statistic: stat.join("; ") + &beside,
        numbers: Value::Array(numbers),
    }
}

/// The last evaluation of every run of a group.
pub fn finals<'a>(rows: &[&'a Row]) -> Vec<&'a Row> {
    curves(rows, FLOPS)
        .values()
        .filter_map(|v| v.last().map(|p| p.1))
        .collect()
}

fn tradeoff(depth: &[Group]) -> Finding {
    let mut verdicts = Vec::new();
    let mut numbers = Vec::new();
    let mut stat = Vec::new();
    for (b, rows) in depth {
        // Per run: the least-squares slope of pooled normalised novelty against constraints.
        let slopes: Vec<f64> = finals(rows)
            .iter()
            .filter_map(|r| {
                let pts: Vec<(f64, f64)> = (0..16)
                    .filter_map(|c| r.num(&tags::novelty_pooled(c)).map(|v| (c as f64, v)))
                    .collect();
                if pts.len() < 2 {
                    return None;
                }
                let n = pts.len() as f64;
                let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
                let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
                let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
                let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
                Some(sxy / sxx)
            })
            .collect();
        let m = MeanCi::of(&slopes);
        let v = if m.n < 2 {
            Verdict::Inconclusive
        } else if m.below_zero() {
            Verdict::Reproduced
        } else if m.above_zero() {
            Verdict::NotReproduced
        } else {
            Verdict::Inconclusive
        };
        verdicts.push((b.as_str(), v));
        stat.push(if m.n == 0 {
            format!("{b}: no run has normalised novelty at two constraint counts")
        } else {
            format!(
                "{b}: slope {:.4} [{:.4}, {:.4}] (n = {})",
                m.mean, m.lo, m.hi, m.n
            )
        });
        numbers.push(json!({"bucket": b, "slope_per_constraint": ci_json(&m)}));
    }
    let (verdict, beside) = overall(&verdicts);
    Finding {
        claim: 4,
        name: "tradeoff",
        paper: "Normalised novelty falls as constraints are added, at every scale (Fig. 4).",
        verdict,
        test: "Per run at its last evaluation: the least-squares slope of normalised novelty \
               (pooled over every valid answer of a constraint count, over the 1-hop mean at \
               that count) against the count 0–4. Reproduced in a bucket if the 95% t-interval \
               of the slope over runs lies below 0, not reproduced if above; every one of the \
               paper's buckets must agree (smaller buckets beside).",
        statistic: stat.join("; ") + &beside,
        numbers: Value::Array(numbers),
    }
}

fn errors(depth: &[Group]) -> Finding {
    let paper: Vec<Group> = depth.iter().filter(|g| votes(&g.0)).cloned().collect();
    let (verdict, mut statistic, _) = errors_between(&paper);
    // Every bucket's figures; with a bucket below the paper's, its test beside the verdict.
    let (v, line, numbers) = errors_between(depth);
    if paper.len() < depth.len() {
        statistic = format!(
            "{}{statistic}; beside it, not voted, from the smallest bucket of all: {} ({line})",
            if paper.len() < 2 {
                "the paper's buckets: "
            } else {
                ""
            },
            v.word()
        );
    }
    Finding {
        claim: 5,
        name: "errors",
        paper: "At small scale hallucinations (invented nodes or edges) outnumber invalid-path \
                errors by a wide margin; the gap narrows as models grow (Fig. 5).",
        verdict,
        test: "Per run at its last evaluation: ln((hallucinations + 1) / (invalid paths + 1)). \
               Reproduced if in the smallest of the paper's buckets the 95% t-interval lies \
               above ln 2 (at least twice as many) and the largest bucket's mean is lower with \
               a 95% Welch interval of the difference below 0; not reproduced if the smallest \
               bucket's interval lies below 0 or the difference's above 0. Needs two of the \
               paper's buckets; the same test from a smaller bucket (100k) is given beside.",
        statistic,
        numbers,
    }
}

/// Claim 5's test from the first to the last of `depth`: its verdict, its sentence, and the
/// numbers of every group.
fn errors_between(depth: &[Group]) -> (Verdict, String, Value) {
    // Per run at its last evaluation: ln((hallucination + 1) / (invalid path + 1)).
    let ratios = |rows: &[&Row]| -> Vec<f64> {
        finals(rows)
            .iter()
            .filter_map(|r| {
                Some(
                    ((r.num(tags::ROLLUP_HALLUCINATION)? + 1.0)
                        / (r.num(tags::ROLLUP_INVALID_PATH)? + 1.0))
                        .ln(),
                )
            })
            .collect()
    };
    let raw: Vec<(String, Vec<f64>)> = depth
        .iter()
        .map(|(b, rows)| (b.clone(), ratios(rows)))
        .collect();
    let per: Vec<(String, MeanCi)> = raw
        .iter()
        .map(|(b, v)| (b.clone(), MeanCi::of(v)))
        .collect();
    let numbers = Value::Array(
        per.iter()
            .map(|(b, m)| json!({"bucket": b, "ln_halluc_over_invalid": ci_json(m), "ratio": m.mean.exp()}))
            .collect(),
    );
    let (verdict, statistic) = match (per.first(), per.last()) {
        (Some((sb, small)), Some((lb, large))) if per.len() >= 2 => {
            let wide = small.lo > 2f64.ln();
            // The Welch interval of the difference of the two means, t at its degrees of
            // freedom (SPEC §9 Revision, statistics).
            let (first, last) = (&raw[0].1, &raw[raw.len() - 1].1);
            let (diff, df) = crate::report::stats::welch(last, first);
            let v = if small.n < 2 || large.n < 2 {
                Verdict::Inconclusive
            } else if wide && diff.below_zero() {
                Verdict::Reproduced
            } else if small.below_zero() || diff.above_zero() {
                Verdict::NotReproduced
            } else {
                Verdict::Inconclusive
            };
            (
                v,
                format!(
                    "{sb}: hallucination/invalid = {:.2} (ln {:.2} [{:.2}, {:.2}]); {lb}: {:.2}; ln-ratio change {:.2} [{:.2}, {:.2}] (Welch, df {df:.1})",
                    small.mean.exp(),
                    small.mean,
                    small.lo,
                    small.hi,
                    large.mean.exp(),
                    diff.mean,
                    diff.lo,
                    diff.hi
                ),
            )
        }
        _ => (Verdict::NotTested, "needs two buckets".to_string()),
    };
    (verdict, statistic, numbers)
}

/// Per (bucket, hop count): each depth's C over its runs at their last evaluation, and depth's
/// effect as the slope of C on log2 L over runs (a 95% t-interval).
pub struct HopDepth {
    pub bucket: String,
    pub hop: u32,
    pub by_depth: Vec<(u64, MeanCi)>,
    pub slope: Option<MeanCi>,
}

/// The hop × depth breakdown of every depth group.
pub fn hop_depth(depth: &[Group]) -> Vec<HopDepth> {
    let mut out = Vec::new();
    for (b, rows) in depth {
        let last = finals(rows);
        let hops: BTreeSet<u32> = last
            .iter()
            .flat_map(|r| r.0.keys())
            .filter_map(|k| k.strip_prefix(tags::CREATIVITY_BY_HOP)?.parse().ok())
            .collect();
        for h in hops {
            let col = tags::creativity_by_hop(h);
            let mut by: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for r in &last {
                if let (Some(l), Some(c)) = (r.num("n_layer"), r.num(&col)) {
                    by.entry(l as u64).or_default().push(c);
                    x.push(l.log2());
                    y.push(c);
                }
            }
            out.push(HopDepth {
                bucket: b.clone(),
                hop: h,
                by_depth: by.iter().map(|(l, v)| (*l, MeanCi::of(v))).collect(),
                slope: slope_ci(&x, &y),
            });
        }
    }
    out
}

/// Whether depth's effect changes sign with the hop count, per bucket: "yes" where one hop's
/// slope interval lies above 0 and another's below, "no" where every hop's lies on one side,
/// "inconclusive" otherwise. The numbers behind it go beside.
pub fn hop_depth_json(cells: &[HopDepth]) -> Value {
    let mut by: BTreeMap<&str, Vec<&HopDepth>> = BTreeMap::new();
    for c in cells {
        by.entry(&c.bucket).or_default().push(c);
    }
    let buckets: Vec<Value> = by
        .into_iter()
        .map(|(b, cs)| {
            let sign = |c: &HopDepth| match c.slope {
                Some(m) if m.above_zero() => "+",
                Some(m) if m.below_zero() => "-",
                _ => "0",
            };
            let signs: Vec<&str> = cs.iter().map(|c| sign(c)).collect();
            let changes = if signs.contains(&"+") && signs.contains(&"-") {
                "yes"
            } else if !signs.contains(&"0") && !signs.is_empty() {
                "no"
            } else {
                "inconclusive"
            };
            let hops: Vec<Value> = cs
                .iter()
                .map(|c| {
                    json!({
                        "hop": c.hop,
                        "slope_per_doubling": c.slope.as_ref().map(ci_json),
                        "sign": sign(c),
                        "c_by_depth": c.by_depth.iter()
                            .map(|(l, m)| json!({"n_layer": l, "c": ci_json(m)}))
                            .collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({"bucket": b, "changes_sign": changes, "hops": hops})
        })
        .collect();
    json!({
        "test": "Per (bucket, hop count), every run at its last evaluation: the least-squares \
                 slope of C (over that hop's eval queries) on log2 L, with a 95% t-interval over \
                 runs. Depth's effect changes sign if one hop's interval lies above 0 and \
                 another's below; it does not if every hop's lies on the same side.",
        "buckets": buckets,
    })
}

/// Every claim tested on `rows`.
pub fn findings(rows: &[Row]) -> Vec<Finding> {
    let (depth, width) = groups(rows);
    vec![
        compute(&depth),
        depth_claim(&depth),
        width_claim(&width),
        tradeoff(&depth),
        errors(&depth),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(hop: u32, lo: f64, hi: f64) -> HopDepth {
        HopDepth {
            bucket: "b".into(),
            hop,
            by_depth: Vec::new(),
            slope: Some(MeanCi {
                mean: (lo + hi) / 2.0,
                lo,
                hi,
                n: 6,
            }),
        }
    }

    fn changes(cells: &[HopDepth]) -> Value {
        hop_depth_json(cells)["buckets"][0]["changes_sign"].clone()
    }

    #[test]
    fn depth_changes_sign_only_when_two_hops_resolve_opposite_sides() {
        assert_eq!(changes(&[cell(1, -2.0, -1.0), cell(6, 0.5, 1.0)]), "yes");
        assert_eq!(changes(&[cell(1, -2.0, -1.0), cell(6, -0.5, -0.1)]), "no");
        assert_eq!(
            changes(&[cell(1, -2.0, -1.0), cell(6, -0.5, 0.1)]),
            "inconclusive"
        );
        assert_eq!(changes(&[cell(1, 1.0, 2.0), cell(6, 0.1, 0.3)]), "no");
    }

    /// Three seeds at L = 1, 2, 4, 8: L = 2 best at every evaluation, but L = 1's first
    /// evaluation costs more than any other run ever reaches (L × E fixed: its FLOPs per token
    /// are many times the others'). At the common compute L = 1 has no C, so the test is
    /// inconclusive and says so, instead of calling L = 2 the shallowest; at the last
    /// evaluation every depth counts and L = 2 is an interior best.
    #[test]
    fn a_depth_missing_at_the_common_compute_makes_the_depth_test_inconclusive() {
        let mut rows = Vec::new();
        for (depth, c, flops) in [
            (1.0, 3.0, 8e12),
            (2.0, 6.0, 1e12),
            (4.0, 4.0, 1e12),
            (8.0, 1.0, 1e12),
        ] {
            for seed in 0..3 {
                for (frac, scale) in [(0.5, 0.5), (1.0, 1.0)] {
                    let mut m = BTreeMap::new();
                    for (k, v) in [
                        ("run", format!("L{depth}-{seed}")),
                        ("bucket", "1M".into()),
                        ("n_layer", depth.to_string()),
                        (FLOPS, (flops * frac).to_string()),
                        (FLOPS_WITH_HEAD, (flops * frac).to_string()),
                        (
                            tags::CREATIVITY,
                            (c * scale + 0.1 * seed as f64).to_string(),
                        ),
                    ] {
                        m.insert(k.to_string(), v);
                    }
                    rows.push(Row(m));
                }
            }
        }
        let refs: Vec<&Row> = rows.iter().collect();
        let f = depth_claim(&[("1M".to_string(), refs)]);
        assert_eq!(f.verdict, Verdict::Inconclusive, "{}", f.statistic);
        assert!(
            f.statistic.contains("L = 1 has no evaluation"),
            "{}",
            f.statistic
        );
        assert_eq!(f.numbers[0]["left_out"], json!([1.0]));
        // The depths that reach the common compute still have their C there.
        let placed = f.numbers[0]["c_by_setting"].as_array().unwrap();
        let depths: Vec<f64> = placed
            .iter()
            .map(|s| s["n_layer"].as_f64().unwrap())
            .collect();
        assert_eq!(depths, [2.0, 4.0, 8.0]);
        let l2 = placed[0]["c"]["mean"].as_f64().unwrap();
        assert!(
            (l2 - 6.1).abs() < 1e-9,
            "L = 2's C at the common compute: {l2}"
        );
        let last = &f.numbers[0]["at_last_evaluation"];
        assert_eq!(last["c_by_setting"].as_array().unwrap().len(), 4, "{last}");
        assert!(last["p_claimed"].as_f64().unwrap() > 0.99, "{last}");
    }

    /// Rows of one bucket: per depth, one run per C value, each evaluated twice at the same C.
    fn depth_rows(bucket: &str, cells: &[(f64, [f64; 3])]) -> Vec<Row> {
        let mut rows = Vec::new();
        for (depth, cs) in cells {
            for (seed, c) in cs.iter().enumerate() {
                for frac in [0.5, 1.0] {
                    let m: BTreeMap<String, String> = [
                        ("run", format!("{bucket}-L{depth}-{seed}")),
                        ("bucket", bucket.into()),
                        ("n_layer", depth.to_string()),
                        (FLOPS, (1e12 * frac).to_string()),
                        (FLOPS_WITH_HEAD, (1e12 * frac).to_string()),
                        (tags::CREATIVITY, c.to_string()),
                    ]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect();
                    rows.push(Row(m));
                }
            }
        }
        rows
    }

    /// L = 1 is best in every bootstrap resample (P(interior) = 0), but one seed carries it and
    /// the Welch interval of C(L = 2) − C(L = 1) holds 0: inconclusive, whatever P says. With
    /// the seeds close together the interval lies below 0: not reproduced. A 100k bucket is
    /// said beside the verdict and does not vote.
    #[test]
    fn an_interval_holding_zero_is_inconclusive_and_only_the_papers_buckets_vote() {
        let spread = depth_rows(
            "1M",
            &[
                (1.0, [3.05, 3.1, 9.0]),
                (2.0, [2.9, 2.95, 3.0]),
                (4.0, [1.0, 1.1, 1.2]),
            ],
        );
        let f = depth_claim(&[("1M".to_string(), spread.iter().collect())]);
        assert_eq!(
            f.numbers[0]["p_claimed"].as_f64(),
            Some(0.0),
            "{}",
            f.statistic
        );
        let d = &f.numbers[0]["contrast"]["difference"];
        assert!(
            d["lo"].as_f64().unwrap() < 0.0 && d["hi"].as_f64().unwrap() > 0.0,
            "{d}"
        );
        assert_eq!(f.verdict, Verdict::Inconclusive, "{}", f.statistic);
        assert!(
            f.statistic.contains("C(L = 2) − C(L = 1) = -2.100"),
            "{}",
            f.statistic
        );

        let tight = depth_rows(
            "1M",
            &[
                (1.0, [5.0, 5.1, 5.2]),
                (2.0, [2.9, 2.95, 3.0]),
                (4.0, [1.0, 1.1, 1.2]),
            ],
        );
        let small = depth_rows(
            "100k",
            &[
                (1.0, [1.0, 1.1, 1.2]),
                (2.0, [5.0, 5.1, 5.2]),
                (4.0, [1.0, 1.1, 1.2]),
            ],
        );
        let f = depth_claim(&[
            ("100k".to_string(), small.iter().collect()),
            ("1M".to_string(), tight.iter().collect()),
        ]);
        assert_eq!(f.verdict, Verdict::NotReproduced, "{}", f.statistic);
        assert!(
            f.statistic
                .contains("beside it, not voted: 100k reproduced"),
            "{}",
            f.statistic
        );
        // Only a bucket below the paper's: nothing votes.
        let f = depth_claim(&[("100k".to_string(), small.iter().collect())]);
        assert_eq!(f.verdict, Verdict::NotTested, "{}", f.statistic);
        assert!(votes("1M") && votes("100M") && votes("grid-1m") && !votes("100k"));
    }
}
