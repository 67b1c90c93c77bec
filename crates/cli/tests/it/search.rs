//! Search through the gateway with the default local model: hybrid finds what BM25 cannot,
//! several queries fuse, filters narrow before ranking, embeddings survive a restart, and
//! `mcpgw search --explain` shows the ranks behind a fused score.

use serde_json::{Value, json};

use crate::harness::*;

fn hybrid_config() -> ConfigDir {
    write_config(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n{}\n{}",
        everything_stdio_server("everything"),
        time_stdio_server("time")
    ))
}

fn names(result: &Value) -> Vec<String> {
    result["structuredContent"]["results"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|x| x["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn hybrid_search_finds_semantic_matches_and_fuses_several_queries() {
    let config = hybrid_config();
    let report = py_client_stdio(
        &config,
        "modern",
        json!([
            // BM25 does not return get_current_time for this query at all (checked below).
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "clock reading Tokyo", "top_k": 3}},
            {"op": "call_tool", "name": "search_tools", "arguments": {
                "queries": ["add two numbers", "repeat my message back to me"], "top_k": 4}},
            {"op": "call_tool", "name": "search_tools", "arguments": {
                "query": "time", "read_only": true, "servers": ["time"]}},
        ]),
    );
    let steps = report["steps"].as_array().expect("steps");
    let semantic = &steps[0];
    assert_eq!(
        semantic["structuredContent"]["strategy"], "hybrid",
        "{semantic}"
    );
    assert!(
        semantic["structuredContent"].get("degraded").is_none(),
        "{semantic}"
    );
    assert!(
        names(semantic).contains(&"time__get_current_time".to_owned()),
        "{semantic}"
    );
    let lexical = std::process::Command::new(mcpgw())
        .args([
            "search",
            "clock reading Tokyo",
            "--top-k",
            "50",
            "--json",
            "--config",
        ])
        .arg(
            write_config(&format!(
                "[retrieval]\nstrategy = \"bm25\"\n\n{}\n{}",
                everything_stdio_server("everything"),
                time_stdio_server("time")
            ))
            .path,
        )
        .output()
        .expect("mcpgw search runs");
    let lexical: Vec<Value> = serde_json::from_slice(&lexical.stdout).expect("json");
    assert!(
        lexical
            .iter()
            .all(|h| h["name"] != "time__get_current_time"),
        "BM25 alone misses it: {lexical:?}"
    );

    let fused = names(&steps[1]);
    assert!(
        fused.contains(&"everything__get-sum".to_owned()),
        "{fused:?}"
    );
    assert!(fused.contains(&"everything__echo".to_owned()), "{fused:?}");

    let filtered = names(&steps[2]);
    assert!(!filtered.is_empty());
    assert!(
        filtered.iter().all(|n| n.starts_with("time__")),
        "{filtered:?}"
    );
}

