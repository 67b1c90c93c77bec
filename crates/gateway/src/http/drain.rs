//! Graceful drain of the HTTP listener: once shutdown begins, a new MCP request is answered 503
//! with `Retry-After` while the requests already in flight run to their end (their response
//! bodies included: a tool call's SSE stream is in flight until its last event is written).
//! Only POSTs count as in flight: a GET's standalone stream lasts as long as its session.
//!
//! Only new work is refused while draining: `initialize` (a new session) and `tools/call`.
//! Everything else a client sends belongs to, or finishes, work in flight and passes: its answer
//! to an elicitation, a cancellation, and reads such as the `tools/list` the Python SDK sends
//! right after a call to validate its result (refusing that failed calls that had completed).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};

/// How long the listener stays after the last request in flight ended.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// Seconds a refused client is told to wait: about a restart's length.
const RETRY_AFTER_S: &str = "5";

/// The drain state shared by the listener and the layer: whether draining, and how many MCP
/// requests are in flight.
#[derive(Clone)]
pub(crate) struct Drain(Arc<Inner>);

struct Inner {
    draining: AtomicBool,
    in_flight: tokio::sync::watch::Sender<usize>,
}

impl Default for Drain {
    fn default() -> Self {
        Self(Arc::new(Inner {
            draining: AtomicBool::new(false),
            in_flight: tokio::sync::watch::Sender::new(0),
        }))
    }
}

impl Drain {
    /// From now on new MCP requests get 503.
    pub(crate) fn begin(&self) {
        self.0.draining.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.0.draining.load(Ordering::SeqCst)
    }

    /// MCP requests in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        *self.0.in_flight.borrow()
    }

    /// Waits until no MCP request has been in flight for [`LINGER`]: a client whose call just
    /// ended often sends one more request that finishes it (the Python SDK lists the tools to
    /// validate the result), and should find the listener still there.
    pub(crate) async fn idle(&self) {
        let mut in_flight = self.0.in_flight.subscribe();
        loop {
            // The sender lives in `self`.
            let _ = in_flight.wait_for(|n| *n == 0).await;
            tokio::time::sleep(LINGER).await;
            if *in_flight.borrow_and_update() == 0 {
                return;
            }
        }
    }

    fn enter(&self) -> InFlight {
        self.0.in_flight.send_modify(|n| *n += 1);
        InFlight(self.clone())
    }
}

/// One MCP request in flight, until dropped with its response body.
struct InFlight(Drain);

impl Drop for InFlight {
    fn drop(&mut self) {
        (self.0)
            .0
            .in_flight
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The layer on `/mcp`: counts each request in flight until its response body is done, and
/// refuses new JSON-RPC requests while draining.
pub(crate) async fn layer(State(drain): State<Drain>, request: Request, next: Next) -> Response {
    let request = if drain.is_draining() {
        let (parts, body) = request.into_parts();
        // Bodies over the limit are refused by rmcp anyway; read at most that much.
        let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024 * 1024).await else {
            return refused();
        };
        if is_new_work(&bytes) || parts.method == http::Method::GET {
            return refused();
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        request
    };
    // A GET is a standalone SSE stream that lasts as long as its session: not work to wait for.
    if request.method() != http::Method::POST {
        return next.run(request).await;
    }
    let in_flight = drain.enter();
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Body::new(Counted {
            body,
            _in_flight: in_flight,
        }),
    )
}

/// A response body that keeps its request counted as in flight until it is done. It passes on
/// the body's size hint, so a JSON answer keeps its `Content-Length` (a chunked body would end
/// with a second small write).
struct Counted {
    body: Body,
    _in_flight: InFlight,
}

impl axum::body::HttpBody for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether `body` starts new work: an `initialize` or `tools/call` request (alone or in a
/// batch).
fn is_new_work(body: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        // Not JSON: rmcp would refuse it anyway; refuse it here.
        return true;
    };
    let one = |message: &serde_json::Value| {
        message.get("id").is_some()
            && matches!(
                message.get("method").and_then(serde_json::Value::as_str),
                Some("initialize" | "tools/call")
            )
    };
    match &value {
        serde_json::Value::Array(batch) => batch.iter().any(one),
        message => one(message),
    }
}

fn refused() -> Response {
    super::errors::unavailable(
        RETRY_AFTER_S,
        "mcpgw is shutting down; retry in a few seconds",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_work_is_refused_while_draining() {
        for (body, request) in [
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#, true),
            (r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#, true),
            (r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, false),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
                false,
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, false),
            (
                r#"[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"method":"tools/call"}]"#,
                true,
            ),
            ("not json", true),
        ] {
            assert_eq!(is_new_work(body.as_bytes()), request, "{body}");
        }
    }
}
