//! The express lane of a stdio session: a plain `tools/call` written to the child's stdin and
//! its answer taken off the child's stdout here, past rmcp's service loop.
//!
//! Through rmcp, one call costs a message to the session's service loop (a wake-up of that
//! task), a task spawned to write the request, another wake-up of the loop when that task
//! ends, the answer parsed as rmcp's untagged union of every result type (a `CallToolResult`
//! is tried after most others), and a wake-up of the caller through a oneshot. Here the
//! caller's own task writes the request, the stdout reader hands the answer's line straight
//! to that task, and the caller parses it as the one type it expects. On the gateway's relay
//! benchmark this is most of what a call costs beyond the kernel's own work
//! (docs/performance.md).
//!
//! Only what cannot need rmcp takes this lane (see `Server::call_tool_with`): a legacy-era
//! session, a caller that takes no progress or log messages and can be asked nothing. Every
//! other message goes through rmcp as before, and both share the writer and the reader:
//! - **Writer.** rmcp's messages and express requests are written through [`Express::write`],
//!   one whole line at a time under a lock, so lines never interleave. A line that fits the
//!   pipe's atomic write size is written by one `write`, which either happens whole or not at
//!   all, so a caller dropped mid-write leaves no half line; a longer line is written by a task
//!   of its own, which finishes even if the caller goes away.
//! - **Reader.** [`ExpressStdout`] sits under rmcp's line reader. A line that answers an
//!   express request (its `id` is one this module sent, `mcpgw-x-N`, and it has no `method`)
//!   goes to the waiting caller; every other byte reaches rmcp unchanged, in order. A line
//!   longer than rmcp's own limit is handed to rmcp, which discards it, as it would have.
//! - **Ids.** Express requests use string ids with their own prefix, which never collide with
//!   rmcp's numeric ids; a cancellation (`notifications/cancelled`) names them like any other.
//! - **End.** When stdout ends or fails, every waiting caller gets [`ServiceError::TransportClosed`],
//!   as a call through rmcp would, and later calls fail the same way at once.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use rmcp::{
    ErrorData as McpError, RoleClient,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
        JsonRpcMessage, ProgressToken, RequestId, ServerResult,
    },
    service::{ServiceError, TxJsonRpcMessage},
};
use serde::Deserialize;
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf},
    sync::oneshot,
};

use crate::lock;

/// The prefix of an express request's id.
const ID_PREFIX: &str = "mcpgw-x-";
/// rmcp's own limit on a line read from a stdio server (`DEFAULT_MAX_LINE_LENGTH`).
const MAX_LINE: usize = 16 * 1024 * 1024;
/// Writes to a pipe up to this size are atomic (POSIX `PIPE_BUF` on Linux).
const ATOMIC_WRITE: usize = 4096;
/// How much is read from stdout at a time.
const READ_CHUNK: usize = 16 * 1024;

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The shared writer and the callers waiting for answers, of one stdio session.
pub(crate) struct Express {
    writer: tokio::sync::Mutex<Option<Writer>>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>,
    serial: AtomicU64,
    closed: AtomicBool,
}

