//! The conceptual space (SPEC §1): node and label names, the label distribution w, the random
//! labelled edge set, its CSR adjacency, and `graph.txt`. Takes its parameters from `config`.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use rand::Rng;
use rand::distr::Distribution;
use rand::distr::weighted::WeightedIndex;

use crate::config::{EdgeLabels, GraphConfig, LabelDist};
use crate::rng::{Purpose, stream};

/// A node id: its index in lexicographic order of names (`AAA` = 0).
pub type Node = u32;
/// A label id: 0 = `a`.
pub type Label = u8;

/// Bits of a packed adjacency entry that hold the label; the neighbour id sits above them.
const LABEL_BITS: u32 = 5;

/// An undirected labelled graph with a compact sorted adjacency.
#[derive(Clone, Debug)]
pub struct Graph {
    pub node_len: u32,
    pub n_labels: u32,
    /// The label distribution w, normalised to sum to 1.
    pub weights: Vec<f64>,
    /// Edges as (u, label, v) with u < v, in the order of `graph.txt` lines.
    pub edges: Vec<(Node, Label, Node)>,
    offsets: Vec<u32>,
    adj: Vec<u32>,
}

/// w from the config: zipf (w_l ∝ 1/rank^s, `a` first), uniform, or explicit weights.
pub fn label_weights(g: &GraphConfig) -> Vec<f64> {
    let raw: Vec<f64> = match g.label_dist {
        LabelDist::Zipf => (1..=g.n_labels)
            .map(|r| 1.0 / (r as f64).powf(g.zipf_s))
            .collect(),
        LabelDist::Uniform => vec![1.0; g.n_labels as usize],
        LabelDist::Weights => g.weights.clone().expect("validated"),
    };
    let total: f64 = raw.iter().sum();
    raw.iter().map(|w| w / total).collect()
}

pub fn node_count(node_len: u32) -> usize {
    26usize.pow(node_len)
}

impl Graph {
    /// Draw the graph of SPEC §1: unordered pairs uniformly without replacement, each with a
    /// label drawn from w (or uniformly, `edge_labels = "uniform"`), until
    /// |E| = round(|V| · avg_degree / 2). The nodes are the first `n_nodes` names.
    pub fn generate(g: &GraphConfig, n_edges: u64) -> Graph {
        let n = g.n_nodes();
        let weights = label_weights(g);
        let draw_from = match g.edge_labels {
            EdgeLabels::Weighted => weights.clone(),
            EdgeLabels::Uniform => vec![1.0; weights.len()],
        };
        let label_dist = WeightedIndex::new(&draw_from).expect("validated weights");
        let mut rng = stream(g.seed, Purpose::Graph, 0);
        let mut seen = HashSet::with_capacity(n_edges as usize);
        let mut edges = Vec::with_capacity(n_edges as usize);
        while (edges.len() as u64) < n_edges {
            let a = rng.random_range(0..n);
            let b = rng.random_range(0..n);
            if a == b {
                continue;
            }
            let (u, v) = (a.min(b), a.max(b));
            if seen.insert(u * n + v) {
                let l = label_dist.sample(&mut rng) as Label;
                edges.push((u as Node, l, v as Node));
            }
        }
        Graph::from_edges_in(g.node_len, n as usize, g.n_labels, weights, edges)
    }

    /// Build from an edge list over every name of `node_len` letters.
    pub fn from_edges(
        node_len: u32,
        n_labels: u32,
        weights: Vec<f64>,
        edges: Vec<(Node, Label, Node)>,
    ) -> Graph {
        Graph::from_edges_in(node_len, node_count(node_len), n_labels, weights, edges)
    }

