//! The audit log's writer: records queue on a bounded channel and one task writes them, as
//! many per transaction as have queued while the previous batch was written.
//!
//! A call only ever `try_send`s its record: it never waits for the database. A record that
//! finds the writer idle is written at once; while records keep coming (the last write was
//! under [`LINGER`] ago), the writer gathers them until [`LINGER`] after its last write (up to
//! [`BATCH_ROWS`]), so the database sees a few multi-row statements a second instead of one
//! transaction per call (each a round trip to sqlx's SQLite thread). When the queue is full ([`QUEUE_RECORDS`] waiting: the database is stalled or far
//! slower than the calls), a record is dropped and counted; the count is logged at warn (at most
//! every [`DROP_WARN_EVERY`]) and shown by `/healthz`. A batch the store refuses is logged and
//! counted as failed; the writer goes on with the next.
//!
//! [`AuditLog::flush`] waits until every record queued before it is written (shutdown, tests).

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
}

/// What `/healthz` shows of the audit log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditHealth {
    /// Records waiting to be written.
    pub queued: usize,
    /// Records written since start.
    pub written: u64,
    /// Records dropped because the queue was full.
    pub dropped: u64,
    /// Records the store refused.
    pub failed: u64,
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
async fn write(
    store: store::Store,
    mut queue: mpsc::Receiver<Message>,
    counters: std::sync::Arc<Counters>,
) {
    let mut messages = Vec::with_capacity(BATCH_ROWS);
    let mut batch = Vec::with_capacity(BATCH_ROWS);
    let mut flushes = Vec::new();
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
    while queue.recv_many(&mut messages, BATCH_ROWS).await > 0 {
        sort(&mut messages, &mut batch, &mut flushes);
        // Busy (the last write was under LINGER ago): gather what comes until LINGER after it,
        // so a steady stream of calls costs the database a few writes a second, not one per
        // call. A lone call, a flush or a full batch is written at once.
        if let Some(until) = last_write.map(|at| at + LINGER) {
            while flushes.is_empty() && batch.len() < BATCH_ROWS {
                let room = BATCH_ROWS - batch.len();
                match tokio::time::timeout_at(until, queue.recv_many(&mut messages, room)).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => sort(&mut messages, &mut batch, &mut flushes),
                }
            }
        }
        if !batch.is_empty() {
            let rows = batch.len() as u64;
            match store.record_calls(&batch).await {
                Ok(()) => {
                    counters.written.fetch_add(rows, Ordering::Relaxed);
                }
                Err(error) => {
                    counters.failed.fetch_add(rows, Ordering::Relaxed);
                    tracing::warn!(%error, records = rows, "cannot write audit records");
                }
            }
            batch.clear();
            last_write = Some(tokio::time::Instant::now());
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
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
    async fn a_failing_store_counts_the_batch_as_failed_and_the_writer_goes_on() {
        let (_dir, store) = store().await;
        let log = AuditLog::new(Some(store.clone()));
        log.record(entry("s__before"));
        log.flush().await;
        store.close().await;
        log.record(entry("s__after_close"));
        log.flush().await;
        let health = log.health();
        assert_eq!((health.written, health.failed), (1, 1));
    }

    #[tokio::test]
    async fn without_a_store_nothing_is_queued() {
        let log = AuditLog::new(None);
        log.record(entry("s__t"));
        log.flush().await;
        assert_eq!(log.health(), AuditHealth::default());
    }
}
