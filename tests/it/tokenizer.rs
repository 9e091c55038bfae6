//! The tokenizer against Python's `tokenizers`: `Tokenizer.from_file` on our `tokenizer.json`
//! gives the lab's ids for every line of the tiny dataset, and decoding round-trips.

use lab::dataset::DataDir;

use crate::util::{python, tiny_data};

#[test]
fn python_tokenizers_agrees_on_every_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tiny_data(tmp.path(), "d");
    let data = DataDir::open(&dir).unwrap();
    let vocab = data.vocab();
    let train = std::fs::read_to_string(dir.join("train.txt")).unwrap();
    let lines: Vec<&str> = train.lines().collect();
    let script = r#"
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")
lines = open(sys.argv[1] + "/train.txt").read().splitlines()
out = [tok.encode(l, add_special_tokens=False).ids for l in lines]
assert all(tok.decode(ids, skip_special_tokens=False) == l for ids, l in zip(out, lines))
print(json.dumps(out))
"#;
    let Some(mut py) = python() else {
        return;
    };
    let out = py
        .arg("-c")
        .arg(script)
        .arg(&dir)
        .output()
        .expect("python3 runs (CI installs it with the `tokenizers` package)");
    assert!(
        out.status.success(),
        "python tokenizers failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<Vec<u32>> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(theirs.len(), lines.len());
    for (line, ids) in lines.iter().zip(&theirs) {
        assert_eq!(&vocab.encode(line), ids, "line `{line}`");
        assert_eq!(&vocab.decode(ids), line);
    }
}
