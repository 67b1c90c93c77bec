//! The audit log's writer: records queue on a bounded channel and one task writes them, as
//! many per transaction as have queued while the previous batch was written.
//!
//! A call only ever `try_send`s its record: it never waits for the database. A record that
//! finds the writer idle is written at once; while records keep coming (the last write was
//! under [`LINGER`] ago), the writer gathers them until [`LINGER`] after its last write (up to
//! [`BATCH_ROWS`]), so the database sees a few multi-row statements a second instead of one
//! transaction per call (each a round trip to sqlx's SQLite thread). When the queue is full ([`QUEUE_RECORDS`] waiting: the database is stalled or far
//! slower than the calls), a record is dropped and counted; the count is logged at warn (at most
//! every [`DROP_WARN_EVERY`]) and shown by `/healthz`. A batch the store refuses (the database
//! is down) is logged and held, and written again with backoff until the database takes it
//! ([`write`]); records held past [`HOLD_RECORDS`] are dropped and counted.
//!
//! [`AuditLog::flush`] waits until every record queued before it is written (shutdown, tests).

use std::collections::VecDeque;
use std::sync::{
    Mutex,
    atomic::{AtomicU64, Ordering},
};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

/// Records waiting at most; past this a record is dropped and counted.
pub const QUEUE_RECORDS: usize = 8_192;

/// Records written by one transaction at most.
pub const BATCH_ROWS: usize = 512;

/// Under a steady stream of calls, the records of this long are written together.
pub const LINGER: Duration = Duration::from_millis(50);

/// Records held for a database that refuses them, at most.
pub const HOLD_RECORDS: usize = 4 * QUEUE_RECORDS;

/// The first retry of held records comes this long after the failure ...
pub const RETRY_FIRST: Duration = Duration::from_millis(250);
/// ... and the wait doubles up to this.
pub const RETRY_MOST: Duration = Duration::from_secs(5);

/// Shortest time between two warnings about dropped records.
pub const DROP_WARN_EVERY: Duration = Duration::from_secs(10);

enum Message {
    Record(store::AuditEntry),
    /// Answered once every record queued before it is written (or failed).
    Flush(oneshot::Sender<()>),
}

/// The audit log as calls see it: a queue in front of the store, and its counters.
pub struct AuditLog {
    /// The writer's queue; `None` without a store.
    queue: Option<mpsc::Sender<Message>>,
    counters: std::sync::Arc<Counters>,
    /// When dropped records were last reported.
    last_drop_warning: Mutex<Option<Instant>>,
}

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    held: AtomicU64,
}

/// What `/healthz` shows of the audit log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditHealth {
    /// Records waiting to be written.
    pub queued: usize,
    /// Records written since start.
    pub written: u64,
    /// Records dropped because the queue was full, or too many were held.
    pub dropped: u64,
    /// Records lost: still held (the database refusing them) when the gateway stopped, or
    /// refused because it was stopping.
    pub failed: u64,
    /// Records the database refused, held to be written again when it is back.
    pub held: u64,
}

impl AuditLog {
    /// A log writing to `store`, whose writer starts now on the current runtime; without a
    /// store, records only reach the debug log.
    pub fn new(store: Option<store::Store>) -> AuditLog {
        let counters = std::sync::Arc::<Counters>::default();
        let queue = store.map(|store| {
            let (queue, records) = mpsc::channel(QUEUE_RECORDS);
            tokio::spawn(write(store, records, counters.clone()));
            queue
        });
        AuditLog {
            queue,
            counters,
            last_drop_warning: Mutex::new(None),
        }
    }

