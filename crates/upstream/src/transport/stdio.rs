//! Starting a stdio upstream: a child process in its own process group, watched from start to
//! end, its stderr into the log and the last of it kept for error messages.
//!
//! The process group matters because launchers (`npx`, `uvx`, shell wrappers) start the real
//! server as a grandchild; ending only the direct child would leave it running. The group is
//! ended when the session ends: stdin is closed (the MCP way to ask a stdio server to stop),
//! then after [`STOP_GRACE`] SIGTERM, then after as long again SIGKILL, so a child that ignores
//! stdin EOF still goes; when the transport is dropped without being closed, SIGKILL at once.
//!
//! rmcp's `TokioChildProcess` was rejected for this: it owns the child inside the transport, so
//! nobody can learn when the child exits (only that its stdout ended) or with what status. Here
//! a watcher task owns the child and publishes its exit ([`ChildWatch::exit`]) the moment it
//! happens, which is how a crashed or killed server is noticed without waiting for a call.

use ids::ServerName;
use std::{
    collections::VecDeque,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use process_wrap::tokio::{ChildWrapper, CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::{
    RoleClient,
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{Transport, async_rw::AsyncRwTransport},
};
use secrecy::ExposeSecret;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::ChildStdout,
    sync::{oneshot, watch},
};

use crate::{
    UpstreamError,
    transport::express::{Express, ExpressStdout, Forward},
};

/// Longest stderr line kept in the log; the rest is cut so a noisy child cannot flood it.
const MAX_STDERR_LINE: usize = 4096;
/// The end of a child's stderr kept for error messages: at most this many lines...
const TAIL_LINES: usize = 20;
/// ...and this many bytes.
const TAIL_BYTES: usize = 4096;
/// How long a child has to exit after stdin is closed, and again after SIGTERM.
pub const STOP_GRACE: Duration = Duration::from_secs(1);
/// How long an ended child's stderr is read on before its exit is published.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// POSIX signal numbers (the same on every Unix mcpgw runs on); process-wrap signals the whole
/// group with them.
const SIGTERM: i32 = 15;
const SIGKILL: i32 = 9;

/// What the watcher is asked to do to a child still running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Order {
    Run,
    Terminate,
    Kill,
}

/// A stdio child as the rest of the crate sees it: its exit when it happens, the end of its
/// stderr, and a way to end its process group. Clones share the child.
#[derive(Clone)]
pub(crate) struct ChildWatch {
    pub(crate) pid: Option<u32>,
    exit: watch::Receiver<Option<String>>,
    order: Arc<watch::Sender<Order>>,
    tail: Arc<StderrTail>,
}

impl ChildWatch {
    /// How the child ended (`exit status 1`, `killed by signal 9 (SIGKILL)`), once it has.
    pub(crate) fn exit(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// Waits at most `limit` for the child to end; its exit, if it did.
    pub(crate) async fn exited_within(&self, limit: Duration) -> Option<String> {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(limit, exit.wait_for(Option::is_some)).await;
        self.exit()
    }

    /// Ends the child's process group now (SIGKILL).
    pub(crate) fn kill(&self) {
        self.order
            .send_if_modified(|order| raise(order, Order::Kill));
    }

    /// The last lines of the child's stderr, secrets scrubbed; empty if it wrote none.
    pub(crate) fn stderr_tail(&self) -> Vec<String> {
        self.tail.lines()
    }

    /// What an error about this child should add: how it ended (or that it still runs) and the
    /// end of its stderr. `None` when there is nothing to say.
    pub(crate) fn words(&self) -> Option<String> {
        let tail = self.stderr_tail();
        let exit = self.exit();
        if exit.is_none() && tail.is_empty() {
            return None;
        }
        let mut words = match exit {
            Some(exit) => format!("the process ended with {exit}"),
            None => "the process is still running".to_owned(),
        };
        if !tail.is_empty() {
            words.push_str("; the end of its stderr:\n");
            words.push_str(&tail.join("\n"));
        }
        Some(words)
    }
}

/// The transport over a child's stdin and stdout. Closing it stops the child politely (see the
/// module docs); dropping it kills the child's group. rmcp reads the child's stdout through
/// [`ExpressStdout`] and writes through the session's [`Express`] lane (`transport::express`).
pub(crate) struct StdioChild {
    rw: AsyncRwTransport<RoleClient, ExpressStdout<ChildStdout>, Forward>,
    express: Arc<Express>,
    watch: ChildWatch,
}

impl StdioChild {
    pub(crate) fn watch(&self) -> ChildWatch {
        self.watch.clone()
    }

