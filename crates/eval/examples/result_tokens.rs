//! Tokens (cl100k) per `search_tools` result line, before and after signatures: every tool of
//! each set rendered the way the gateway renders a hit. `cargo run --release -p mcpgw-eval
//! --example result_tokens -- SET_DIR...` (docs/retrieval.md has the figures).

use catalog::Catalog;
use catalog::cost::Counter;
use catalog::signature::{effects, signature};
use eval::Dataset;

fn main() {
    let counter = Counter::load();
    for dir in std::env::args().skip(1) {
        let set = match Dataset::load(std::path::Path::new(&dir)) {
            Ok(set) => set,
            Err(error) => {
                eprintln!("{dir}: {error}");
                continue;
            }
        };
        let (catalog, _) = Catalog::build(&set.servers);
        let (mut before, mut after, mut cut) = (Vec::new(), Vec::new(), 0);
        for tool in catalog.tools() {
            let line = |name: &str| {
                let marks = effects(tool).map(|e| format!(" [{e}]")).unwrap_or_default();
                let marks = if name == tool.qualified.as_str() {
                    String::new()
                } else {
                    marks
                };
                format!(
                    "1. {name}{marks} ({}) - {}",
                    tool.server,
                    tool.one_line_description()
                )
            };
            let shown = signature(tool);
            cut += usize::from(shown.ends_with("…)") || shown.ends_with('…'));
            before.push(counter.count(&line(tool.qualified.as_str())));
            after.push(counter.count(&line(&shown)));
        }
        let mean = |v: &[usize]| v.iter().sum::<usize>() as f64 / v.len().max(1) as f64;
        let max = |v: &[usize]| v.iter().copied().max().unwrap_or(0);
        println!(
            "{}: {} tools, tokens per result line: before mean {:.1} max {}, after mean {:.1} max {}; signatures cut: {}",
            set.name,
            catalog.len(),
            mean(&before),
            max(&before),
            mean(&after),
            max(&after),
            cut
        );
    }
}