    /// Queues `entry` without waiting; drops and counts it when the queue is full.
    pub fn record(&self, entry: store::AuditEntry) {
        let Some(queue) = &self.queue else {
            return;
        };
        match queue.try_send(Message::Record(entry)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.dropped(),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                // The writer is gone (the runtime is shutting down).
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits until every record queued so far is written or has failed.
    pub async fn flush(&self) {
        let Some(queue) = &self.queue else {
            return;
        };
        let (done, written) = oneshot::channel();
        if queue.send(Message::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// The counters and the queue's length now.
    pub fn health(&self) -> AuditHealth {
        AuditHealth {
            queued: self
                .queue
                .as_ref()
                .map_or(0, |queue| queue.max_capacity() - queue.capacity()),
            written: self.counters.written.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            held: self.counters.held.load(Ordering::Relaxed),
        }
    }

    fn dropped(&self) {
        let total = self.counters.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let mut last = self
            .last_drop_warning
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if last.is_none_or(|at| now.duration_since(at) >= DROP_WARN_EVERY) {
            *last = Some(now);
            tracing::warn!(
                dropped = total,
                queue = QUEUE_RECORDS,
                "audit records dropped: the database does not keep up with the calls"
            );
        }
    }
}

/// The writer: takes what has queued (up to [`BATCH_ROWS`]), writes it in one transaction,
/// answers the flushes that were queued behind it, and repeats until the log is dropped.
///
/// A batch the store refuses (the database is down or unreachable) is held and written again,
/// oldest first, after [`RETRY_FIRST`], doubling up to [`RETRY_MOST`], until it goes in: records
/// of an outage reach the database when it is back. At most [`HOLD_RECORDS`] are held; past
/// that the oldest are dropped and counted (`dropped`), and what is still held when the
/// gateway stops is counted as `failed`. Both, and how many are held, are in `/healthz`.
async fn write(
    store: store::Store,
    mut queue: mpsc::Receiver<Message>,
    counters: std::sync::Arc<Counters>,
) {
    let mut messages = Vec::with_capacity(BATCH_ROWS);
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    let mut flushes = Vec::new();
    let mut held: VecDeque<store::AuditEntry> = VecDeque::new();
    let mut retry = RETRY_FIRST;
    let mut last_write: Option<tokio::time::Instant> = None;
    let sort = |messages: &mut Vec<Message>,
                batch: &mut Vec<store::AuditEntry>,
                flushes: &mut Vec<oneshot::Sender<()>>| {
        for message in messages.drain(..) {
            match message {
                Message::Record(entry) => batch.push(entry),
                Message::Flush(done) => flushes.push(done),
            }
        }
    };
    loop {
        // With records held, wake up to retry them even when no call comes.
        let received = if held.is_empty() {
            Some(queue.recv_many(&mut messages, BATCH_ROWS).await)
        } else {
            tokio::time::timeout(retry, queue.recv_many(&mut messages, BATCH_ROWS))
                .await
                .ok()
        };
        if received == Some(0) {
            break;
        }
        sort(&mut messages, &mut batch, &mut flushes);
        // Busy (the last write was under LINGER ago): gather what comes until LINGER after it,
        // so a steady stream of calls costs the database a few writes a second, not one per
        // call. A lone call, a flush or a full batch is written at once.
        if let Some(until) = last_write.map(|at| at + LINGER)
            && received.is_some()
        {
            while flushes.is_empty() && batch.len() < BATCH_ROWS {
                let room = BATCH_ROWS - batch.len();
                match tokio::time::timeout_at(until, queue.recv_many(&mut messages, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => sort(&mut messages, &mut batch, &mut flushes),
                }
            }
        }
        if !held.is_empty() {
            // Held records go first, so the log keeps its order.
            held.extend(batch.drain(..));
            let was = held.len();
            while !held.is_empty() {
                let rows = held.len().min(BATCH_ROWS);
                let chunk: Vec<_> = held.iter().take(rows).cloned().collect();
                if store.record_calls(&chunk).await.is_err() {
                    break;
                }
                held.drain(..rows);
                counters.written.fetch_add(rows as u64, Ordering::Relaxed);
            }
            if held.is_empty() {
                tracing::info!(
                    records = was,
                    "audit records held while the database was unreachable are written"
                );
                retry = RETRY_FIRST;
            } else {
                retry = (retry * 2).min(RETRY_MOST);
                tracing::debug!(
                    held = held.len(),
                    "the database still refuses audit records"
                );
            }
            last_write = Some(tokio::time::Instant::now());
        } else if !batch.is_empty() {
            let rows = batch.len() as u64;
            match store.record_calls(&batch).await {
                Ok(()) => {
                    counters.written.fetch_add(rows, Ordering::Relaxed);
                    batch.clear();
                }
                Err(error) => {
                    tracing::warn!(%error, records = rows, "cannot write audit records: holding them to write when the database is back");
                    held.extend(batch.drain(..));
                    retry = RETRY_FIRST;
                }
            }
            last_write = Some(tokio::time::Instant::now());
        }
        if held.len() > HOLD_RECORDS {
            let excess = held.len() - HOLD_RECORDS;
            held.drain(..excess);
            counters.dropped.fetch_add(excess as u64, Ordering::Relaxed);
            tracing::warn!(
                dropped = excess,
                held = HOLD_RECORDS,
                "audit records dropped: the database has been unreachable too long"
            );
        }
        counters.held.store(held.len() as u64, Ordering::Relaxed);
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
    if !held.is_empty() {
        counters
            .failed
            .fetch_add(held.len() as u64, Ordering::Relaxed);
        counters.held.store(0, Ordering::Relaxed);
        tracing::warn!(
            records = held.len(),
            "audit records lost: the database was still unreachable when the gateway stopped"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn entry(tool: &str) -> store::AuditEntry {
        store::AuditEntry {
            at: SystemTime::now(),
            principal: "local".into(),
            server: "s".into(),
            tool: tool.into(),
            arguments_sha256: "0".repeat(64),
            decision: store::CallDecision::Allowed,
            outcome: store::CallOutcome::Ok,
            latency: Duration::from_millis(1),
            error: None,
        }
    }

    async fn store() -> (tempfile::TempDir, store::Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = store::Store::open(&dir.path().join("mcpgw.db"))
            .await
            .expect("store opens");
        (dir, store)
    }

    async fn rows(store: &store::Store) -> Vec<store::AuditEntry> {
        store
            .audit_entries(&store::AuditQuery {
                limit: 100_000,
                ..Default::default()
            })
            .await
            .expect("audit reads")
    }

    #[tokio::test]
    async fn every_queued_record_is_written_by_the_flush() {
        let (_dir, store) = store().await;
        let log = AuditLog::new(Some(store.clone()));
        for i in 0..2_000 {
            log.record(entry(&format!("s__t{i}")));
        }
        log.flush().await;
        let written = rows(&store).await;
        assert_eq!(written.len(), 2_000);
        let health = log.health();
        assert_eq!(
            (health.queued, health.written, health.dropped, health.failed),
            (0, 2_000, 0, 0)
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let (_dir, store) = store().await;
        let log = AuditLog::new(Some(store.clone()));
        // On a current-thread runtime the writer cannot run while this loop does: the queue
        // fills and the rest are dropped, and `record` never blocks.
        let extra = 100;
        for i in 0..QUEUE_RECORDS + extra {
            log.record(entry(&format!("s__t{i}")));
        }
        let health = log.health();
        assert_eq!(health.queued, QUEUE_RECORDS);
        assert_eq!(health.dropped, extra as u64);
        log.flush().await;
        assert_eq!(rows(&store).await.len(), QUEUE_RECORDS);
        assert_eq!(log.health().written, QUEUE_RECORDS as u64);
    }

    #[tokio::test]
    async fn a_refused_batch_is_held_and_counted_lost_if_the_store_never_returns() {
        let (_dir, store) = store().await;
        let log = AuditLog::new(Some(store.clone()));
        log.record(entry("s__before"));
        log.flush().await;
        store.close().await;
        log.record(entry("s__after_close"));
        log.flush().await;
        let health = log.health();
        assert_eq!((health.written, health.held, health.failed), (1, 1, 0));
        // Retried meanwhile, still refused: still held.
        tokio::time::sleep(RETRY_FIRST * 3).await;
        assert_eq!(log.health().held, 1);
        drop(log);
    }

    #[tokio::test]
    async fn without_a_store_nothing_is_queued() {
        let log = AuditLog::new(None);
        log.record(entry("s__t"));
        log.flush().await;
        assert_eq!(log.health(), AuditHealth::default());
    }
}
