//! The objectives study's four questions (issue 24; seed 002 §C.1, Nagarajan et al. 2025) on a
//! study's `results.csv`: each answered from a stated test over seeds, with its numbers.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use crate::report::Row;
use crate::report::findings::{FLOPS, all_of, at_compute, ci_json, finals};
use crate::report::stats::{MeanCi, welch_diff, welch_of};
use crate::tags;

/// A question's answer.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    Supported,
    NotSupported,
    Inconclusive,
    NotTested,
}

impl Answer {
    /// From a difference's 95% interval: above zero supports, below zero refutes.
    fn of(d: &MeanCi) -> Answer {
        if d.above_zero() {
            Answer::Supported
        } else if d.below_zero() {
            Answer::NotSupported
        } else {
            Answer::Inconclusive
        }
    }

    /// Over several cells: supported only if every cell is, refuted if any cell is.
    fn all(vs: &[Answer]) -> Answer {
        all_of(
            vs,
            [
                Answer::Supported,
                Answer::NotSupported,
                Answer::Inconclusive,
                Answer::NotTested,
            ],
        )
    }
}

/// One question's outcome.
#[derive(Debug, Serialize)]
pub struct Question {
    pub question: u32,
    pub name: &'static str,
    pub asks: &'static str,
    pub answer: Answer,
    pub test: &'static str,
    pub statistic: String,
    pub numbers: Value,
}

/// A run's training setting: the objective, whether it is hash-conditioned, and whether its
/// training prefixes were drawn once per sequence (`train.hash_draw = "once"`) rather than
/// every epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Setting {
    pub teacherless: bool,
    pub hash: bool,
    pub once: bool,
}

impl Setting {
    pub const NTP: Setting = Setting {
        teacherless: false,
        hash: false,
        once: false,
    };

    pub fn of(r: &Row) -> Setting {
        let hash = r.num("hash_prefix").is_some_and(|h| h > 0.0);
        Setting {
            teacherless: r.get("objective") == "teacherless",
            hash,
            once: hash && r.get("hash_draw") == "once",
        }
    }

    pub fn label(&self) -> String {
        let obj = if self.teacherless {
            "teacherless"
        } else {
            "ntp"
        };
        match (self.hash, self.once) {
            (false, _) => obj.to_string(),
            (true, false) => format!("{obj} + hash"),
            (true, true) => format!("{obj} + hash once"),
        }
    }
}

/// Whether a study's runs differ by objective or hash-conditioning.
pub fn varies(rows: &[Row]) -> bool {
    let mut s: Vec<Setting> = rows.iter().map(Setting::of).collect();
    s.sort();
    s.dedup();
    s.len() > 1
}

/// (bucket, depth) → setting → the runs' rows, every evaluation.
type Cells<'a> = BTreeMap<(String, u64), BTreeMap<Setting, Vec<&'a Row>>>;

pub fn cells(rows: &[Row]) -> Cells<'_> {
    let mut c: Cells = BTreeMap::new();
    for r in rows {
        let depth = r.num("n_layer").unwrap_or(0.0) as u64;
        c.entry((r.get("bucket").to_string(), depth))
            .or_default()
            .entry(Setting::of(r))
            .or_default()
            .push(r);
    }
    c
}

fn show(m: &MeanCi) -> String {
    format!("{:+.3} [{:+.3}, {:+.3}]", m.mean, m.lo, m.hi)
}

/// `col` at each run's last evaluation.
fn last(rows: &[&Row], col: &str) -> Vec<f64> {
    finals(rows).iter().filter_map(|r| r.num(col)).collect()
}

