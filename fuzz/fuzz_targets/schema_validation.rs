//! Fuzzes argument validation along its real path: the input is two JSON documents one after
//! the other (`{"type": "object"} {"a": 1}`), an upstream tool's `inputSchema` and the call's
//! arguments, which go through `catalog::Catalog::build` (one server, one tool: naming, the
//! resolved schema view, token cost) and `Catalog::validate_arguments` (compiling the schema
//! with `jsonschema`, then checking). Arguments that are missing or not an object are
//! validated as absent.
//!
//! Invariant: no panic and no hang (no IO either: a remote `$ref` is never fetched, so it
//! cannot wait on the network). The check runs on a thread with a 2 MiB stack, the size of
//! the async worker threads that validate calls in the gateway, so a stack overflow there
//! shows here too.

#![no_main]

use catalog::{Catalog, ServerTools, Validation};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const STACK_BYTES: usize = 2 * 1024 * 1024;

/// Keeps the tokenizer loaded across runs: a catalog build otherwise loads it (tens of ms).
static TOKENIZER: std::sync::LazyLock<catalog::cost::Counter> =
    std::sync::LazyLock::new(catalog::cost::Counter::load);

fuzz_target!(|data: &[u8]| {
    let mut documents = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(schema)) = documents.next() else {
        return;
    };
    let arguments = match documents.next() {
        Some(Ok(Value::Object(map))) => Some(map),
        _ => None,
    };
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, || check(schema, arguments.as_ref()))
            .expect("spawn checking thread")
            .join()
            .expect("checking thread panicked");
    });
});

fn check(schema: Value, arguments: Option<&serde_json::Map<String, Value>>) {
    std::sync::LazyLock::force(&TOKENIZER);
    let servers = [ServerTools {
        server: "fuzz".into(),
        description: None,
        tools: vec![json!({"name": "tool", "inputSchema": schema}).into()],
    }];
    let (catalog, problems) = Catalog::build(&servers);
    let Some(tool) = catalog.tools().first() else {
        // Only a schema that is not an object keeps the tool out.
        assert!(!problems.is_empty(), "tool dropped without a problem");
        return;
    };
    let qualified = tool.qualified.clone();
    let _ = tool.resolved_input_schema();
    let first = catalog.validate_arguments(&qualified, arguments);
    // The validator is compiled once and cached; the second check must agree.
    let second = catalog.validate_arguments(&qualified, arguments);
    match (&first, &second) {
        (Ok(Validation::UnknownTool), _) => panic!("{qualified} was built but is unknown"),
        (
            Ok(Validation::Unvalidated { reason: a, .. }),
            Ok(Validation::Unvalidated {
                reason: b,
                first: false,
            }),
        ) => {
            assert_eq!(a, b);
        }
        (a, b) => assert_eq!(a, b),
    }
    if let Err(errors) = &first {
        assert!(!errors.errors.is_empty() && errors.errors.len() <= catalog::arguments::MAX_ERRORS);
        for error in &errors.errors {
            assert!(error.message.chars().count() <= catalog::arguments::MAX_MESSAGE_CHARS);
            assert!(error.pointer.chars().count() <= catalog::arguments::MAX_POINTER_CHARS);
        }
    }
}
