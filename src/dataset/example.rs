//! The sequence format of SPEC §4 as text: `u v [ I… ] [ X… ] : v0 l1 v1 … lh vh <eos>`.
//! Renders queries and examples, and parses them back (for `train.txt` and `lab query`).

use anyhow::{Result, bail};

use crate::graph::{Graph, label_char};
use crate::search::{Path, Query};

/// A training example: a query and its answer path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    pub query: Query,
    pub path: Path,
}

/// The prompt `u v [ I… ] [ X… ] :`, labels in alphabetical order.
pub fn prompt(g: &Graph, q: &Query) -> String {
    let mut s = String::new();
    g.push_node_name(q.u, &mut s);
    s.push(' ');
    g.push_node_name(q.v, &mut s);
    for set in [q.include, q.exclude] {
        s.push_str(" [");
        for l in 0..g.n_labels as u8 {
            if set >> l & 1 != 0 {
                s.push(' ');
                s.push(label_char(l));
            }
        }
        s.push_str(" ]");
    }
    s.push_str(" :");
    s
}

/// The path as `v0 l1 v1 … lh vh`.
pub fn path_text(g: &Graph, p: &Path) -> String {
    let mut s = String::new();
    g.push_node_name(p.nodes[0], &mut s);
    for (l, &x) in p.labels.iter().zip(&p.nodes[1..]) {
        s.push(' ');
        s.push(label_char(*l));
        s.push(' ');
        g.push_node_name(x, &mut s);
    }
    s
}

impl Example {
    /// One `train.txt` line, `<eos>` included.
    pub fn to_line(&self, g: &Graph) -> String {
        format!(
            "{} {} <eos>",
            prompt(g, &self.query),
            path_text(g, &self.path)
        )
    }

    /// Parse a `train.txt` line back.
    pub fn parse(g: &Graph, line: &str) -> Result<Example> {
        let (q, rest) = line
            .split_once(':')
            .ok_or_else(|| anyhow::anyhow!("no ':' separating query and path"))?;
        let query = parse_query(g, q.trim())?;
        let mut toks: Vec<&str> = rest.split_whitespace().collect();
        if toks.pop() != Some("<eos>") {
            bail!("the path does not end with <eos>");
        }
        if toks.len().is_multiple_of(2) {
            bail!("a path alternates nodes and labels and has an odd number of tokens");
        }
        let mut path = Path {
            nodes: Vec::new(),
            labels: Vec::new(),
        };
        for (i, t) in toks.iter().enumerate() {
            if i % 2 == 0 {
                path.nodes.push(node(g, t)?);
            } else {
                path.labels.push(label(g, t)?);
            }
        }
        Ok(Example { query, path })
    }
}

fn node(g: &Graph, t: &str) -> Result<u32> {
    g.parse_node(t)
        .ok_or_else(|| anyhow::anyhow!("`{t}` is not a node of this graph"))
}

fn label(g: &Graph, t: &str) -> Result<u8> {
    g.parse_label(t)
        .ok_or_else(|| anyhow::anyhow!("`{t}` is not a label of this graph"))
}

/// Parse `u v [ I… ] [ X… ]` (the trailing `:` is optional). The two bracket groups may be
/// left out together.
pub fn parse_query(g: &Graph, text: &str) -> Result<Query> {
    let text = text.trim().strip_suffix(':').unwrap_or(text).trim();
    let toks: Vec<&str> = text.split_whitespace().collect();
    if toks.len() < 2 {
        bail!("expected `U V [ I… ] [ X… ]`, got `{text}`");
    }
    let u = node(g, toks[0])?;
    let v = node(g, toks[1])?;
    let mut sets = [0u32; 2];
    let mut rest = &toks[2..];
    if !rest.is_empty() {
        for set in sets.iter_mut() {
            let Some((&"[", tail)) = rest.split_first() else {
                bail!("expected `U V [ I… ] [ X… ]`: missing `[` in `{text}`");
            };
            let close = tail.iter().position(|t| *t == "]").ok_or_else(|| {
                anyhow::anyhow!("expected `U V [ I… ] [ X… ]`: missing `]` in `{text}`")
            })?;
            for t in &tail[..close] {
                *set |= 1 << label(g, t)?;
            }
            rest = &tail[close + 1..];
        }
        if !rest.is_empty() {
            bail!(
                "expected `U V [ I… ] [ X… ]`: unexpected `{}` in `{text}`",
                rest[0]
            );
        }
    }
    if sets[0] & sets[1] != 0 {
        bail!("a label cannot be both included and excluded in `{text}`");
    }
    Ok(Query {
        u,
        v,
        include: sets[0],
        exclude: sets[1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_round_trip() {
        let g = Graph::from_edges(3, 26, vec![1.0; 26], vec![]);
        let ex = Example {
            query: Query {
                u: 0,
                v: g.parse_node("QRS").unwrap(),
                include: 1 << 2,
                exclude: 1 << 23,
            },
            path: Path {
                nodes: vec![
                    0,
                    g.parse_node("KLM").unwrap(),
                    g.parse_node("QRS").unwrap(),
                ],
                labels: vec![2, 1],
            },
        };
        let line = ex.to_line(&g);
        assert_eq!(line, "AAA QRS [ c ] [ x ] : AAA c KLM b QRS <eos>");
        assert_eq!(Example::parse(&g, &line).unwrap(), ex);
        assert_eq!(parse_query(&g, "AAA QRS").unwrap().include, 0);
        assert!(parse_query(&g, "AAA QRS [ c ]").is_err());
        assert!(parse_query(&g, "AAA QRS [ c ] [ c ]").is_err());
        assert!(parse_query(&g, "AAA").is_err());
    }
}
