//! The HTTP client under rmcp's Streamable HTTP transport, taught one more way a session ends.
//!
//! The spec says a server answers an unknown `Mcp-Session-Id` with 404, and rmcp re-initialises
//! on that (`reinit_on_expired_session`). Servers built on the TypeScript SDK 1.x answer
//! `400 {"error": {"message": "Bad Request: No valid session ID provided"}, "id": null}` instead,
//! which rmcp treats as an uncorrelated error, so the request waits for its timeout. Here an
//! id-less JSON-RPC error that mentions the session, received for a request that carried a
//! session id, is reported as the expired session it is. The server did not process the
//! request, so re-initialising and retrying cannot repeat a side effect.
//!
//! It also makes every HTTP 401 look the same. rmcp reports a 401 carrying `WWW-Authenticate` as
//! [`StreamableHttpError::AuthRequired`], but a bare one as an "unexpected server response" (POST)
//! or a reqwest status error (GET). Here all of them become `AuthRequired` (with an empty challenge
//! when there was none), so `connect` can explain the 401 in terms of the server's auth strategy,
//! and rmcp stops reconnecting a GET stream that cannot succeed with the same credentials.
//!
//! And a request whose `params._meta` carries a trace context gets it as the `traceparent` /
//! `tracestate` headers as well (`super::trace_headers`).

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue, StatusCode};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        AuthRequiredError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
        StreamableHttpResponseLimits,
    },
};
use sse_stream::{Error as SseError, Sse};

#[derive(Clone)]
pub(crate) struct SessionAwareClient {
    inner: reqwest::Client,
}

impl SessionAwareClient {
    pub(crate) fn new(inner: reqwest::Client) -> Self {
        Self { inner }
    }
}

type Error = <reqwest::Client as StreamableHttpClient>::Error;

/// True for the id-less "invalid session" error TypeScript SDK servers send after a restart.
fn is_session_rejection(message: &ServerJsonRpcMessage) -> bool {
    let ServerJsonRpcMessage::Error(error) = message else {
        return false;
    };
    let text = error.error.message.to_ascii_lowercase();
    text.contains("session")
        && (text.contains("no valid") || text.contains("not found") || text.contains("invalid"))
}

impl StreamableHttpClient for SessionAwareClient {
    type Error = Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Error>> {
        let had_session = session_id.is_some();
        custom_headers.extend(super::trace_headers(&message));
        let response = self
            .inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await;
        reclassify(had_session, response)
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Error>> {
        let had_session = session_id.is_some();
        custom_headers.extend(super::trace_headers(&message));
        let response = self
            .inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await;
        reclassify(had_session, response)
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(unauthorized)
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
            .map_err(unauthorized)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
            .map_err(unauthorized)
    }
}

fn reclassify(
    had_session: bool,
    response: Result<StreamableHttpPostResponse, StreamableHttpError<Error>>,
) -> Result<StreamableHttpPostResponse, StreamableHttpError<Error>> {
    match response {
        Ok(StreamableHttpPostResponse::Json(message, _))
            if had_session && is_session_rejection(&message) =>
        {
            tracing::debug!("upstream rejected our session id; treating the session as expired");
            Err(StreamableHttpError::SessionExpired)
        }
        other => other.map_err(unauthorized),
    }
}

/// Any HTTP 401 as [`StreamableHttpError::AuthRequired`]; everything else unchanged.
fn unauthorized(error: StreamableHttpError<Error>) -> StreamableHttpError<Error> {
    let bare_401 = match &error {
        // rmcp words a POST's unchallenged 401 as `HTTP {status}: {body}`.
        StreamableHttpError::UnexpectedServerResponse(text) => is_401_text(text),
        StreamableHttpError::Client(error) => error.status() == Some(StatusCode::UNAUTHORIZED),
        _ => false,
    };
    if bare_401 {
        StreamableHttpError::AuthRequired(AuthRequiredError::new(String::new()))
    } else {
        error
    }
}

fn is_401_text(text: &str) -> bool {
    text.strip_prefix("HTTP 401")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ':']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expect: bool) {
        let message: ServerJsonRpcMessage = serde_json::from_str(raw).expect("valid message");
        assert_eq!(is_session_rejection(&message), expect, "{raw}");
    }

    #[test]
    fn only_401s_become_auth_required() {
        let auth_required = |error: StreamableHttpError<Error>| {
            matches!(
                unauthorized(error),
                StreamableHttpError::AuthRequired(e) if e.www_authenticate_header.is_empty()
            )
        };
        let text = |s: &'static str| StreamableHttpError::UnexpectedServerResponse(s.into());
        assert!(auth_required(text("HTTP 401 Unauthorized: nope")));
        assert!(auth_required(text("HTTP 401")));
        assert!(!auth_required(text("HTTP 4010 Whatever")));
        assert!(!auth_required(text("HTTP 403 Forbidden: nope")));
        assert!(!auth_required(StreamableHttpError::SessionExpired));
        let challenged = unauthorized(StreamableHttpError::AuthRequired(AuthRequiredError::new(
            "Bearer realm=\"x\"".into(),
        )));
        assert!(
            matches!(&challenged, StreamableHttpError::AuthRequired(e) if e.www_authenticate_header == "Bearer realm=\"x\""),
            "{challenged:?}"
        );
    }

    #[test]
    fn session_rejections_are_recognised() {
        check(
            r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}"#,
            true,
        );
        check(
            r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}"#,
            true,
        );
        check(
            r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"unknown tool"},"id":3}"#,
            false,
        );
        check(r#"{"jsonrpc":"2.0","result":{},"id":3}"#, false);
    }
}
