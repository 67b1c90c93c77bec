//! Token cost of a tool: what listing it in `tools/list` costs a client, in cl100k_base tokens.
//!
//! cl100k_base is bundled in `tiktoken-rs` (no network). It is an approximation for every model
//! that is not OpenAI's; what matters is that it is stable and comparable between tools.
//!
//! Its tables take about 13 MB of heap once built (encoder, decoder and sorted token bytes,
//! 100k entries each) and building them about 40 ms (release build). A gateway counts tokens
//! only while it builds a catalog, so the tables are not kept for the life of the process: a
//! [`Counter`] loads them, every `Counter` alive at the same time shares them, and they are
//! freed with the last one. A catalog build makes one `Counter` for all its tools. Kept for the
//! life of the process (a `LazyLock`), they were the largest single item on the heap of a
//! gateway with a thousand tools; reloading costs a build those 40 ms.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde_json::{Map, Value};
use tiktoken_rs::CoreBPE;

/// The tables while some [`Counter`] holds them.
static SHARED: Mutex<Weak<CoreBPE>> = Mutex::new(Weak::new());

/// Counts cl100k_base tokens. Holds the tokenizer's tables until dropped; see the module docs.
pub struct Counter {
    /// `None` only if the bundled vocabulary failed to load, which would be a packaging bug;
    /// then [`Counter::count`] falls back to the usual four-bytes-per-token estimate rather
    /// than panic.
    bpe: Option<Arc<CoreBPE>>,
}

impl Counter {
    /// The tokenizer another `Counter` holds, else a freshly loaded one.
    pub fn load() -> Counter {
        Counter::load_shared(&SHARED)
    }

    fn load_shared(shared: &Mutex<Weak<CoreBPE>>) -> Counter {
        // Held while loading, so that concurrent first users wait for one load.
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bpe) = shared.upgrade() {
            return Counter { bpe: Some(bpe) };
        }
        let bpe = tiktoken_rs::cl100k_base().ok().map(Arc::new);
        if let Some(bpe) = &bpe {
            *shared = Arc::downgrade(bpe);
        }
        Counter { bpe }
    }

    /// cl100k_base tokens in `text`; special-token syntax such as `<|endoftext|>` counts as
    /// text.
    pub fn count(&self, text: &str) -> usize {
        match &self.bpe {
            Some(bpe) => bpe.count_ordinary(text),
            None => text.len().div_ceil(4),
        }
    }
}

/// cl100k_base tokens in `text` ([`Counter::count`]). Loads the tokenizer unless a [`Counter`]
/// is alive: to count many texts, make one `Counter` and count with it.
pub fn count_tokens(text: &str) -> usize {
    Counter::load().count(text)
}

/// The tool as a client sees it in `tools/list`: `name` is the qualified name, optional fields
/// only when present. `title` is included too because clients receive it in the same listing.
pub struct Listed<'a> {
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: &'a str,
    pub input_schema: &'a Value,
    pub output_schema: Option<&'a Value>,
    pub annotations: Option<&'a Value>,
}

impl Listed<'_> {
    /// The compact JSON a client would receive.
    pub fn to_json(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("name".into(), Value::from(self.name));
        if let Some(title) = self.title {
            tool.insert("title".into(), Value::from(title));
        }
        if !self.description.is_empty() {
            tool.insert("description".into(), Value::from(self.description));
        }
        tool.insert("inputSchema".into(), self.input_schema.clone());
        if let Some(output) = self.output_schema {
            tool.insert("outputSchema".into(), output.clone());
        }
        if let Some(annotations) = self.annotations {
            tool.insert("annotations".into(), annotations.clone());
        }
        Value::Object(tool)
    }

    /// Tokens of [`Self::to_json`] serialised compactly.
    pub fn token_cost(&self, counter: &Counter) -> usize {
        counter.count(&self.to_json().to_string())
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};
    use serde_json::json;

    use super::*;

    fn check(text: &str, expect: Expect) {
        expect.assert_eq(&count_tokens(text).to_string());
    }

    #[test]
    fn counts_cl100k_tokens() {
        check("", expect!["0"]);
        check("hello world", expect!["2"]);
        check("<|endoftext|>", expect!["7"]);
    }

    #[test]
    fn listed_tool_cost_is_positive_and_stable() {
        let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let listed = Listed {
            name: "everything__echo",
            title: None,
            description: "Echoes back the input",
            input_schema: &schema,
            output_schema: None,
            annotations: None,
        };
        expect![[r#"{"description":"Echoes back the input","inputSchema":{"properties":{"text":{"type":"string"}},"type":"object"},"name":"everything__echo"}"#]]
            .assert_eq(&listed.to_json().to_string());
        let counter = Counter::load();
        let cost = listed.token_cost(&counter);
        assert!(cost > 0);
        assert_eq!(cost, listed.token_cost(&counter));
    }

    #[test]
    fn counters_share_the_tables_and_the_last_one_frees_them() {
        // A slot of its own: other tests may hold counters of the process-wide one.
        let slot = Mutex::new(Weak::new());
        let first = Counter::load_shared(&slot);
        let second = Counter::load_shared(&slot);
        let (Some(a), Some(b)) = (&first.bpe, &second.bpe) else {
            panic!("the bundled vocabulary loads");
        };
        assert!(Arc::ptr_eq(a, b));
        drop(first);
        assert!(slot.lock().expect("not poisoned").upgrade().is_some());
        assert_eq!(second.count("hello world"), 2);
        drop(second);
        assert!(slot.lock().expect("not poisoned").upgrade().is_none());
        // Loaded again on demand, counting the same.
        assert_eq!(Counter::load_shared(&slot).count("hello world"), 2);
    }
}
