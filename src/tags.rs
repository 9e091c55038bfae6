//! The names of the figures a run logs (TensorBoard tags, `metrics.jsonl` keys) and of the
//! columns `lab sweep collect` derives from them: train and eval write, collect and report read.

pub const TRAIN_LOSS: &str = "train/loss";
pub const TRAIN_LR: &str = "train/lr";
pub const TRAIN_GRAD_NORM: &str = "train/grad_norm";
pub const TRAIN_TOKENS_PER_S: &str = "train/tokens_per_s";
pub const TRAIN_FLOPS_PER_S: &str = "train/flops_per_s";
pub const TRAIN_MFU: &str = "train/mfu";
/// Logged at every evaluated epoch: the key that marks an eval line of `metrics.jsonl`.
pub const VAL_LOSS: &str = "val/loss";
pub const VAL_LOSS_HASH: &str = "val/loss_hash";
/// The same loss on the tuning split (`tune.jsonl`): what selection reads, never the eval set.
pub const TUNE_LOSS: &str = "tune/loss";
/// Greedy evaluation of the tuning split at every evaluation, its headline figures under
/// `tune/` (`tune/creativity`…): what a selection on creativity reads, never the eval set's.
pub const TUNE_CREATIVITY: &str = "tune/creativity";

/// Greedy evaluation of the eval set.
pub const CREATIVITY: &str = "eval/creativity";
pub const UTILITY: &str = "eval/utility";
pub const NOVELTY_VALID: &str = "eval/novelty_valid";
pub const VALID_RATE: &str = "eval/valid_rate";
/// The share of answers cut off by the decode budget (no `<eos>` within it).
pub const CUT_OFF: &str = "eval/cut_off";
/// Mean count of one error type per answer: `eval/err/<type>`.
pub const ERR: &str = "eval/err/";

/// Set figures of the sampled answers: `eval/set/<figure>`.
pub const SET: &str = "eval/set/";
pub const SET_SCORE: &str = "eval/set/score";
pub const SET_COVERAGE: &str = "eval/set/coverage";
pub const SET_DISTINCT_VALID: &str = "eval/set/distinct_valid";
pub const SET_REPEATS: &str = "eval/set/repeats";
pub const SET_MEAN_DISTANCE: &str = "eval/set/mean_distance";
pub const SET_NOVELTY_VALID: &str = "eval/set/novelty_valid";
pub const SET_VALID_RATE: &str = "eval/set/valid_rate";
pub const SET_CREATIVITY: &str = "eval/set/creativity";
/// The temperature the eval set's samples were drawn at, chosen on the tuning split.
pub const SET_TEMPERATURE: &str = "eval/set/temperature";

/// Columns of `results.csv` that collect derives from an epoch's summary.
pub const ROLLUP: &str = "rollup/";
pub const ROLLUP_HALLUCINATION: &str = "rollup/hallucination";
pub const ROLLUP_INVALID_PATH: &str = "rollup/invalid_path";

pub fn err(kind: &str) -> String {
    format!("{ERR}{kind}")
}

pub fn set_patience(gamma: &str) -> String {
    format!("{SET}patience_{gamma}")
}

/// A set figure of the tuning split's samples at temperature `t`: `tune/set/<figure>/t<t>`.
pub fn tune_set(figure: &str, t: f64) -> String {
    format!("tune/set/{figure}/t{t}")
}

/// An eval figure's name for the tuning split: `eval/creativity` → `tune/creativity`.
pub fn tune(eval_tag: &str) -> String {
    format!("tune/{}", eval_tag.trim_start_matches("eval/"))
}

/// An eval figure's name under another decode budget: `eval/creativity` at 44 tokens →
/// `eval/budget44/creativity` (`eval.final_budgets`).
pub fn at_budget(eval_tag: &str, budget: u32) -> String {
    format!(
        "eval/budget{budget}/{}",
        eval_tag.trim_start_matches("eval/")
    )
}

pub fn rollup(category: &str) -> String {
    format!("{ROLLUP}{category}")
}

/// Novelty normalized per hop count, unweighted mean over hops, at `c` constraints.
pub fn novelty_norm(c: u32) -> String {
    format!("novelty_norm/c{c}")
}

/// Creativity over the eval queries of `h` hops, every constraint count pooled.
pub fn creativity_by_hop(h: u32) -> String {
    format!("creativity_by_hop/h{h}")
}

/// The prefix of every `creativity_by_hop` column.
pub const CREATIVITY_BY_HOP: &str = "creativity_by_hop/h";

/// Novelty normalized and pooled over all valid answers at `c` constraints.
pub fn novelty_pooled(c: u32) -> String {
    format!("novelty_pooled/c{c}")
}