#[test]
fn tool_embeddings_are_cached_across_restarts() {
    let config = hybrid_config();
    let path = config.path.display().to_string();
    let search = || {
        let output = std::process::Command::new(mcpgw())
            .args([
                "search",
                "convert a time between zones",
                "--json",
                "--config",
                &path,
            ])
            .env("RUST_LOG", "info")
            .output()
            .expect("mcpgw search runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let hits: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
        (hits, String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (first, first_log) = search();
    assert_eq!(first[0]["name"], "time__convert_time", "{first:?}");
    // A server that announces a tool change right after connecting triggers a second refresh,
    // which embeds only what the first did not: count every refresh's new embeddings. With
    // field vectors (the default) a tool with parameters has two texts, so the texts are more
    // than the tools, and the last refresh's embedded + cached are all of them.
    let number_after = |rest: &str| rest.split(' ').next()?.parse::<usize>().ok();
    let embedded: usize = first_log
        .split("embedded=")
        .skip(1)
        .filter_map(number_after)
        .sum();
    let last = first_log.rsplit("embedded=").next().unwrap_or_default();
    let texts = number_after(last).zip(last.split("cached=").nth(1).and_then(number_after));
    let tools = first_log
        .rsplit("search vectors ready tools=")
        .next()
        .and_then(number_after)
        .expect("vectors ready");
    assert!(tools >= 15, "{first_log}");
    assert_eq!(
        Some(embedded),
        texts.map(|(new, cached)| new + cached),
        "every text embedded once:\n{first_log}"
    );
    assert!(embedded > tools, "heads and parameters apart:\n{first_log}");
    // The default embedder: MiniLM blended with potion-base-8M.
    assert!(
        first_log.contains("local/all-MiniLM-L6-v2+local/potion-base-8M@0.3"),
        "{first_log}"
    );
    let (second, second_log) = search();
    assert_eq!(first, second, "same ranking after a restart");
    assert!(
        !second_log.contains("tool embeddings ready"),
        "nothing re-embedded on restart:\n{second_log}"
    );
}

#[test]
fn missing_model_degrades_to_bm25_and_says_so() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let config = hybrid_config();
    let path = config.path.display().to_string();
    // Every place the loader looks is empty.
    let output = std::process::Command::new(mcpgw())
        .args(["search", "convert time zone", "--json", "--config", &path])
        .env("MCPGW_MODEL_DIR", scratch.path())
        .env("XDG_CACHE_HOME", scratch.path())
        .env("HF_HOME", scratch.path())
        .env("HOME", scratch.path())
        .output()
        .expect("mcpgw search runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let hits: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(hits[0]["name"], "time__convert_time", "{hits:?}");
    assert!(stderr.contains("no embedding model available"), "{stderr}");
    assert!(stderr.contains("served BM25"), "{stderr}");
}

#[test]
fn a_missing_blend_model_leaves_minilm_alone_and_says_so() {
    // Only MiniLM is where the loader looks: the default blend's potion-base-8M is missing.
    let scratch = tempfile::tempdir().expect("tempdir");
    let minilm = embed::local::model_status(embed::local::LocalModel::MiniLmL6V2)
        .expect("all-MiniLM-L6-v2 is installed (scripts/fetch-models.sh)");
    std::os::unix::fs::symlink(&minilm, scratch.path().join("all-MiniLM-L6-v2")).expect("link");
    let empty = tempfile::tempdir().expect("tempdir");
    let config = hybrid_config();
    let path = config.path.display().to_string();
    let output = std::process::Command::new(mcpgw())
        .args([
            "search",
            "what time is it in Tokyo",
            "--json",
            "--config",
            &path,
        ])
        .env("RUST_LOG", "info")
        .env("MCPGW_MODEL_DIR", scratch.path())
        .env("XDG_CACHE_HOME", empty.path())
        .env("HF_HOME", empty.path())
        .env("HOME", empty.path())
        .output()
        .expect("mcpgw search runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("the blend model did not load") && stderr.contains("potion-base-8M"),
        "{stderr}"
    );
    // Semantic search goes on with MiniLM alone, not BM25.
    assert!(
        stderr.contains("semantic search enabled model=local/all-MiniLM-L6-v2\n")
            || stderr.contains("semantic search enabled model=\"local/all-MiniLM-L6-v2\""),
        "{stderr}"
    );
    assert!(!stderr.contains("served BM25"), "{stderr}");
    let hits: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(hits[0]["server"], "time", "{hits:?}");
}

/// Embedding thousands of new tools takes minutes; the gateway must not sit silent meanwhile.
/// An embedding endpoint that holds every batch stands in for a slow model: `serve` waits a
/// bounded time, then answers searches with BM25 and says the embeddings are not ready.
#[test]
fn serve_answers_with_bm25_while_tool_embeddings_run() {
    let port = free_port();
    let _endpoint = Proc::spawn(
        "slow embeddings",
        std::process::Command::new(venv_bin("python"))
            .arg(repo_root().join("tests/fixtures/slow_embeddings.py"))
            .args([&port.to_string(), "120"]),
    );
    wait_until(
        "the embedding endpoint",
        std::time::Duration::from_secs(30),
        || port_open(port),
    );
    let config = write_config(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n[retrieval.embedder]\ntype = \"remote\"\n\
         base_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"slow\"\ntimeout_s = 300\n\n{}",
        time_stdio_server("time")
    ));
    let started = std::time::Instant::now();
    let gateway = Gateway::start(config);
    let report = py_client(
        &["--url", &gateway.url()],
        "modern",
        json!([{"op": "call_tool", "name": "search_tools", "arguments": {"query": "convert time zone"}}]),
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "answered before the 120 s batch finished"
    );
    let result = &report["steps"][0]["structuredContent"];
    assert_eq!(
        result["degraded"], "tool embeddings not ready; served BM25",
        "{result}"
    );
    assert_eq!(
        result["results"][0]["name"], "time__convert_time",
        "{result}"
    );
    // Written as the search gives up waiting, just before it answers: the log may trail.
    wait_until(
        "the log to say BM25 serves meanwhile",
        std::time::Duration::from_secs(10),
        || {
            gateway
                .log_text()
                .contains("serving BM25 search until they are ready")
        },
    );
}

#[test]
fn search_explain_shows_the_ranks_behind_a_fused_score() {
    let config = write_config(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\nbalance = 45\nfusion = \"ranks\"\n\n{}",
        everything_stdio_server("everything")
    ));
    let run = |args: &[&str]| {
        let output = mcpgw_in(&config.path, args);
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    let hits: Vec<Value> =
        serde_json::from_str(&run(&["search", "add two numbers", "--explain", "--json"]))
            .expect("json");
    assert!(!hits.is_empty());
    // Query-dependent fusion (on by default): a three-word request leans semantic, so the
    // weights are this query's (about 0.45 + 0.2 * (1.2 - 3/16) = 0.65 for the vector list),
    // not 0.55 / 0.45 from the balance alone. Every explained place carries its weight, and
    // the same two weights stand behind every hit, including one only the vector list found
    // (`"bm25": null`): its score is its vector term alone.
    let mut fused = 0;
    let mut weights: Option<(f64, f64)> = None;
    for hit in &hits {
        let rank = |list: &str| hit[list]["rank"].as_f64();
        let weight = |list: &str| hit[list]["weight"].as_f64();
        let score = hit["score"].as_f64().expect("score");
        assert!(
            rank("bm25").is_some() || rank("vector").is_some(),
            "a fused hit is in at least one list: {hit}"
        );
        for list in ["bm25", "vector"] {
            assert_eq!(rank(list).is_some(), weight(list).is_some(), "{hit}");
        }
        let (bm25_weight, vector_weight) = *weights.get_or_insert_with(|| {
            let vector = hits
                .iter()
                .find_map(|hit| hit["vector"]["weight"].as_f64())
                .expect("a vector place");
            (1.0 - vector, vector)
        });
        assert!((bm25_weight + vector_weight - 1.0).abs() < 1e-6, "{hit}");
        assert!(
            weight("bm25").is_none_or(|w| (w - bm25_weight).abs() < 1e-6),
            "{hit}"
        );
        assert!(
            weight("vector").is_none_or(|w| (w - vector_weight).abs() < 1e-6),
            "{hit}"
        );
        // The fused score is exactly what the ranks and weights say: w/(60 + r) + w'/(60 + r').
        let expected = rank("bm25").map_or(0.0, |r| bm25_weight / (60.0 + r))
            + rank("vector").map_or(0.0, |r| vector_weight / (60.0 + r));
        assert!((score - expected).abs() < 1e-5, "{hit}");
        if rank("bm25").is_some() && rank("vector").is_some() {
            fused += 1;
        }
    }
    assert!(fused > 0, "{hits:?}");
    assert_eq!(hits[0]["name"], "everything__get-sum", "{hits:?}");
    let (bm25_weight, vector_weight) = weights.expect("fused hits");
    assert!(
        vector_weight > 0.45,
        "a short request leans semantic: {hits:?}"
    );

    let table = run(&["search", "add two numbers", "--explain"]);
    assert!(
        table.contains("bm25 rank (score)") && table.contains("vector rank (cosine)"),
        "{table}"
    );
    let legend = format!(
        "score: reciprocal rank fusion of the BM25 and the vector ranking, {bm25_weight:.3} / (60 + BM25 rank) + {vector_weight:.3} / (60 + vector rank) (this query's weights)"
    );
    assert!(table.contains(&legend), "{legend} in {table}");
    let help = text(&mcpgw_in(&config.path, &["search", "--help"]).stdout);
    for needle in [
        "<QUERY>",
        "What the tool should do",
        "--top-k",
        "from 1 to 50",
        "--json",
        "--explain",
    ] {
        assert!(
            help.contains(needle),
            "search --help lacks {needle}: {help}"
        );
    }
}

#[test]
fn search_explain_shows_the_scaled_scores_behind_a_default_fused_score() {
    // The default configuration: hybrid, score fusion.
    let config = write_config(&everything_stdio_server("everything"));
    let run = |args: &[&str]| {
        let output = mcpgw_in(&config.path, args);
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
    };
    let hits: Vec<Value> = serde_json::from_str(&run(&[
        "search",
        "add two numbers",
        "--explain",
        "--json",
        "--top-k",
        "8",
    ]))
    .expect("json");
    assert_eq!(hits[0]["name"], "everything__get-sum", "{hits:?}");
    let mut both = 0;
    for hit in &hits {
        let score = hit["score"].as_f64().expect("score");
        // Each place: its weight and its score scaled to 0..1 over its list; the fused score
        // is the sum of weight × scaled over the places the tool has.
        let mut expected = 0.0;
        let mut weights = 0.0;
        for list in ["bm25", "vector"] {
            let place = &hit[list];
            if place.is_null() {
                continue;
            }
            let weight = place["weight"].as_f64().expect("weight");
            let scaled = place["normalised"].as_f64().expect("normalised");
            assert!((0.0..=1.0).contains(&scaled), "{hit}");
            expected += weight * scaled;
            weights += weight;
        }
        assert!(weights > 0.0, "a fused hit is in at least one list: {hit}");
        assert!((score - expected).abs() < 1e-4, "{hit}");
        if !hit["bm25"].is_null() && !hit["vector"].is_null() {
            both += 1;
        }
    }
    assert!(both > 0, "{hits:?}");
    // The first hit is the best of at least one list, so it scales to 1 there.
    let first = &hits[0];
    assert!(
        ["bm25", "vector"]
            .iter()
            .any(|list| first[list]["normalised"].as_f64() == Some(1.0)),
        "{first}"
    );
    let table = run(&["search", "add two numbers", "--explain"]);
    assert!(
        table.contains("× BM25 score +") && table.contains("× cosine similarity"),
        "{table}"
    );
}

#[test]
fn field_vectors_embed_each_tool_s_head_and_parameters_apart() {
    // The cosine of each hit with and without `field_vectors`: the tools' vectors differ, the
    // best tool stays first, and a second run (its texts cached in the store) agrees with the
    // first.
    let cosines = |fields: bool| {
        let config = write_config(&format!(
            "[retrieval]\nfield_vectors = {fields}\n\n{}",
            time_stdio_server("time")
        ));
        let run = || {
            let output = mcpgw_in(
                &config.path,
                &["search", "what time is it in Paris", "--explain", "--json"],
            );
            assert!(output.status.success(), "{}", text(&output.stderr));
            let hits: Vec<Value> = serde_json::from_str(&text(&output.stdout)).expect("json");
            assert_eq!(hits[0]["name"], "time__get_current_time", "{hits:?}");
            hits.iter()
                .map(|hit| {
                    let cosine = hit["vector"]["score"].as_f64().expect("a vector place");
                    (hit["name"].as_str().unwrap_or_default().to_owned(), cosine)
                })
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        let first = run();
        let again = run();
        for (name, cosine) in &first {
            assert!((cosine - again[name]).abs() < 1e-5, "{first:?} {again:?}");
        }
        first
    };
    let joint = cosines(false);
    let apart = cosines(true);
    assert_eq!(joint.len(), 2, "{joint:?}");
    for (name, cosine) in &joint {
        assert!(
            (cosine - apart[name]).abs() > 1e-3,
            "{name}: {cosine} joint, {} apart",
            apart[name]
        );
    }
}

#[test]
fn results_carry_signatures_and_a_call_without_its_arguments_is_still_refused() {
    let config = write_config(&format!(
        "[retrieval]\nstrategy = \"bm25\"\n\n{}",
        time_stdio_server("time")
    ));
    let report = py_client_stdio(
        &config,
        "modern",
        json!([
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "current time in a timezone", "top_k": 2}},
            // Straight from the signature, without get_tool_details, and without the argument.
            {"op": "call_tool", "name": "call_tool", "arguments": {"name": "time__get_current_time", "arguments": {}}},
        ]),
    );
    let steps = report["steps"].as_array().expect("steps");
    let found = &steps[0];
    let first = &found["structuredContent"]["results"][0];
    assert_eq!(first["name"], "time__get_current_time", "{found}");
    assert_eq!(
        first["signature"], "time__get_current_time(timezone: string)",
        "{found}"
    );
    assert!(
        result_text(found).starts_with("1. time__get_current_time(timezone: string)"),
        "{found}"
    );
    let refused = &steps[1];
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        result_text(refused).contains("invalid arguments for 'time__get_current_time'"),
        "{refused}"
    );
}

