//! Which runs can share a pack (SPEC §8 Revision, packs): the same world and data, model shape,
//! batch size, step count and precision; anything else a run trains on alone may differ.

use anyhow::{Result, bail};
use candle_core::Device;
use serde_json::Value;

use crate::config::{Config, Precision};

/// The keys a pack's runs may differ in: each run's own seed, optimizer, schedule, sequences
/// (a hash prefix, the objective: the pack takes each run's own batch), logging, checkpoints
/// and evaluation. Every other key must be equal.
const PER_RUN: &[&str] = &[
    "train.seed",
    "train.lr",
    "train.warmup_frac",
    "train.min_lr_frac",
    "train.weight_decay",
    "train.beta1",
    "train.beta2",
    "train.eps",
    "train.grad_clip",
    "train.objective",
    "train.teacherless_fraction",
    "train.hash_prefix",
    "train.hash_draw",
    "train.log_every",
    "train.checkpoint_every",
];

/// Every leaf of a section as (`section.key…`, value), in the section's order.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                leaves(&format!("{prefix}.{k}"), v, out);
            }
        }
        v => out.push((prefix.to_string(), v.clone())),
    }
}

/// The keys of `cfg` that must be equal across a pack, with their values.
fn shared(cfg: &Config) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    leaves("graph", &serde_json::to_value(&cfg.graph)?, &mut out);
    leaves("data", &serde_json::to_value(&cfg.data)?, &mut out);
    leaves("model", &serde_json::to_value(&cfg.model)?, &mut out);
    leaves("train", &serde_json::to_value(&cfg.train)?, &mut out);
    out.retain(|(k, _)| !PER_RUN.contains(&k.as_str()));
    Ok(out)
}

/// Why a run cannot train in any pack, if it cannot: a pack trains in fp32 on the CPU (for
/// now) and takes each run's whole batch.
pub fn alone_reason(cfg: &Config) -> Option<&'static str> {
    if Precision::resolve(cfg.train.precision, &Device::Cpu) != Precision::Fp32 {
        return Some("train.precision: a pack trains in fp32 on the CPU for now");
    }
    if cfg.train.micro_batch.is_some() {
        return Some("train.micro_batch: a pack takes each run's whole batch");
    }
    None
}

/// What runs must share to share a pack, as one string: equal exactly for runs that may.
pub fn key(cfg: &Config) -> Result<String> {
    Ok(serde_json::to_string(&shared(cfg)?)?)
}

/// Refuse runs that cannot train as one pack, naming the first run that differs from the
/// first, the first key that differs, and both values.
pub fn check(cfgs: &[&Config]) -> Result<()> {
    let Some((first, rest)) = cfgs.split_first() else {
        bail!("a pack of no runs");
    };
    for cfg in cfgs {
        if let Some(why) = alone_reason(cfg) {
            bail!("{}: {why}", cfg.source.display());
        }
    }
    let want = shared(first)?;
    for cfg in rest {
        let got = shared(cfg)?;
        let mut keys = want.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>();
        keys.extend(got.iter().map(|(k, _)| k.as_str()));
        for key in keys {
            let find =
                |of: &[(String, Value)]| of.iter().find(|(k, _)| k == key).map(|p| p.1.clone());
            let (a, b) = (find(&want), find(&got));
            if a != b {
                let show = |v: Option<Value>| v.map_or("unset".to_string(), |v| v.to_string());
                bail!(
                    "{}: cannot share a pack with {}: {key} is {} there and {} here",
                    cfg.source.display(),
                    first.source.display(),
                    show(a),
                    show(b)
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(overrides: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, format!("name = \"c\"\n{overrides}")).unwrap();
        Config::load(&path).unwrap()
    }

    /// Seeds, learning rates, decay, warm-up, clipping and hash prefixes may differ; a model
    /// shape, a batch size, the epochs or the world may not, and the refusal names the key.
    #[test]
    fn a_pack_shares_its_shape_data_and_steps_and_nothing_else_is_asked() {
        let base = config("");
        let free = config(
            "[train]\nseed = 7\nlr = 3e-3\nweight_decay = 0.0\nwarmup_frac = 0.1\ngrad_clip = 0.5\nhash_prefix = 4\n[eval]\nevery = 2\n",
        );
        check(&[&base, &free]).unwrap();
        for (text, key) in [
            ("[model]\nn_layer = 8\n", "model.n_layer"),
            ("[train]\nbatch_size = 32\n", "train.batch_size"),
            ("[train]\nepochs = 3\n", "train.epochs"),
            ("[graph]\nseed = 5\n", "graph.seed"),
            ("[train]\nprecision = \"bf16\"\n", "train.precision"),
            ("[train]\nmicro_batch = 16\n", "train.micro_batch"),
        ] {
            let err = check(&[&base, &free, &config(text)])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(key)
                    && (err.contains("cannot share a pack") || err.contains("a pack ")),
                "{err}"
            );
        }
    }
}
