//! The limit step: every `tools/call` counts against the caller's calls per minute (its
//! profile's `calls_per_minute`, else `[limits]`), meta-tools included, since searches cost
//! the gateway too. A refused call of a catalog tool is recorded as rate limited.

use rmcp::model::CallToolResult;

use super::{Invocation, server_of};
use crate::{Gateway, audit::AuditRecord, audit::CallDecision, mcp::result, principal::Principal};

/// `Some(answer)` when `principal` is over its limit: the tool error saying when to retry.
pub(crate) async fn limit(
    gateway: &Gateway,
    principal: &Principal,
    invocation: &Invocation,
) -> Option<CallToolResult> {
    let retry_after = gateway.check_rate(principal).await.err()?;
    let tool = invocation.tool();
    tracing::info!(%principal, tool = tool.map(|t| t.name.as_str()), "rate limited");
    if let Some(tool) = tool {
        let server = server_of(&gateway.catalog(), &tool.name);
        gateway.audit(
            AuditRecord::begin(principal, &server, &tool.name, tool.arguments.as_ref())
                .decided(CallDecision::RateLimited)
                .not_run("over the calls-per-minute limit"),
        );
    }
    Some(result::rate_limited(retry_after))
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    async fn gateway(toml: &str) -> (std::sync::Arc<Gateway>, store::Store) {
        let config = config::parse_toml(toml, std::path::Path::new("t.toml")).expect("config");
        let store = store::Store::open_in_memory().await.expect("store");
        (Gateway::new(config, Some(store.clone())), store)
    }

    fn call(name: &str) -> Invocation {
        Invocation::parse(name, Some(Map::new()), true)
    }

    #[tokio::test]
    async fn the_call_over_the_limit_is_refused_and_recorded() {
        let (gateway, store) = gateway("[limits]\ncalls_per_minute = 2\n").await;
        let me = Principal::Local;
        assert!(limit(&gateway, &me, &call("search_tools")).await.is_none());
        assert!(limit(&gateway, &me, &call("time__now")).await.is_none());
        let refused = limit(&gateway, &me, &call("time__now"))
            .await
            .expect("over the limit");
        assert_eq!(refused.is_error, Some(true));
        // A refused meta-tool call counts and is refused, but names no tool to record.
        assert!(limit(&gateway, &me, &call("search_tools")).await.is_some());
        gateway.audit_written().await;
        let rows = store
            .audit_entries(&store::AuditQuery {
                limit: 10,
                ..Default::default()
            })
            .await
            .expect("audit");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].tool, "time__now");
        assert_eq!(rows[0].server, "time");
        assert_eq!(rows[0].decision, CallDecision::RateLimited);
    }

    #[tokio::test]
    async fn without_a_limit_nothing_is_refused() {
        let (gateway, _) = gateway("").await;
        for _ in 0..1000 {
            assert!(
                limit(&gateway, &Principal::Local, &call("time__now"))
                    .await
                    .is_none()
            );
        }
    }
}