#[test]
fn a_server_without_a_description_is_found_by_its_own_instructions() {
    // "reimbursements" is only in the fixture's initialize instructions: not in its tool's
    // name, description or parameters, and the configuration gives no description.
    let described = format!(
        "[[servers]]\nname = \"ledger\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/described_server.py")
            .display()
            .to_string()
    );
    let config = write_config(&format!(
        "[retrieval]\nstrategy = \"bm25\"\n\n{described}\n{}",
        time_stdio_server("time")
    ));
    let report = py_client_stdio(
        &config,
        "modern",
        json!([
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "file my reimbursements", "top_k": 3}},
            {"op": "call_tool", "name": "search_tools", "arguments": {"query": "household ledger", "top_k": 3}},
        ]),
    );
    let steps = report["steps"].as_array().expect("steps");
    for step in steps {
        assert_eq!(
            names(step).first().map(String::as_str),
            Some("ledger__put_entry"),
            "{step}"
        );
    }
}

/// A server whose tools are described in Chinese (Python SDK fixture) with the default model,
/// which reads only English: the gateway says once that Chinese requests are searched by BM25
/// alone and which model reads them, and a Chinese request still finds its tool. English
/// tools alone give no such notice.
#[test]
fn tools_described_in_chinese_get_a_notice_that_the_model_cannot_read_them() {
    let chinese = format!(
        "[[servers]]\nname = \"zh\"\ntransport = {{ type = \"stdio\", command = {:?}, args = [{:?}] }}\n",
        venv_bin("python"),
        repo_root()
            .join("tests/fixtures/chinese_server.py")
            .display()
            .to_string()
    );
    let search = |config: &ConfigDir, query: &str| {
        let path = config.path.display().to_string();
        let output = std::process::Command::new(mcpgw())
            .args(["search", query, "--json", "--config", &path])
            .env("RUST_LOG", "info")
            .output()
            .expect("mcpgw search runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        let hits: Vec<Value> = serde_json::from_slice(&output.stdout).expect("json");
        (hits, stderr)
    };
    let config = write_config(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n{chinese}\n{}",
        time_stdio_server("time")
    ));
    let (hits, stderr) = search(&config, "查询北京明天的天气");
    assert!(stderr.contains("search vectors ready"), "{stderr}");
    let notices = stderr
        .lines()
        .filter(|line| line.contains("described in Chinese, Japanese or Korean"))
        .collect::<Vec<_>>();
    assert_eq!(notices.len(), 1, "{stderr}");
    assert!(
        notices[0].contains("3 of 5 tools") && notices[0].contains("model = \"e5\""),
        "{}",
        notices[0]
    );
    assert_eq!(hits[0]["name"], "zh__weather_query", "{hits:?}");
    // The time server's English tools alone: vectors ready, no notice.
    let english = write_config(&format!(
        "[retrieval]\nstrategy = \"hybrid\"\n\n{}",
        time_stdio_server("time")
    ));
    let (_, stderr) = search(&english, "what time is it in Tokyo");
    assert!(stderr.contains("search vectors ready"), "{stderr}");
    assert!(!stderr.contains("described in Chinese"), "{stderr}");
}
