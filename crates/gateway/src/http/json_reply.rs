//! One `application/json` body for a request whose answer needs no stream.
//!
//! rmcp answers every request of a legacy (session) Streamable HTTP client with an SSE stream,
//! even a `tools/call` whose upstream sends nothing before its result. That costs the client
//! an event-stream parse and the connection several small writes per call. This layer looks at
//! the start of such a stream: when its first message is the JSON-RPC response, and it comes
//! within [`HOLD`], the client gets that message alone as `application/json` (the transport
//! spec lets the server choose either for a request). When the first message is anything else
//! (progress, a log message, an elicitation request), or nothing has come within [`HOLD`], the
//! stream goes on as it is, the part already read first, so no message is lost or reordered
//! and a long call keeps its keep-alive comments.
//!
//! Only `POST` requests whose `Accept` names `application/json` are touched, and only `200
//! text/event-stream` answers; everything else passes unchanged. The 2026-07-28 (stateless)
//! path is answered as JSON by rmcp itself (`json_response`).

use std::time::Duration;

use axum::body::Bytes;
use axum::{body::Body, extract::Request, middleware::Next, response::Response};
use futures::{StreamExt as _, stream};
use http::{HeaderValue, Method, StatusCode, header};

/// How long the first message is waited for before the stream is passed on as it is.
pub const HOLD: Duration = Duration::from_secs(1);

/// Most bytes held while looking for the first message; a larger first event is streamed.
const HOLD_BYTES: usize = 4 * 1024 * 1024;

/// The middleware (see the module docs).
pub async fn prefer_json(request: Request, next: Next) -> Response {
    let wants_json = request.method() == Method::POST && accepts_json(request.headers());
    let response = next.run(request).await;
    if !wants_json || response.status() != StatusCode::OK || !is_event_stream(&response) {
        return response;
    }
    collapse(response, HOLD).await
}

fn accepts_json(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|item| {
            let essence = item.split(';').next().unwrap_or_default().trim();
            essence.eq_ignore_ascii_case("application/json") || essence == "*/*"
        })
}

fn is_event_stream(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"))
}

/// `response` (an SSE stream) as one JSON body when its first message is the response and
/// comes within `hold`; else the same stream.
async fn collapse(response: Response, hold: Duration) -> Response {
    let (mut parts, body) = response.into_parts();
    let mut chunks = body.into_data_stream();
    let mut held: Vec<u8> = Vec::new();
    let mut scanned = 0;
    let deadline = tokio::time::Instant::now() + hold;
    loop {
        // Whole events in what is held so far: the first one with data decides.
        while let Some((end, data)) = next_event(&held[scanned..]) {
            scanned += end;
            // Comments, keep-alives and priming events (an empty `data:`) carry no message.
            let Some(data) = data.filter(|data| !data.trim().is_empty()) else {
                continue;
            };
            if is_response(&data) {
                parts.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                parts.headers.remove(header::CONTENT_LENGTH);
                parts.headers.remove(header::CACHE_CONTROL);
                parts.headers.remove("x-accel-buffering");
                return Response::from_parts(parts, Body::from(data));
            }
            return resume(parts, held, chunks);
        }
        if held.len() > HOLD_BYTES {
            return resume(parts, held, chunks);
        }
        match tokio::time::timeout_at(deadline, chunks.next()).await {
            Ok(Some(Ok(chunk))) => held.extend_from_slice(&chunk),
            // The stream ended (or failed): pass on what there was, as the stream would have.
            Ok(Some(Err(_))) | Ok(None) => {
                return Response::from_parts(parts, Body::from(held));
            }
            Err(_elapsed) => return resume(parts, held, chunks),
        }
    }
}

/// The stream as it was: `held` first, then the rest of `chunks`.
fn resume(
    parts: http::response::Parts,
    held: Vec<u8>,
    chunks: axum::body::BodyDataStream,
) -> Response {
    let first = stream::once(async move { Ok::<_, axum::Error>(Bytes::from(held)) });
    Response::from_parts(parts, Body::from_stream(first.chain(chunks)))
}

/// The first whole event in `buffer`: how many bytes it takes (with its blank line), and its
/// data (the `data:` lines joined by `\n`), if it has any. `None` when no event is complete.
fn next_event(buffer: &[u8]) -> Option<(usize, Option<String>)> {
    let (end, blank) = event_end(buffer)?;
    let mut data: Option<String> = None;
    for line in buffer[..end].split(|&b| b == b'\n' || b == b'\r') {
        let Some(value) = line.strip_prefix(b"data") else {
            continue;
        };
        let value = match value {
            [] => &[][..],
            [b':', b' ', rest @ ..] => rest,
            [b':', rest @ ..] => rest,
            // `dataX:` is another field.
            _ => continue,
        };
        let value = String::from_utf8_lossy(value);
        match &mut data {
            Some(data) => {
                data.push('\n');
                data.push_str(&value);
            }
            None => data = Some(value.into_owned()),
        }
    }
    Some((end + blank, data))
}