    /// Build from an edge list over the first `n` names (any order, u < v or not); duplicates
    /// are the caller's bug.
    pub fn from_edges_in(
        node_len: u32,
        n: usize,
        n_labels: u32,
        weights: Vec<f64>,
        mut edges: Vec<(Node, Label, Node)>,
    ) -> Graph {
        for e in edges.iter_mut() {
            if e.0 > e.2 {
                *e = (e.2, e.1, e.0);
            }
        }
        // graph.txt order: lines sorted as strings, i.e. by (u, label, v).
        edges.sort_unstable();
        let mut degree = vec![0u32; n + 1];
        for &(u, _, v) in &edges {
            degree[u as usize] += 1;
            degree[v as usize] += 1;
        }
        let mut offsets = vec![0u32; n + 1];
        for i in 0..n {
            offsets[i + 1] = offsets[i] + degree[i];
        }
        let mut fill = offsets.clone();
        let mut adj = vec![0u32; offsets[n] as usize];
        for &(u, l, v) in &edges {
            adj[fill[u as usize] as usize] = (v << LABEL_BITS) | l as u32;
            fill[u as usize] += 1;
            adj[fill[v as usize] as usize] = (u << LABEL_BITS) | l as u32;
            fill[v as usize] += 1;
        }
        for i in 0..n {
            adj[offsets[i] as usize..offsets[i + 1] as usize].sort_unstable();
        }
        Graph {
            node_len,
            n_labels,
            weights,
            edges,
            offsets,
            adj,
        }
    }

    pub fn n_nodes(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Packed adjacency of `x`, sorted by neighbour; see [`unpack`].
    #[inline]
    pub fn neighbors(&self, x: Node) -> &[u32] {
        &self.adj[self.offsets[x as usize] as usize..self.offsets[x as usize + 1] as usize]
    }

    pub fn degree(&self, x: Node) -> usize {
        self.neighbors(x).len()
    }

    /// The label of edge {u, v}, if there is one.
    pub fn label_between(&self, u: Node, v: Node) -> Option<Label> {
        let nb = self.neighbors(u);
        let i = nb.partition_point(|&e| (e >> LABEL_BITS) < v);
        nb.get(i)
            .filter(|&&e| e >> LABEL_BITS == v)
            .map(|&e| (e & ((1 << LABEL_BITS) - 1)) as Label)
    }

    pub fn node_name(&self, x: Node) -> String {
        let mut s = String::with_capacity(self.node_len as usize);
        self.push_node_name(x, &mut s);
        s
    }

    pub fn push_node_name(&self, x: Node, s: &mut String) {
        for i in (0..self.node_len).rev() {
            let d = (x / 26u32.pow(i)) % 26;
            s.push((b'A' + d as u8) as char);
        }
    }

    /// The id of a node name of this graph, or None if it is not one.
    pub fn parse_node(&self, s: &str) -> Option<Node> {
        if s.len() != self.node_len as usize {
            return None;
        }
        s.bytes()
            .try_fold(0u32, |acc, b| {
                b.is_ascii_uppercase().then(|| acc * 26 + (b - b'A') as u32)
            })
            .filter(|&x| (x as usize) < self.n_nodes())
    }

    /// The id of a label name (`"c"`) of this graph, or None.
    pub fn parse_label(&self, s: &str) -> Option<Label> {
        match s.as_bytes() {
            [b] if b.is_ascii_lowercase() && ((b - b'a') as u32) < self.n_labels => Some(b - b'a'),
            _ => None,
        }
    }

    /// `graph.txt`: one `AAAbCCC` line per edge, smaller node first, lines sorted.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(self.edges.len() * (2 * self.node_len as usize + 2));
        for &(u, l, v) in &self.edges {
            self.push_node_name(u, &mut s);
            s.push(label_char(l));
            self.push_node_name(v, &mut s);
            s.push('\n');
        }
        s
    }

