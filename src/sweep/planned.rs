//! A planned run of a sweep: its name, resolved config and swept values; what a spec resolves
//! to and what selection reads of an earlier sweep.

use toml::Value;

use crate::config::Config;

/// One planned run: its name, its resolved config, and the values of the swept fields.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    pub config: Config,
    /// The swept fields of this run (dotted path → value), in axis order.
    pub axes: Vec<(String, Value)>,
    /// The bucket target this run was sized for, if the sweep has a bucket.
    pub target: Option<u64>,
}
