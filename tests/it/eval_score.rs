//! Scoring against hand-worked cases: one answer per error type on a hand-built graph, a valid
//! path whose novelty, utility and creativity are computed here by hand, and properties: any
//! string or token sequence gets exactly one classification, and reference paths score valid.

use lab::eval::score::{Alphas, EdgeError, ErrorType, score};
use lab::graph::Graph;
use lab::search::{Path as Walk, Query};
use lab::tokenizer::Vocab;
use proptest::prelude::*;

/// Nodes AA(0) AB(1) AC(2) AD(3); edges AA-a-AB, AB-b-AC, AC-c-AD, AA-d-AC.
/// Label weights w = (0.4, 0.3, 0.2, 0.1).
fn graph() -> Graph {
    Graph::from_edges(
        2,
        4,
        vec![0.4, 0.3, 0.2, 0.1],
        vec![(0, 0, 1), (1, 1, 2), (2, 2, 3), (0, 3, 2)],
    )
}

/// AA → AD, include b, exclude d.
fn query() -> Query {
    Query {
        u: 0,
        v: 3,
        include: 1 << 1,
        exclude: 1 << 3,
    }
}

fn check(output: &str, finished: bool, want: Option<ErrorType>) {
    let g = graph();
    let s = score(&g, &query(), None, output, finished, &Alphas::default());
    assert_eq!(s.error, want, "`{output}`");
    assert_eq!(s.valid, want.is_none());
    if want.is_some() {
        assert_eq!((s.utility, s.creativity, s.novelty), (0.0, 0.0, None));
    }
}

#[test]
fn one_golden_case_per_error_type() {
    check("", true, Some(ErrorType::Empty));
    check("AA a AB b", true, Some(ErrorType::ParseFailure)); // even length
    check("AA a AB b AC c AD", false, Some(ErrorType::ParseFailure)); // no <eos> in budget
    check("AA : AB", true, Some(ErrorType::ParseFailure)); // a special token
    check("AA ab AB", true, Some(ErrorType::ParseFailure)); // a label of two letters
    check("#a AA a AB b AC c AD", true, Some(ErrorType::ParseFailure)); // a hash-prefix symbol
    check(
        "AA a AB <dummy> AC c AD",
        true,
        Some(ErrorType::ParseFailure),
    ); // the dummy token
    check("AA a ZZZ", true, Some(ErrorType::HallucinatedNode)); // not a node of this graph
    check("AA b AD", true, Some(ErrorType::HallucinatedEdge)); // AA and AD are not adjacent
    check("AB b AC c AD", true, Some(ErrorType::WrongStart));
    check("AA a AB b AC", true, Some(ErrorType::WrongEnd));
    check("AA d AC c AD", true, Some(ErrorType::IncludeViolation)); // no b; checked before X
    check(
        "AA a AB a AA d AC b AB b AC c AD",
        true,
        Some(ErrorType::ExcludeViolation),
    ); // has b and d
    check("AA a AB b AC c AD", true, None);
}

#[test]
fn hallucinated_edges_say_which_kind() {
    let g = graph();
    let a = Alphas::default();
    let no_edge = score(&g, &query(), None, "AA b AD", true, &a);
    assert_eq!(no_edge.edge_error, Some(EdgeError::NoEdge));
    let wrong = score(&g, &query(), None, "AA c AB b AC c AD", true, &a);
    assert_eq!(wrong.error, Some(ErrorType::HallucinatedEdge));
    assert_eq!(wrong.edge_error, Some(EdgeError::WrongLabel));
}

#[test]
fn valid_path_scored_by_hand() {
    let g = graph();
    let reference = Walk {
        nodes: vec![0, 1, 2, 3],
        labels: vec![0, 1, 2],
    };
    let s = score(
        &g,
        &query(),
        Some(&reference),
        "AA a AB b AC c AD",
        true,
        &Alphas::default(),
    );
    // h = 3 hops; S(P) = mean(−ln 0.4, −ln 0.3, −ln 0.2) = (0.91629 + 1.20397 + 1.60944) / 3
    //   = 1.24323; N = 1·3 + 1·1.24323 = 4.24323.
    let n = 3.0 + ((-(0.4f64).ln()) + (-(0.3f64).ln()) + (-(0.2f64).ln())) / 3.0;
    assert!((n - 4.243_23).abs() < 1e-5);
    // U = (1 + 1·|I|)(1 + 1·|X|) = (1 + 1)(1 + 1) = 4; C = U·N = 16.97292.
    assert_eq!(s.hops, Some(3));
    assert!((s.novelty.unwrap() - n).abs() < 1e-12);
    assert_eq!(s.utility, 4.0);
    assert!((s.creativity - 4.0 * n).abs() < 1e-12);
    assert!(s.is_reference && !s.repeats_node);
    // A walk that returns to a node is still valid, and is flagged.
    let r = score(
        &g,
        &query(),
        Some(&reference),
        "AA a AB a AA a AB b AC c AD",
        true,
        &Alphas::default(),
    );
    assert!(r.valid && r.repeats_node && !r.is_reference);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any string: no panic, exactly one classification.
    #[test]
    fn any_string_gets_one_classification(s in "\\PC{0,40}", finished in any::<bool>()) {
        let g = graph();
        let r = score(&g, &query(), None, &s, finished, &Alphas::default());
        prop_assert_eq!(r.valid, r.error.is_none());
        prop_assert!(r.creativity.is_finite() && r.utility >= 0.0);
    }

    /// Path-like strings over the graph's own alphabet reach every later check.
    #[test]
    fn path_like_strings_get_one_classification(toks in proptest::collection::vec(prop_oneof![Just("AA"), Just("AB"), Just("AC"), Just("AD"), Just("ZZ"), Just("a"), Just("b"), Just("c"), Just("d"), Just("e"), Just("<eos>")], 0..12)) {
        let g = graph();
        let r = score(&g, &query(), None, &toks.join(" "), true, &Alphas::default());
        prop_assert_eq!(r.valid, r.error.is_none());
        prop_assert_eq!(r.edge_error.is_some(), r.error == Some(ErrorType::HallucinatedEdge));
    }

    /// Any token-id sequence, decoded as the lab decodes model output.
    #[test]
    fn any_token_ids_get_one_classification(ids in proptest::collection::vec(0u32..800, 0..30)) {
        let g = graph();
        let v = Vocab {
            node_len: 2,
            n_nodes: 676,
            n_labels: 4,
        };
        let r = score(&g, &query(), None, &v.decode(&ids), true, &Alphas::default());
        prop_assert_eq!(r.valid, r.error.is_none());
    }
}

#[test]
fn every_reference_path_of_an_eval_set_scores_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = crate::util::tiny_data(tmp.path(), "d");
    let data = lab::dataset::DataDir::open(&dir).unwrap();
    let a = Alphas::default();
    for q in data.eval().unwrap() {
        let text = lab::dataset::example::path_text(&data.graph, &q.path);
        let s = score(&data.graph, &q.query, Some(&q.path), &text, true, &a);
        assert!(s.valid && s.is_reference, "query {}: {:?}", q.id, s.error);
        let want =
            (1 + q.query.include.count_ones()) as f64 * (1 + q.query.exclude.count_ones()) as f64;
        assert_eq!(s.utility, want, "U = (1 + |I|)(1 + |X|)");
        assert_eq!(s.hops, Some(q.hop as usize));
    }
}