/// Mean greedy C over the eval queries of at least 2 hops (each hop count weighted equally).
fn multi_hop(r: &Row) -> Option<f64> {
    let v: Vec<f64> = (2..=crate::config::MAX_HOPS)
        .filter_map(|h| r.num(&tags::creativity_by_hop(h)))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The four questions, each answered over every (bucket, depth) with the settings it needs.
pub fn questions(rows: &[Row]) -> Vec<Question> {
    let cells = cells(rows);
    vec![
        teacherless_greedy(&cells),
        hash_sets(&cells),
        where_gain(&cells),
        depth_interaction(&cells),
    ]
}

const TL: Setting = Setting {
    teacherless: true,
    hash: false,
    once: false,
};

/// Q1: teacherless against NTP on greedy C, at equal epochs (each run's last evaluation) and
/// at equal training compute (every run's C at the least compute any of them reached).
fn teacherless_greedy(cells: &Cells) -> Question {
    let (mut answers, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for ((bucket, depth), by) in cells {
        let (Some(ntp), Some(tl)) = (by.get(&Setting::NTP), by.get(&TL)) else {
            continue;
        };
        let epochs = welch_diff(&last(tl, tags::CREATIVITY), &last(ntp, tags::CREATIVITY));
        let both: Vec<&Row> = ntp.iter().chain(tl.iter()).copied().collect();
        let (common, at) = at_compute(&both, FLOPS);
        let c_at = |s: Setting| -> Vec<f64> {
            at.iter()
                .filter(|(r, _)| Setting::of(r) == s)
                .map(|(_, c)| *c)
                .collect()
        };
        let compute = welch_diff(&c_at(TL), &c_at(Setting::NTP));
        answers.push(Answer::of(&epochs));
        answers.push(Answer::of(&compute));
        stat.push(format!(
            "{bucket} L={depth}: ΔC {} at 16 epochs, {} at {common:.3e} FLOPs",
            show(&epochs),
            show(&compute)
        ));
        numbers.push(json!({
            "bucket": bucket, "n_layer": depth,
            "ntp_c": ci_json(&MeanCi::of(&last(ntp, tags::CREATIVITY))),
            "teacherless_c": ci_json(&MeanCi::of(&last(tl, tags::CREATIVITY))),
            "equal_epochs_diff": ci_json(&epochs),
            "equal_compute_flops": common,
            "equal_compute_ntp_c": ci_json(&MeanCi::of(&c_at(Setting::NTP))),
            "equal_compute_teacherless_c": ci_json(&MeanCi::of(&c_at(TL))),
            "equal_compute_diff": ci_json(&compute),
        }));
    }
    Question {
        question: 1,
        name: "teacherless_raises_greedy_creativity",
        asks: "Does teacherless training raise greedy creativity C over next-token prediction?",
        answer: Answer::all(&answers),
        test: "per (bucket, depth), no hash prefix: C(teacherless) − C(NTP) over seeds, Welch 95% \
               interval, at equal epochs (both at their last evaluation) and at equal compute \
               (each run's C at the least FLOPs, LM head out, that every run of the cell reached, \
               linear in log FLOPs); supported if every interval lies above 0, not supported if \
               any lies below",
        statistic: stat.join("; "),
        numbers: Value::Array(numbers),
    }
}

/// Q2: K hash-conditioned greedy answers against K temperature samples of the plain model
/// (at the temperature chosen on the tuning split), on set score and coverage.
fn hash_sets(cells: &Cells) -> Question {
    let (mut answers, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for ((bucket, depth), by) in cells {
        for (teacherless, once) in [(false, false), (false, true), (true, false), (true, true)] {
            let plain = Setting {
                teacherless,
                hash: false,
                once: false,
            };
            let hashed = Setting {
                teacherless,
                hash: true,
                once,
            };
            let (Some(p), Some(h)) = (by.get(&plain), by.get(&hashed)) else {
                continue;
            };
            let score = welch_diff(&last(h, tags::SET_SCORE), &last(p, tags::SET_SCORE));
            let coverage = welch_diff(&last(h, tags::SET_COVERAGE), &last(p, tags::SET_COVERAGE));
            if score.n == 0 || coverage.n == 0 {
                continue;
            }
            answers.push(Answer::all(&[Answer::of(&score), Answer::of(&coverage)]));
            stat.push(format!(
                "{bucket} L={depth} {} against {}: Δs(S) {}, Δcoverage {}",
                hashed.label(),
                plain.label(),
                show(&score),
                show(&coverage)
            ));
            numbers.push(json!({
                "bucket": bucket, "n_layer": depth, "objective": plain.label(),
                "setting": hashed.label(),
                "plain_set_score": ci_json(&MeanCi::of(&last(p, tags::SET_SCORE))),
                "hash_set_score": ci_json(&MeanCi::of(&last(h, tags::SET_SCORE))),
                "plain_coverage": ci_json(&MeanCi::of(&last(p, tags::SET_COVERAGE))),
                "hash_coverage": ci_json(&MeanCi::of(&last(h, tags::SET_COVERAGE))),
                "plain_temperatures": last(p, tags::SET_TEMPERATURE),
                "set_score_diff": ci_json(&score),
                "coverage_diff": ci_json(&coverage),
            }));
        }
    }
    Question {
        question: 2,
        name: "hash_conditioning_raises_set_diversity",
        asks: "Do K hash-conditioned greedy answers per query give a higher CREATE set score and \
               coverage than K temperature samples from the plain model?",
        answer: Answer::all(&answers),
        test: "per (bucket, depth, objective), at the last evaluation: hash-conditioned − plain, \
               for the set score s(S) and for coverage, Welch 95% intervals over seeds; the \
               plain model samples at the temperature whose samples of the tuning split scored \
               best; supported if every interval lies above 0, not supported if any lies below",
        statistic: stat.join("; "),
        numbers: Value::Array(numbers),
    }
}

/// Q3: where each objective's change comes from: memory (1-hop C, hallucinated edges) or
/// planning (C on the queries of 2 hops or more, invalid paths), against NTP.
fn where_gain(cells: &Cells) -> Question {
    let (mut answers, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for ((bucket, depth), by) in cells {
        let Some(ntp) = by.get(&Setting::NTP) else {
            continue;
        };
        let base = finals(ntp);
        for (s, rows) in by.iter().filter(|(s, _)| **s != Setting::NTP) {
            let f = finals(rows);
            // The change of one figure at the last evaluation, this setting against NTP.
            let change = |get: &dyn Fn(&Row) -> Option<f64>| {
                let of = |rs: &[&Row]| rs.iter().filter_map(|r| get(r)).collect::<Vec<f64>>();
                welch_diff(&of(&f), &of(&base))
            };
            let hop1 = tags::creativity_by_hop(1);
            let d1 = change(&|r| r.num(&hop1));
            let dm = change(&multi_hop);
            let dh = change(&|r| r.num(tags::ROLLUP_HALLUCINATION));
            let di = change(&|r| r.num(tags::ROLLUP_INVALID_PATH));
            let place = match (d1.above_zero(), dm.above_zero()) {
                (true, true) => "memory and planning",
                (true, false) => "memory",
                (false, true) => "planning",
                (false, false) => "neither",
            };
            answers.push(Answer::of(&dm));
            stat.push(format!(
                "{bucket} L={depth} {}: ΔC 1-hop {}, ΔC ≥2 hops {} ({place})",
                s.label(),
                show(&d1),
                show(&dm)
            ));
            numbers.push(json!({
                "bucket": bucket, "n_layer": depth, "setting": s.label(), "against": "ntp",
                "one_hop_c_diff": ci_json(&d1), "multi_hop_c_diff": ci_json(&dm),
                "hallucination_diff": ci_json(&dh), "invalid_path_diff": ci_json(&di),
                "gain_in": place,
            }));
        }
    }
    Question {
        question: 3,
        name: "gain_is_in_planning",
        asks: "Does an objective help with memory (1-hop validity) or with planning (multi-hop)?",
        answer: Answer::all(&answers),
        test: "per (bucket, depth, setting) against NTP, at the last evaluation: the change in C \
               over 1-hop queries (memory), in mean C over the hop counts ≥ 2 (planning), and in \
               the hallucination and invalid-path roll-ups, Welch 95% intervals over seeds; the \
               answer is on planning: supported if every ≥ 2-hop interval lies above 0; \
               `gain_in` says which intervals lie above 0",
        statistic: stat.join("; "),
        numbers: Value::Array(numbers),
    }
}

/// Q4: does teacherless's effect on greedy C differ between the shallow and the deep model?
fn depth_interaction(cells: &Cells) -> Question {
    // Per bucket, per depth: (depth, teacherless C, NTP C) at the last evaluation.
    type Depth = (u64, Vec<f64>, Vec<f64>);
    let mut by_bucket: BTreeMap<&str, Vec<Depth>> = BTreeMap::new();
    for ((bucket, depth), by) in cells {
        if let (Some(ntp), Some(tl)) = (by.get(&Setting::NTP), by.get(&TL)) {
            by_bucket.entry(bucket).or_default().push((
                *depth,
                last(tl, tags::CREATIVITY),
                last(ntp, tags::CREATIVITY),
            ));
        }
    }
    let (mut answers, mut numbers, mut stat) = (Vec::new(), Vec::new(), Vec::new());
    for (bucket, depths) in by_bucket {
        let (Some(lo), Some(hi)) = (depths.first(), depths.last()) else {
            continue;
        };
        if lo.0 == hi.0 {
            continue;
        }
        let d = welch_of(&[(&hi.1, 1.0), (&hi.2, -1.0), (&lo.1, -1.0), (&lo.2, 1.0)]).0;
        answers.push(if d.above_zero() || d.below_zero() {
            Answer::Supported
        } else {
            Answer::Inconclusive
        });
        stat.push(format!(
            "{bucket}: ΔC(L={}) − ΔC(L={}) = {}",
            hi.0,
            lo.0,
            show(&d)
        ));
        numbers.push(json!({
            "bucket": bucket, "shallow": lo.0, "deep": hi.0,
            "shallow_diff": ci_json(&welch_diff(&lo.1, &lo.2)), "deep_diff": ci_json(&welch_diff(&hi.1, &hi.2)),
            "difference_of_differences": ci_json(&d),
        }));
    }
    Question {
        question: 4,
        name: "objective_interacts_with_depth",
        asks: "Does the objective's effect on greedy C change with depth (best depth against L = 8)?",
        answer: Answer::all(&answers),
        test: "per bucket: [C(teacherless) − C(NTP)] at the deep model minus the same at the \
               shallow one, no hash prefix, last evaluation, a 95% interval on the \
               Welch–Satterthwaite degrees of freedom of the four groups; supported if it \
               excludes 0 (either sign), inconclusive if it holds 0 (three seeds cannot show \
               that an interaction is absent)",
        statistic: stat.join("; "),
        numbers: Value::Array(numbers),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A run's row at one evaluation.
    fn row(run: &str, depth: u64, tl: bool, hash: bool, flops: f64, c: f64) -> Row {
        let mut m = BTreeMap::new();
        for (k, v) in [
            ("run", run.to_string()),
            ("bucket", "100k".into()),
            ("n_layer", depth.to_string()),
            ("objective", if tl { "teacherless" } else { "ntp" }.into()),
            ("hash_prefix", if hash { "10" } else { "0" }.into()),
            (FLOPS, flops.to_string()),
            (tags::CREATIVITY, c.to_string()),
            (tags::SET_SCORE, (c / 2.0).to_string()),
            (tags::SET_COVERAGE, (c / 100.0).to_string()),
        ] {
            m.insert(k.to_string(), v);
        }
        Row(m)
    }

    #[test]
    fn welch_interval_by_hand() {
        // Means 2 and 5, variances 1: se = √(2/3), df = (2/3)² / (2·(1/3)²/2) = 4,
        // t = 2.7764451 (to 8 digits).
        let d = welch_diff(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
        assert!((d.mean + 3.0).abs() < 1e-12);
        assert!(
            (d.half() - 2.776_445_1 * (2.0f64 / 3.0).sqrt()).abs() < 1e-6,
            "{d:?}"
        );
        assert_eq!(Answer::of(&d), Answer::NotSupported);
        assert_eq!(
            Answer::of(&welch_diff(&[1.0, 3.0], &[2.0, 2.5])),
            Answer::Inconclusive
        );
        assert!(welch_diff(&[1.0], &[2.0]).lo.is_nan());
    }

    /// Teacherless ahead by 1 at both depths (at 16 epochs, and at NTP's compute on a curve
    /// that rises linearly in log FLOPs), hash-conditioning behind on sets: Q1 supported, Q2 not
    /// supported, Q4 inconclusive (the same gain at both depths).
    #[test]
    fn questions_on_a_synthetic_study() {
        let mut rows = Vec::new();
        for depth in [1, 8] {
            for seed in 0..3 {
                let jitter = 0.1 * seed as f64;
                for (tl, hash, top) in [
                    (false, false, 5.0),
                    (true, false, 6.0),
                    (false, true, 4.0),
                    (true, true, 4.5),
                ] {
                    let run = format!("L{depth}-{tl}-{hash}-{seed}");
                    // Teacherless trains 1.5× the FLOPs for the same epochs.
                    let end = if tl { 1.5e12 } else { 1e12 };
                    rows.push(row(&run, depth, tl, hash, end / 10.0, top - 3.0 + jitter));
                    rows.push(row(&run, depth, tl, hash, end, top + jitter));
                }
            }
        }
        assert!(varies(&rows));
        let q = questions(&rows);
        assert_eq!(q[0].answer, Answer::Supported, "{}", q[0].statistic);
        let n = &q[0].numbers[0];
        assert!((n["equal_epochs_diff"]["mean"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        // At 1e12 FLOPs a teacherless run (3 up over a decade of FLOPs) is 3·log10(1.5) below
        // its top.
        let expect = 1.0 - 3.0 * 1.5f64.log10();
        assert!((n["equal_compute_diff"]["mean"].as_f64().unwrap() - expect).abs() < 1e-9);
        assert_eq!(q[1].answer, Answer::NotSupported, "{}", q[1].statistic);
        assert_eq!(q[3].answer, Answer::Inconclusive, "{}", q[3].statistic);
        let dd = &q[3].numbers[0]["difference_of_differences"]["mean"];
        assert!(dd.as_f64().unwrap().abs() < 1e-9);
    }

    /// Prefixes drawn once are a setting of their own: question 2 compares each reading with
    /// the plain model separately, and the labels say which.
    #[test]
    fn hash_draws_are_separate_settings() {
        let mut rows = Vec::new();
        for seed in 0..3 {
            let jitter = 0.1 * seed as f64;
            for (name, hash, once, c) in [
                ("plain", false, false, 5.0),
                ("epoch", true, false, 3.0),
                ("once", true, true, 8.0),
            ] {
                let mut r = row(&format!("{name}-{seed}"), 1, false, hash, 1e12, c + jitter);
                if once {
                    r.0.insert("hash_draw".into(), "once".into());
                }
                rows.push(r);
            }
        }
        let labels: BTreeSet<String> = rows.iter().map(|r| Setting::of(r).label()).collect();
        assert_eq!(
            labels,
            ["ntp", "ntp + hash", "ntp + hash once"]
                .map(String::from)
                .into()
        );
        let q2 = &questions(&rows)[1];
        let by: BTreeMap<&str, f64> = q2
            .numbers
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["setting"].as_str().unwrap(),
                    n["set_score_diff"]["mean"].as_f64().unwrap(),
                )
            })
            .collect();
        assert!((by["ntp + hash"] - -1.0).abs() < 1e-9, "{by:?}");
        assert!((by["ntp + hash once"] - 1.5).abs() < 1e-9, "{by:?}");
        assert_eq!(q2.answer, Answer::NotSupported, "{}", q2.statistic);
        assert!(
            q2.statistic.contains("ntp + hash once against ntp"),
            "{}",
            q2.statistic
        );
    }
}
