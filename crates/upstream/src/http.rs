//! The HTTP client under rmcp's Streamable HTTP transport, taught one more way a session ends.
//!
//! The spec says a server answers an unknown `Mcp-Session-Id` with 404, and rmcp re-initialises
//! on that (`reinit_on_expired_session`). Servers built on the TypeScript SDK 1.x answer
//! `400 {"error": {"message": "Bad Request: No valid session ID provided"}, "id": null}` instead,
//! which rmcp treats as an uncorrelated error, so the request waits for its timeout. Here an
//! id-less JSON-RPC error that mentions the session, received for a request that carried a
//! session id, is reported as the expired session it is. The server did not process the
//! request, so re-initialising and retrying cannot repeat a side effect.

use std::{collections::HashMap, sync::Arc};

use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_client::{
        StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
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
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Error>> {
        let had_session = session_id.is_some();
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
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Error>> {
        let had_session = session_id.is_some();
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
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expect: bool) {
        let message: ServerJsonRpcMessage = serde_json::from_str(raw).expect("valid message");
        assert_eq!(is_session_rejection(&message), expect, "{raw}");
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