impl Express {
    pub(crate) fn new(writer: impl AsyncWrite + Send + Unpin + 'static) -> Arc<Self> {
        Arc::new(Self {
            writer: tokio::sync::Mutex::new(Some(Box::new(writer))),
            waiting: Mutex::new(HashMap::new()),
            serial: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// Writes one rmcp message as a line.
    pub(crate) async fn send(
        self: Arc<Self>,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> std::io::Result<()> {
        let line = encode(&item)?;
        self.write(line).await
    }

    /// Writes `line` (a whole message and its `\n`) so that it never interleaves with another
    /// and a caller that goes away mid-write leaves no half line (see the module docs).
    pub(crate) async fn write(self: Arc<Self>, line: Vec<u8>) -> std::io::Result<()> {
        if line.len() <= ATOMIC_WRITE {
            return self.write_now(&line).await;
        }
        let task = tokio::spawn(async move { self.write_now(&line).await });
        task.await
            .unwrap_or_else(|error| Err(std::io::Error::other(error.to_string())))
    }

    async fn write_now(&self, line: &[u8]) -> std::io::Result<()> {
        let mut writer = self.writer.lock().await;
        let Some(writer) = writer.as_mut() else {
            return Err(std::io::ErrorKind::NotConnected.into());
        };
        writer.write_all(line).await?;
        writer.flush().await
    }

    /// Ends the writer: the child reads end of file on its stdin.
    pub(crate) async fn close(&self) -> std::io::Result<()> {
        let writer = self.writer.lock().await.take();
        match writer {
            Some(mut writer) => writer.shutdown().await,
            None => Ok(()),
        }
    }

    /// Sends `params` as a `tools/call` on the express lane. The answer comes from the
    /// returned [`Pending`]; its request id is for cancelling it and routing to it.
    pub(crate) async fn call(
        self: &Arc<Self>,
        mut params: CallToolRequestParams,
    ) -> Result<(RequestId, Pending), ServiceError> {
        let serial = self.serial.fetch_add(1, Ordering::Relaxed);
        let id = RequestId::String(format!("{ID_PREFIX}{serial}").into());
        // As rmcp does for every request: a token, so the server's progress reaches the call's
        // activity (and keeps it from timing out) even though nobody relays it.
        params
            .meta
            .get_or_insert_default()
            .set_progress_token(ProgressToken(id.clone()));
        let message: TxJsonRpcMessage<RoleClient> = JsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            id.clone(),
        );
        let line = encode(&message).map_err(|_| ServiceError::UnexpectedResponse)?;
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(serial, tx);
        let answer = Pending {
            rx,
            express: self.clone(),
            serial,
        };
        // Registered before it is written: the answer may come back at once. Checked after
        // registering, so a caller registered after the end is never left waiting.
        if self.closed.load(Ordering::Acquire) {
            return Err(ServiceError::TransportClosed);
        }
        if self.clone().write(line).await.is_err() {
            return Err(ServiceError::TransportClosed);
        }
        Ok((id, answer))
    }

    /// Takes `line` when it answers a waiting express request; gives it back otherwise.
    fn claim(&self, line: Vec<u8>) -> Option<Vec<u8>> {
        if memchr::memmem::find(&line, ID_PREFIX.as_bytes()).is_none() {
            return Some(line);
        }
        let Some(serial) = answer_serial(&line) else {
            return Some(line);
        };
        let Some(waiter) = lock(&self.waiting).remove(&serial) else {
            return Some(line);
        };
        // A caller that stopped waiting drops the answer, as rmcp would.
        let _ = waiter.send(line);
        None
    }

    /// The session's stdout ended: every waiting caller, and every later one, is told.
    fn end(&self) {
        self.closed.store(true, Ordering::Release);
        lock(&self.waiting).clear();
    }
}

/// The serial of the express request `line` answers: a response or error (no `method`) whose
/// `id` is an express id.
fn answer_serial(line: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        id: Option<std::borrow::Cow<'a, str>>,
        method: Option<serde::de::IgnoredAny>,
    }
    // Any other shape (a numeric id, not JSON) is not ours.
    let head: Head<'_> = serde_json::from_slice(line).ok()?;
    if head.method.is_some() {
        return None;
    }
    head.id?.strip_prefix(ID_PREFIX)?.parse().ok()
}

fn encode(message: &TxJsonRpcMessage<RoleClient>) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    Ok(line)
}

/// The answer to one express request, once it comes. Dropped, it stops waiting.
pub(crate) struct Pending {
    rx: oneshot::Receiver<Vec<u8>>,
    express: Arc<Express>,
    serial: u64,
}

impl Pending {
    /// The call's outcome, as a call through rmcp would give it.
    pub(crate) async fn outcome(&mut self) -> Result<CallToolResponse, ServiceError> {
        let line = (&mut self.rx)
            .await
            .map_err(|_| ServiceError::TransportClosed)?;
        read_answer(&line)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        lock(&self.express.waiting).remove(&self.serial);
    }
}

/// A `tools/call` answer's line as the response it is: typed as a `CallToolResult` first,
/// else as rmcp would read it (any result type, then as the call's response).
fn read_answer(line: &[u8]) -> Result<CallToolResponse, ServiceError> {
    #[derive(Deserialize)]
    struct Typed {
        result: Option<CallToolResult>,
        error: Option<McpError>,
    }
    #[derive(Deserialize)]
    struct Any {
        result: Option<ServerResult>,
        error: Option<McpError>,
    }
    match serde_json::from_slice::<Typed>(line) {
        Ok(Typed {
            error: Some(error), ..
        }) => Err(ServiceError::McpError(error)),
        Ok(Typed {
            result: Some(result),
            ..
        }) => Ok(CallToolResponse::Complete(result)),
        _ => match serde_json::from_slice::<Any>(line) {
            Ok(Any {
                error: Some(error), ..
            }) => Err(ServiceError::McpError(error)),
            Ok(Any {
                result: Some(result),
                ..
            }) => crate::server::call_tool_response(result),
            _ => Err(ServiceError::UnexpectedResponse),
        },
    }
}

/// A child's stdout under rmcp's reader, taking out the lines that answer express requests
/// (see the module docs).
pub(crate) struct ExpressStdout<R> {
    inner: R,
    express: Arc<Express>,
    /// The start of a line not yet ended.
    partial: Vec<u8>,
    /// Bytes for rmcp, from `given` on.
    out: Vec<u8>,
    given: usize,
    /// Inside a line too long to be an answer: the rest goes to rmcp until its end.
    passing: bool,
    ended: bool,
    /// What one read from the child fills, kept between reads.
    chunk: Box<[u8]>,
}

impl<R> ExpressStdout<R> {
    pub(crate) fn new(inner: R, express: Arc<Express>) -> Self {
        Self {
            inner,
            express,
            partial: Vec::new(),
            out: Vec::new(),
            given: 0,
            passing: false,
            ended: false,
            chunk: vec![0; READ_CHUNK].into_boxed_slice(),
        }
    }