    /// Read `graph.txt` back; `weights` comes from the manifest.
    pub fn read(path: &Path, g: &GraphConfig, weights: Vec<f64>) -> anyhow::Result<Graph> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
        let (node_len, n_labels, n) = (g.node_len, g.n_labels, g.n_nodes() as usize);
        let probe = Graph::from_edges_in(node_len, n, n_labels, weights.clone(), Vec::new());
        let k = node_len as usize;
        let mut edges = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let bad = || anyhow::anyhow!("{}:{}: not an edge line `{line}`", path.display(), i + 1);
            if line.len() != 2 * k + 1 {
                return Err(bad());
            }
            let u = probe.parse_node(&line[..k]).ok_or_else(bad)?;
            let l = probe.parse_label(&line[k..k + 1]).ok_or_else(bad)?;
            let v = probe.parse_node(&line[k + 1..]).ok_or_else(bad)?;
            edges.push((u, l, v));
        }
        Ok(Graph::from_edges_in(node_len, n, n_labels, weights, edges))
    }

    /// Degree histogram: entry d counts the nodes of degree d.
    pub fn degree_histogram(&self) -> Vec<u64> {
        let mut h = Vec::new();
        for x in 0..self.n_nodes() as Node {
            let d = self.degree(x);
            if h.len() <= d {
                h.resize(d + 1, 0);
            }
            h[d] += 1;
        }
        h
    }

    /// How many edges carry each label.
    pub fn label_counts(&self) -> Vec<u64> {
        let mut c = vec![0u64; self.n_labels as usize];
        for &(_, l, _) in &self.edges {
            c[l as usize] += 1;
        }
        c
    }
}

/// Split a packed adjacency entry into (neighbour, label).
#[inline]
pub fn unpack(e: u32) -> (Node, Label) {
    (e >> LABEL_BITS, (e & ((1 << LABEL_BITS) - 1)) as Label)
}

pub fn label_char(l: Label) -> char {
    (b'a' + l) as char
}

/// Labels written as a string of their letters, for messages.
pub fn labels_string(set: u32) -> String {
    let mut s = String::new();
    for l in 0..26u8 {
        if set & (1 << l) != 0 {
            let _ = write!(s, "{}", label_char(l));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GraphConfig;

    fn tiny() -> GraphConfig {
        GraphConfig {
            node_len: 2,
            ..GraphConfig::default()
        }
    }

    #[test]
    fn names_round_trip() {
        let g = Graph::from_edges(3, 26, vec![1.0; 26], vec![]);
        assert_eq!(g.node_name(0), "AAA");
        assert_eq!(g.node_name(17_575), "ZZZ");
        assert_eq!(g.parse_node("AAB"), Some(1));
        assert_eq!(g.parse_node("AaB"), None);
        assert_eq!(g.parse_node("AA"), None);
        for x in [0, 1, 27, 9_000, 17_575] {
            assert_eq!(g.parse_node(&g.node_name(x)), Some(x));
        }
    }

    #[test]
    fn generated_graph_is_simple_with_exact_edge_count() {
        let g = Graph::generate(&tiny(), 2028);
        assert_eq!(g.edges.len(), 2028);
        let mut pairs = HashSet::new();
        for &(u, l, v) in &g.edges {
            assert!(u < v, "smaller node first, no self-loops");
            assert!((l as u32) < g.n_labels);
            assert!(pairs.insert((u, v)), "simple graph");
            assert_eq!(g.label_between(u, v), Some(l));
            assert_eq!(g.label_between(v, u), Some(l));
        }
        let total: usize = (0..g.n_nodes() as Node).map(|x| g.degree(x)).sum();
        assert_eq!(total, 2 * 2028);
        let text = g.to_text();
        let lines: Vec<&str> = text.lines().collect();
        let mut sorted = lines.clone();
        sorted.sort_unstable();
        assert_eq!(lines, sorted, "graph.txt lines are sorted");
    }

    #[test]
    fn zipf_weights() {
        let w = label_weights(&GraphConfig::default());
        let h26: f64 = (1..=26).map(|r| 1.0 / r as f64).sum();
        assert!((w[0] - 1.0 / h26).abs() < 1e-12);
        assert!((w[0] - 0.2594).abs() < 1e-4, "{}", w[0]);
        assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