/// Where the first event in `buffer` ends and how long the blank line after it is.
fn event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < buffer.len() {
        let eol = match buffer[i] {
            b'\n' => 1,
            b'\r' if buffer.get(i + 1) == Some(&b'\n') => 2,
            b'\r' => 1,
            _ => {
                i += 1;
                continue;
            }
        };
        let next = i + eol;
        let blank = match buffer.get(next..) {
            Some([b'\n', ..]) => 1,
            Some([b'\r', b'\n', ..]) => 2,
            Some([b'\r']) => return None, // `\r\n` may still come
            Some([b'\r', ..]) => 1,
            _ => {
                i = next;
                continue;
            }
        };
        return Some((next, blank));
    }
    None
}

/// A JSON-RPC response or error (an `id` with `result` or `error`, no `method`).
fn is_response(data: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Probe {
        id: Option<serde::de::IgnoredAny>,
        result: Option<serde::de::IgnoredAny>,
        error: Option<serde::de::IgnoredAny>,
        method: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_str::<Probe>(data).is_ok_and(|probe| {
        probe.id.is_some()
            && (probe.result.is_some() || probe.error.is_some())
            && probe.method.is_none()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(chunks: Vec<&'static str>, gap: Duration) -> Response {
        let body = stream::iter(chunks).then(move |chunk| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(Bytes::from_static(chunk.as_bytes()))
        });
        Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header("mcp-session-id", "abc")
            .body(Body::from_stream(body))
            .expect("response")
    }

    async fn text(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    fn content_type(response: &Response) -> &str {
        response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    const RESULT: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;

    #[tokio::test]
    async fn a_lone_response_becomes_one_json_body_with_the_session_header() {
        let response = collapse(
            sse(
                vec![
                    ": keep-alive\n\n",
                    "id: 0\nretry: 3000\ndata:\n\n",
                    "data: {\"jsonrpc\":\"2.0\",",
                    "\"id\":1,\"result\":{\"content\":[]}}\n\n",
                ],
                Duration::ZERO,
            ),
            HOLD,
        )
        .await;
        assert_eq!(content_type(&response), "application/json");
        assert_eq!(response.headers()["mcp-session-id"], "abc");
        assert_eq!(text(response).await, RESULT);
    }

    #[tokio::test]
    async fn a_notification_first_keeps_the_whole_stream_in_order() {
        let chunks = vec![
            "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\r\n\r\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\r\n",
        ];
        let whole: String = chunks.concat();
        let response = collapse(sse(chunks, Duration::ZERO), HOLD).await;
        assert_eq!(content_type(&response), "text/event-stream");
        assert_eq!(text(response).await, whole);
    }

    #[tokio::test]
    async fn a_request_from_the_server_first_keeps_the_stream() {
        let chunks = vec![
            "data: {\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"elicitation/create\",\"params\":{}}\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
        ];
        let whole: String = chunks.concat();
        let response = collapse(sse(chunks, Duration::ZERO), HOLD).await;
        assert_eq!(content_type(&response), "text/event-stream");
        assert_eq!(text(response).await, whole);
    }

    #[tokio::test]
    async fn a_slow_first_message_is_streamed_after_the_hold() {
        let chunks = vec![
            ": keep-alive\n\n",
            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n",
        ];
        let whole: String = chunks.concat();
        let hold = Duration::from_millis(50);
        let response = collapse(sse(chunks, hold * 4), hold).await;
        assert_eq!(content_type(&response), "text/event-stream");
        assert_eq!(text(response).await, whole);
    }

    #[tokio::test]
    async fn a_stream_that_ends_without_a_message_is_passed_on() {
        let response = collapse(sse(vec![": keep-alive\n\n"], Duration::ZERO), HOLD).await;
        assert_eq!(content_type(&response), "text/event-stream");
        assert_eq!(text(response).await, ": keep-alive\n\n");
    }

    #[test]
    fn events_split_on_every_line_ending_and_join_their_data_lines() {
        assert_eq!(next_event(b"data: a\n"), None);
        assert_eq!(next_event(b"data: a\r\n\r"), None);
        assert_eq!(
            next_event(b"data: a\ndata:b\n\nrest"),
            Some((16, Some("a\nb".to_owned())))
        );
        assert_eq!(
            next_event(b"data: a\r\n\r\n"),
            Some((11, Some("a".to_owned())))
        );
        assert_eq!(next_event(b"data: a\r\rx"), Some((9, Some("a".to_owned()))));
        assert_eq!(next_event(b": ping\n\n"), Some((8, None)));
        assert_eq!(next_event(b"datum: x\n\n"), Some((10, None)));
    }

    #[test]
    fn only_responses_and_errors_count_as_the_answer() {
        assert!(is_response(RESULT));
        assert!(is_response(
            r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"m"}}"#
        ));
        assert!(!is_response(
            r#"{"jsonrpc":"2.0","method":"notifications/message"}"#
        ));
        assert!(!is_response(
            r#"{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage"}"#
        ));
        assert!(!is_response("not json"));
    }

    #[test]
    fn accept_headers_are_read_like_rmcp_does() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream, Application/JSON;q=0.9"),
        );
        assert!(accepts_json(&headers));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        assert!(!accepts_json(&headers));
    }
}