    /// Sorts freshly read `bytes` into answers and rmcp's bytes.
    fn absorb(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let newline = memchr::memchr(b'\n', bytes);
            if self.passing {
                let end = newline.map_or(bytes.len(), |at| at + 1);
                self.out.extend_from_slice(&bytes[..end]);
                self.passing = newline.is_none();
                bytes = &bytes[end..];
                continue;
            }
            match newline {
                Some(at) => {
                    self.partial.extend_from_slice(&bytes[..=at]);
                    bytes = &bytes[at + 1..];
                    let line = std::mem::take(&mut self.partial);
                    if let Some(line) = self.express.claim(line) {
                        self.out.extend_from_slice(&line);
                    }
                }
                None => {
                    self.partial.extend_from_slice(bytes);
                    bytes = &[];
                    if self.partial.len() > MAX_LINE {
                        self.out.append(&mut self.partial);
                        self.passing = true;
                    }
                }
            }
        }
    }
}

impl<R> Drop for ExpressStdout<R> {
    fn drop(&mut self) {
        self.express.end();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ExpressStdout<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.given < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.given);
                buf.put_slice(&this.out[this.given..this.given + n]);
                this.given += n;
                if this.given == this.out.len() {
                    this.out.clear();
                    this.given = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                // A last line without its end goes to rmcp, which drops it; then end of file.
                if !this.partial.is_empty() {
                    this.out = std::mem::take(&mut this.partial);
                    continue;
                }
                this.express.end();
                return Poll::Ready(Ok(()));
            }
            let mut chunk = std::mem::take(&mut this.chunk);
            let mut read = ReadBuf::new(&mut chunk[..]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let filled = read.filled().len();
            match polled {
                Poll::Ready(Ok(())) if filled == 0 => this.ended = true,
                Poll::Ready(Ok(())) => this.absorb(&chunk[..filled]),
                Poll::Ready(Err(_)) | Poll::Pending => {}
            }
            this.chunk = chunk;
            match polled {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => {
                    this.express.end();
                    return Poll::Ready(Err(error));
                }
                Poll::Ready(Ok(())) => {}
            }
        }
    }
}

/// rmcp's writer, for the one message it writes itself (its "Invalid request" answer to a
/// line it cannot read): the bytes go out through [`Express::write`] when flushed.
pub(crate) struct Forward {
    express: Arc<Express>,
    buffer: Vec<u8>,
}