    /// The session's express lane for plain calls.
    pub(crate) fn express(&self) -> Arc<Express> {
        self.express.clone()
    }
}

impl Drop for StdioChild {
    fn drop(&mut self) {
        self.watch.kill();
    }
}

impl Transport<RoleClient> for StdioChild {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.express.clone().send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.rw.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // stdin EOF first: the MCP way to ask a stdio server to stop.
        self.express.close().await?;
        for order in [Order::Terminate, Order::Kill] {
            if self.watch.exited_within(STOP_GRACE).await.is_some() {
                return Ok(());
            }
            self.watch
                .order
                .send_if_modified(|current| raise(current, order));
        }
        self.watch.exited_within(STOP_GRACE).await;
        Ok(())
    }
}

/// Raises `current` to `to` (never lowers it); whether it changed.
fn raise(current: &mut Order, to: Order) -> bool {
    if *current < to {
        *current = to;
        true
    } else {
        false
    }
}

pub(crate) fn spawn(
    server: &ServerName,
    config: &config::StdioTransport,
) -> Result<StdioChild, UpstreamError> {
    let mut command = tokio::process::Command::new(&config.command);
    command.args(&config.args);
    let mut secrets = Vec::new();
    for (name, value) in &config.env {
        let secret = value.resolve().map_err(|e| UpstreamError::Secret {
            server: server.clone(),
            reason: e.to_string(),
        })?;
        command.env(name, secret.expose_secret());
        // Any configured value may be a secret; the stderr tail never repeats one.
        if secret.expose_secret().len() >= 4 {
            secrets.push(secret.expose_secret().to_owned());
        }
    }
    if let Some(cwd) = &config.cwd {
        command.current_dir(cwd);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(target_os = "linux")]
    die_with_gateway(&mut command);
    let mut wrapped = CommandWrap::from(command);
    wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
    let mut child = wrapped.spawn().map_err(|e| UpstreamError::Spawn {
        command: config.command.clone(),
        reason: match e.kind() {
            std::io::ErrorKind::NotFound => "command not found".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            _ => e.to_string(),
        },
    })?;
    let pid = child.id();
    let pipes_missing = || UpstreamError::Spawn {
        command: config.command.clone(),
        reason: "its standard input or output could not be opened".to_owned(),
    };
    let stdin = child.stdin().take().ok_or_else(pipes_missing)?;
    let stdout = child.stdout().take().ok_or_else(pipes_missing)?;
    let stderr = child.stderr().take();
    tracing::debug!(%server, pid, "started stdio upstream");
    let tail = Arc::new(StderrTail::new(secrets));
    // Dropped when the child's stderr has been read to its end (or was never piped).
    let (stderr_open, stderr_read) = oneshot::channel::<()>();
    if let Some(stderr) = stderr {
        let server = server.to_owned();
        let tail = tail.clone();
        tokio::spawn(async move {
            let _open = stderr_open;
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                cut(&mut line, MAX_STDERR_LINE);
                tail.push(&line);
                tracing::info!(target: "mcpgw::upstream::stderr", server = %server, "{line}");
            }
        });
    }
    let (exit_tx, exit) = watch::channel(None);
    let (order_tx, order) = watch::channel(Order::Run);
    tokio::spawn(watch_child(child, exit_tx, order, stderr_read));
    let express = Express::new(stdin);
    Ok(StdioChild {
        rw: AsyncRwTransport::new_client(
            ExpressStdout::new(stdout, express.clone()),
            Forward::new(express.clone()),
        ),
        express,
        watch: ChildWatch {
            pid,
            exit,
            order: Arc::new(order_tx),
            tail,
        },
    })
}

