//! The validate step: arguments checked against the tool's input schema before anything
//! reaches the upstream. Invalid arguments come back as a tool error the model can read and
//! correct (SEP-1303); an unusable schema lets the call through unvalidated (logged once per
//! tool and catalog).

use catalog::{Catalog, Validation};
use serde_json::{Map, Value};

/// Whose arguments are checked, for the refusal's wording.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Whose {
    /// The caller's.
    Caller,
    /// An approver's replacement for the caller's.
    Approver,
}

/// Checks `arguments` for `qualified`; `Err` is the message of the tool error to return.
pub(crate) fn validate(
    catalog: &Catalog,
    qualified: &str,
    arguments: Option<&Map<String, Value>>,
    whose: Whose,
) -> Result<(), String> {
    match catalog.validate_arguments(qualified, arguments) {
        Ok(Validation::Unvalidated {
            reason,
            first: true,
        }) => {
            tracing::warn!(tool = %qualified, %reason, "input schema unusable; forwarding its calls unvalidated");
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(errors) => Err(match whose {
            Whose::Caller => format!(
                "invalid arguments for '{qualified}' (nothing was sent to the server):\n{errors}"
            ),
            Whose::Approver => format!(
                "the approved arguments for '{qualified}' are invalid (nothing was sent to the server):\n{errors}"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn catalog() -> Catalog {
        let echo = json!({
            "name": "echo",
            "inputSchema": {
                "type": "object",
                "properties": {"message": {"type": "string"}},
                "required": ["message"]
            }
        });
        let loose = json!({"name": "loose", "inputSchema": {"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}});
        Catalog::build(&[catalog::ServerTools {
            server: "everything".into(),
            description: None,
            tools: vec![Arc::new(echo), Arc::new(loose)],
        }])
        .0
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn valid_arguments_pass() {
        let ok = args(json!({"message": "hello"}));
        assert!(validate(&catalog(), "everything__echo", Some(&ok), Whose::Caller).is_ok());
    }

    #[test]
    fn invalid_arguments_say_what_is_wrong_and_that_nothing_was_sent() {
        let catalog = catalog();
        let wrong = args(json!({"message": 7}));
        let message = validate(&catalog, "everything__echo", Some(&wrong), Whose::Caller)
            .expect_err("a number is not a string");
        assert!(
            message.starts_with("invalid arguments for 'everything__echo'"),
            "{message}"
        );
        assert!(message.contains("nothing was sent"), "{message}");
        let missing = validate(&catalog, "everything__echo", None, Whose::Approver)
            .expect_err("message is required");
        assert!(missing.starts_with("the approved arguments"), "{missing}");
    }

    #[test]
    fn an_unusable_schema_lets_the_call_through() {
        let anything = args(json!({"x": 1}));
        assert!(
            validate(
                &catalog(),
                "everything__loose",
                Some(&anything),
                Whose::Caller
            )
            .is_ok()
        );
    }
}