impl Forward {
    pub(crate) fn new(express: Arc<Express>) -> Self {
        Self {
            express,
            buffer: Vec::new(),
        }
    }
}

impl AsyncWrite for Forward {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.get_mut().buffer.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.buffer.is_empty() {
            let line = std::mem::take(&mut this.buffer);
            let express = this.express.clone();
            tokio::spawn(async move {
                if let Err(error) = express.write(line).await {
                    tracing::debug!(%error, "could not answer a stdio server's unreadable message");
                }
            });
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, ContentBlock};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

    fn answer_line(id: &str, text: &str) -> Vec<u8> {
        let result = CallToolResult::success(vec![ContentBlock::text(text)]);
        let mut line = serde_json::to_vec(&serde_json::json!({
            "jsonrpc": "2.0", "id": id, "result": result
        }))
        .expect("json");
        line.push(b'\n');
        line
    }

    fn text_of(response: &CallToolResponse) -> String {
        let CallToolResponse::Complete(result) = response else {
            panic!("not complete: {response:?}");
        };
        result.content[0].as_text().expect("text").text.clone()
    }

    /// Reads lines as rmcp's loop does, always, until the end; the lines it got.
    fn rmcp_reads(
        stdout: ExpressStdout<tokio::io::DuplexStream>,
    ) -> tokio::task::JoinHandle<Vec<String>> {
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            let mut read = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                read.push(line);
            }
            read
        })
    }

    /// A `tools/call` of `echo` sent on `express`: its id and its answer to come.
    async fn call_echo(express: &Arc<Express>) -> (String, Pending) {
        let (id, answer) = express
            .call(CallToolRequestParams::new("echo"))
            .await
            .expect("sent");
        let RequestId::String(id) = id else {
            panic!("a string id: {id:?}");
        };
        (id.to_string(), answer)
    }

    #[tokio::test]
    async fn a_call_is_written_as_one_line_and_its_answer_taken_before_rmcp_reads() {
        let (gateway_in, mut server_in) = tokio::io::duplex(64 * 1024);
        let (mut server_out, gateway_out) = tokio::io::duplex(64 * 1024);
        let express = Express::new(gateway_in);
        let rmcp = rmcp_reads(ExpressStdout::new(gateway_out, express.clone()));

        let (id, mut answer) = call_echo(&express).await;
        let mut sent = vec![0u8; 4096];
        let n = server_in.read(&mut sent).await.expect("read");
        assert_eq!(sent[n - 1], b'\n', "one whole line");
        let sent: serde_json::Value = serde_json::from_slice(&sent[..n]).expect("one line of JSON");
        assert_eq!(sent["method"], "tools/call");
        assert_eq!(sent["id"], id.as_str());
        assert_eq!(sent["params"]["_meta"]["progressToken"], id.as_str());

        // rmcp's messages around the answer reach rmcp, in order; the answer does not. A
        // message that only mentions an express id is rmcp's too.
        let mut wire = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\",\"data\":\"mcpgw-x-0\"}}\n".to_vec();
        wire.extend(answer_line(&id, "Echo: hello"));
        wire.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}\n");
        server_out.write_all(&wire).await.expect("write");
        drop(server_out);

        let response = answer.outcome().await.expect("answered");
        assert_eq!(text_of(&response), "Echo: hello");
        let lines = rmcp.await.expect("reader");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains("notifications/message"), "{lines:?}");
        assert_eq!(lines[1], "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{}}");
    }

    #[tokio::test]
    async fn an_answer_split_across_reads_and_an_unknown_express_id_reach_their_places() {
        let (gateway_in, _server_in) = tokio::io::duplex(64 * 1024);
        // 16 bytes at a time: every line arrives in many pieces.
        let (mut server_out, gateway_out) = tokio::io::duplex(16);
        let express = Express::new(gateway_in);
        let rmcp = rmcp_reads(ExpressStdout::new(gateway_out, express.clone()));
        let (id, mut answer) = call_echo(&express).await;
        let mut wire = answer_line("mcpgw-x-999", "nobody waits");
        wire.extend(answer_line(&id, "split"));
        let writer = tokio::spawn(async move {
            server_out.write_all(&wire).await.expect("write");
        });
        assert_eq!(text_of(&answer.outcome().await.expect("answered")), "split");
        writer.await.expect("writer");
        let lines = rmcp.await.expect("reader");
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("nobody waits"), "{lines:?}");
    }

    #[tokio::test]
    async fn an_error_answer_is_the_servers_error_and_the_end_of_stdout_fails_the_waiting() {
        let (gateway_in, _server_in) = tokio::io::duplex(64 * 1024);
        let (mut server_out, gateway_out) = tokio::io::duplex(64 * 1024);
        let express = Express::new(gateway_in);
        let mut stdout = ExpressStdout::new(gateway_out, express.clone());
        let (id, mut failing) = express
            .call(CallToolRequestParams::new("nope"))
            .await
            .expect("sent");
        let (_, mut waiting) = express
            .call(CallToolRequestParams::new("echo"))
            .await
            .expect("sent");
        let error = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "Unknown tool: nope"}});
        let mut wire = serde_json::to_vec(&error).expect("json");
        wire.push(b'\n');
        server_out.write_all(&wire).await.expect("write");
        drop(server_out);
        let mut rest = Vec::new();
        stdout.read_to_end(&mut rest).await.expect("to the end");
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
        match failing.outcome().await {
            Err(ServiceError::McpError(error)) => assert_eq!(error.message, "Unknown tool: nope"),
            other => panic!("the server's error: {other:?}"),
        }
        assert!(matches!(
            waiting.outcome().await,
            Err(ServiceError::TransportClosed)
        ));
        assert!(matches!(
            express.call(CallToolRequestParams::new("echo")).await,
            Err(ServiceError::TransportClosed)
        ));
    }

    #[tokio::test]
    async fn a_line_longer_than_rmcps_limit_goes_to_rmcp_whole() {
        let (gateway_in, _server_in) = tokio::io::duplex(1024);
        let (mut server_out, gateway_out) = tokio::io::duplex(1 << 20);
        let express = Express::new(gateway_in);
        let mut stdout = ExpressStdout::new(gateway_out, express);
        let mut long = vec![b'x'; MAX_LINE + 10];
        long.push(b'\n');
        long.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
        let expected = long.len();
        let writer = tokio::spawn(async move {
            server_out.write_all(&long).await.expect("write");
        });
        let mut all = Vec::new();
        stdout.read_to_end(&mut all).await.expect("read");
        writer.await.expect("writer");
        assert_eq!(all.len(), expected);
        assert!(all.ends_with(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n"));
    }

    #[test]
    fn only_answers_with_an_express_id_are_claimed() {
        assert_eq!(
            answer_serial(br#"{"jsonrpc":"2.0","id":"mcpgw-x-12","result":{}}"#),
            Some(12)
        );
        assert_eq!(
            answer_serial(br#"{"result":{},"id":"mcpgw-x-3","jsonrpc":"2.0"}"#),
            Some(3)
        );
        // A request from the server with such an id, another id, or no JSON at all.
        assert_eq!(
            answer_serial(br#"{"jsonrpc":"2.0","id":"mcpgw-x-1","method":"ping"}"#),
            None
        );
        assert_eq!(
            answer_serial(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#),
            None
        );
        assert_eq!(
            answer_serial(br#"{"jsonrpc":"2.0","id":"x-4","result":{}}"#),
            None
        );
        assert_eq!(answer_serial(b"mcpgw-x-1 garbage"), None);
    }

    #[test]
    fn a_task_result_is_read_as_rmcp_reads_it() {
        let line = br#"{"jsonrpc":"2.0","id":"mcpgw-x-1","result":{"task":{"taskId":"t1","status":"working","createdAt":"2026-12-01T00:00:00Z","lastUpdatedAt":"2026-12-01T00:00:00Z","ttl":null}}}"#;
        match read_answer(line) {
            Ok(CallToolResponse::Task(_)) | Err(ServiceError::UnexpectedResponse) => {}
            other => panic!("a task or unreadable, never an empty result: {other:?}"),
        }
        let empty = br#"{"jsonrpc":"2.0","id":"mcpgw-x-1","result":{}}"#;
        assert!(matches!(
            read_answer(empty),
            Ok(CallToolResponse::Complete(_))
        ));
    }
}