/// Makes the kernel send the child SIGKILL when the gateway dies without stopping it (killed
/// with SIGKILL, crashed, or stopped by a client that gave up waiting), so an upstream never
/// outlives the gateway that started it. A normal shutdown ends the group first, as above; this
/// covers the paths where no code of ours runs. It reaches only the direct child: a launcher's
/// grandchild (`npx` starting node) is not covered, but a launcher that dies closes the
/// grandchild's stdin, which most servers take as the end.
///
/// The signal follows the *thread* that spawned the child, not the process: children are
/// spawned from async tasks, on the runtime's worker threads (or the main thread under
/// `block_on`), which live as long as the gateway. Never spawn a stdio upstream from a
/// `spawn_blocking` thread: that thread ends when idle, and its children would be killed.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // `pre_exec` is unsafe; there is no safe way to run code between fork and exec
fn die_with_gateway(command: &mut tokio::process::Command) {
    let gateway = std::process::id();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: it makes two raw system calls (prctl, getppid), allocates nothing and
    // takes no lock (`last_os_error` and `from_raw_os_error` only wrap an errno).
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // The gateway died between fork and prctl: no signal will come, so do not start.
            if u32::try_from(libc::getppid()).ok() != Some(gateway) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Owns the child until it has ended and its group is gone: publishes the exit the moment the
/// direct child ends, carries out orders to end it, and ends the rest of its group (a
/// launcher's grandchild) when the direct child has gone.
async fn watch_child(
    mut child: Box<dyn ChildWrapper>,
    exit: watch::Sender<Option<String>>,
    mut order: watch::Receiver<Order>,
    stderr_read: oneshot::Receiver<()>,
) {
    let status = loop {
        // The direct child's own wait: the group's waits until every member has gone.
        tokio::select! {
            status = child.inner_mut().wait() => break status,
            changed = order.changed() => {
                // The transport is gone without a word (its sender dropped): end the group.
                let now = if changed.is_err() { Order::Kill } else { *order.borrow_and_update() };
                let signal = match now {
                    Order::Run => continue,
                    Order::Terminate => SIGTERM,
                    Order::Kill => SIGKILL,
                };
                if let Err(error) = child.signal(signal) {
                    tracing::debug!(%error, signal, "cannot signal a stdio upstream's group");
                }
                if changed.is_err() {
                    break child.inner_mut().wait().await;
                }
            }
        }
    };
    let words = match status {
        Ok(status) => describe(status),
        Err(error) => format!("an unknown status ({error})"),
    };
    // The exit is published once the last of stderr has been read, so whoever reads the exit
    // also reads the child's last words (a traceback is written just before the exit, and the
    // pipe can still hold it). A grandchild that keeps the pipe open does not hold this up long.
    let _ = tokio::time::timeout(STDERR_DRAIN, stderr_read).await;
    let _ = exit.send(Some(words));
    // Whatever else is left in the group goes with it; `wait` then reaps them all.
    let _ = child.signal(SIGKILL);
    let _ = child.wait().await;
}

/// `exit status 1`, `killed by signal 9 (SIGKILL)`.
fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(signal) => {
            let name = match signal {
                1 => " (SIGHUP)",
                2 => " (SIGINT)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("killed by signal {signal}{name}")
        }
        None => status.to_string(),
    }
}

/// Truncates `line` to at most `limit` bytes, on a character boundary.
fn cut(line: &mut String, limit: usize) {
    if line.len() > limit {
        let mut end = limit;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
    }
}

/// The last [`TAIL_LINES`] lines (at most [`TAIL_BYTES`]) of a child's stderr, scrubbed.
///
/// Scrubbed here rather than with `store::scrub_error`: upstream does not depend on the store,
/// and a traceback needs its lines kept apart. The configured environment values are known
/// exactly and removed wherever they appear; besides, the value after `Bearer` or after a
/// `token=`/`key:`-style name, and long runs of key-like characters, are replaced.
struct StderrTail {
    secrets: Vec<String>,
    lines: Mutex<VecDeque<String>>,
}

impl StderrTail {
    fn new(secrets: Vec<String>) -> Self {
        Self {
            secrets,
            lines: Mutex::new(VecDeque::new()),
        }
    }

    fn push(&self, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let line = scrub(line, &self.secrets);
        let mut lines = crate::lock(&self.lines);
        lines.push_back(line);
        while lines.len() > TAIL_LINES
            || (lines.len() > 1 && lines.iter().map(String::len).sum::<usize>() > TAIL_BYTES)
        {
            lines.pop_front();
        }
        if let Some(only) = lines.front_mut() {
            cut(only, TAIL_BYTES);
        }
    }

