//! `mcpgw eval` from a clone: the set that ships in `eval/metatool/` loads and scores, and
//! `--help` says what the three files of a set hold.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::harness::*;

#[test]
fn eval_runs_on_the_set_that_ships_with_the_repository() {
    let set = repo_root().join("eval/metatool");
    for file in [
        "tools.json",
        "queries.jsonl",
        "qrels.tsv",
        "LICENSE",
        "README.md",
    ] {
        assert!(set.join(file).exists(), "eval/metatool/{file} is missing");
    }
    let output = Command::new(mcpgw())
        .args([
            "eval",
            "--strategy",
            "bm25",
            "--limit",
            "3000",
            "--json",
            "--no-cache",
        ])
        .arg(&set)
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw eval runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("json report");
    let set = &report["sets"][0];
    assert_eq!(set["set"], "metatool", "{set}");
    assert_eq!(set["tools"], 199, "{set}");
    assert_eq!(set["queries"], 3000, "{set}");
    let ndcg = set["strategies"][0]["metrics"]["ndcg_at_10"]
        .as_f64()
        .unwrap_or_else(|| panic!("no nDCG in {set}"));
    // BM25 on the whole set scores 56.4 (docs/retrieval.md); a broken set scores near 0.
    assert!(ndcg > 30.0, "nDCG@10 {ndcg}: {set}");

    let help = Command::new(mcpgw())
        .args(["eval", "--help"])
        .output()
        .expect("help");
    let help = text(&help.stdout);
    for needle in [
        "tools.json",
        "queries.jsonl",
        "qrels.tsv",
        "QUERY_ID",
        "eval/metatool",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}: {help}");
    }
}