    fn lines(&self) -> Vec<String> {
        crate::lock(&self.lines).iter().cloned().collect()
    }
}

const REDACTED: &str = "[redacted]";

/// One stderr line with secrets replaced by `[redacted]`.
fn scrub(line: &str, secrets: &[String]) -> String {
    let mut line = line.to_owned();
    for secret in secrets {
        if line.contains(secret.as_str()) {
            line = line.replace(secret.as_str(), REDACTED);
        }
    }
    let mut out = Vec::new();
    let mut after_bearer = false;
    for word in line.split(' ') {
        let scrubbed = if after_bearer && !word.is_empty() {
            REDACTED.to_owned()
        } else if let Some((name, value)) = word.split_once(['=', ':'])
            && names_a_secret(name)
            && !value.is_empty()
        {
            format!("{}{REDACTED}", &word[..=name.len()])
        } else if looks_like_a_key(word) {
            REDACTED.to_owned()
        } else {
            word.to_owned()
        };
        after_bearer = word.eq_ignore_ascii_case("bearer");
        out.push(scrubbed);
    }
    out.join(" ")
}

fn names_a_secret(name: &str) -> bool {
    let name = name
        .trim_start_matches(['-', '"', '\''])
        .to_ascii_lowercase();
    [
        "token",
        "secret",
        "password",
        "passwd",
        "apikey",
        "api_key",
        "api-key",
        "key",
        "authorization",
        "credential",
    ]
    .iter()
    .any(|secret| name.ends_with(secret))
}

/// A run of at least 32 key-like characters mixing letters and digits (an API key, a token).
fn looks_like_a_key(word: &str) -> bool {
    let word = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    word.len() >= 32
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && word.chars().any(|c| c.is_ascii_digit())
        && word.chars().any(|c| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, secrets: &[&str], expect: &str) {
        let secrets: Vec<String> = secrets.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(scrub(line, &secrets), expect, "{line}");
    }

    #[test]
    fn stderr_lines_lose_their_secrets_and_keep_their_words() {
        check(
            "ModuleNotFoundError: No module named 'nope'",
            &[],
            "ModuleNotFoundError: No module named 'nope'",
        );
        check(
            "using s3cr3t-value for GITHUB",
            &["s3cr3t-value"],
            "using [redacted] for GITHUB",
        );
        check(
            "Authorization: Bearer abc.def",
            &[],
            "Authorization: Bearer [redacted]",
        );
        check("token=abc123 ok", &[], "token=[redacted] ok");
        check(
            "key ghp_0123456789abcdefghijABCDEFGHIJ0123 leaked",
            &[],
            "key [redacted] leaked",
        );
    }

    #[test]
    fn the_tail_keeps_the_last_lines_within_its_bounds() {
        let tail = StderrTail::new(Vec::new());
        for i in 0..100 {
            tail.push(&format!("line {i}"));
        }
        let lines = tail.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().map(String::as_str), Some("line 99"));
        let long = "x".repeat(3000);
        tail.push(&long);
        tail.push(&long);
        let lines = tail.lines();
        assert_eq!(lines.len(), 1, "only the newest long line fits");
        assert!(lines.iter().map(String::len).sum::<usize>() <= TAIL_BYTES);
    }
}

#[cfg(test)]
mod child_tests {
    use super::*;

    /// A child that fills the pipe with its last words (up to 64 KiB wait there) and exits at once: whoever reads its exit reads them
    /// too, every time (the exit used to be published before the stderr pipe was drained).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_exit_is_known_only_with_the_last_of_stderr() {
        let server = ServerName::parse("crashing").expect("name");
        let config = config::StdioTransport {
            command: "sh".to_owned(),
            args: vec![
                "-c".to_owned(),
                "seq 1 9000 >&2; echo 'last words' >&2; exit 3".to_owned(),
            ],
            env: Default::default(),
            cwd: None,
        };
        for _ in 0..20 {
            let child = spawn(&server, &config).expect("spawn");
            let watch = child.watch();
            let exit = watch.exited_within(Duration::from_secs(10)).await;
            assert_eq!(exit.as_deref(), Some("exit status 3"));
            let words = watch.words().expect("words");
            assert!(words.ends_with("9000\nlast words"), "{words}");
        }
    }
}
