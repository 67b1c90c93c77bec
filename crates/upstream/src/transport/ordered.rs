//! A call's notifications before its result.
//!
//! rmcp hands each notification to the client handler in a task of its own, but delivers a
//! response to the waiting request directly. A log message or progress notification that a
//! server sends just before its result can therefore reach the handler after the caller
//! already holds the result, and be dropped as belonging to no call.
//!
//! [`Counted`] wraps a session's transport and counts the notifications the handler routes to
//! calls (progress and log messages) as they are received, in wire order. The handler marks
//! each one [`Backlog::handled`] when it is done with it. A call that got its response waits,
//! through [`Backlog::settle`], until every such notification received before the response
//! has been handled. The wait is bounded ([`SETTLE_LIMIT`]): a slow client must not hold a
//! result back for long.
//!
//! rmcp's task per notification also lets two notifications overtake each other: a server's
//! "info" then "warning" log could reach the caller as "warning", "info". [`Counted`] therefore
//! stamps each counted notification with its [`Turn`] (how many were received before it), and
//! the handler waits, through [`Backlog::settle`] with that turn, until every earlier one has
//! been handled before it handles its own: wire order, bounded by the same limit.
//!
//! Invariant: `handled <= received` for notifications that reach the handler; notifications
//! rmcp routes elsewhere (to a `subscriptions/listen` stream, by `_meta` subscription id) are
//! not counted.

use std::{
    borrow::Cow,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{GetExtensions, GetMeta, JsonRpcMessage, ServerNotification},
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use tokio::sync::Notify;

/// A counted notification's place in wire order among a server's notifications for calls:
/// how many were received before it. In the handler's `NotificationContext::extensions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Turn(pub(crate) u64);

/// The longest a result waits for the notifications received before it.
pub(crate) const SETTLE_LIMIT: Duration = Duration::from_secs(1);

/// Notifications for calls, received and handled, on one server's sessions.
#[derive(Default)]
pub(crate) struct Backlog {
    received: AtomicU64,
    handled: AtomicU64,
    progress: Notify,
}

impl Backlog {
    /// How many notifications for calls have been received so far.
    pub(crate) fn received(&self) -> u64 {
        self.received.load(Ordering::Acquire)
    }

    /// The handler is done with one notification counted by [`Counted`].
    pub(crate) fn handled(&self) {
        self.handled.fetch_add(1, Ordering::AcqRel);
        self.progress.notify_waiters();
    }

    /// Waits until the first `received` notifications have been handled, for at most
    /// [`SETTLE_LIMIT`].
    pub(crate) async fn settle(&self, received: u64) {
        // The usual case on the call path: nothing outstanding, no timer to set up.
        if self.handled.load(Ordering::Acquire) >= received {
            return;
        }
        let caught_up = async {
            loop {
                let notified = self.progress.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.handled.load(Ordering::Acquire) >= received {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(SETTLE_LIMIT, caught_up).await.is_err() {
            tracing::debug!(
                received,
                handled = self.handled.load(Ordering::Acquire),
                "notifications still being handled when a result was passed on"
            );
        }
    }

    /// Counts `message` if it is a notification for a call, and stamps it with its [`Turn`].
    fn count(&self, message: &mut RxJsonRpcMessage<RoleClient>) {
        if let JsonRpcMessage::Notification(notification) = message
            && for_a_call(&notification.notification)
        {
            let turn = self.received.fetch_add(1, Ordering::AcqRel);
            notification
                .notification
                .extensions_mut()
                .insert(Turn(turn));
        }
    }
}

/// Whether rmcp passes `notification` to the handler's progress or log-message method.
fn for_a_call(notification: &ServerNotification) -> bool {
    matches!(
        notification,
        ServerNotification::ProgressNotification(_)
            | ServerNotification::LoggingMessageNotification(_)
    ) && notification.get_meta().subscription_id().is_none()
}

/// A transport that counts, into a [`Backlog`], the notifications it receives for calls.
pub(crate) struct Counted<T> {
    inner: T,
    backlog: Arc<Backlog>,
}

impl<T> Counted<T> {
    pub(crate) fn new(inner: T, backlog: Arc<Backlog>) -> Self {
        Self { inner, backlog }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Counted<T> {
    type Error = T::Error;

    fn name() -> Cow<'static, str> {
        T::name()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let mut message = self.inner.receive().await?;
        self.backlog.count(&mut message);
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settle_waits_for_the_notifications_received_before() {
        let backlog = Arc::new(Backlog::default());
        backlog.received.store(2, Ordering::Release);
        let mark = backlog.received();
        let worker = {
            let backlog = backlog.clone();
            tokio::spawn(async move {
                for _ in 0..2 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    backlog.handled();
                }
            })
        };
        backlog.settle(mark).await;
        assert_eq!(backlog.handled.load(Ordering::Acquire), 2);
        worker.await.expect("worker");
    }

    // Log messages are deprecated in rmcp (SEP-2577) but still relayed for older clients.
    #[allow(deprecated)]
    #[test]
    fn each_notification_for_a_call_is_stamped_with_its_turn_in_wire_order() {
        use rmcp::model::{
            LoggingLevel, LoggingMessageNotification, LoggingMessageNotificationParam,
            ToolListChangedNotification,
        };
        let backlog = Backlog::default();
        let log = || {
            JsonRpcMessage::notification(ServerNotification::LoggingMessageNotification(
                LoggingMessageNotification::new(LoggingMessageNotificationParam::new(
                    LoggingLevel::Info,
                    "note".into(),
                )),
            ))
        };
        let turn = |message: &RxJsonRpcMessage<RoleClient>| match message {
            JsonRpcMessage::Notification(n) => n.notification.extensions().get::<Turn>().copied(),
            _ => None,
        };
        let (mut first, mut second) = (log(), log());
        let mut other = JsonRpcMessage::notification(
            ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default()),
        );
        backlog.count(&mut first);
        backlog.count(&mut other);
        backlog.count(&mut second);
        assert_eq!(turn(&first), Some(Turn(0)));
        assert_eq!(turn(&second), Some(Turn(1)));
        // Not for a call: neither counted nor stamped.
        assert_eq!(turn(&other), None);
        assert_eq!(backlog.received(), 2);
    }

    #[tokio::test]
    async fn settle_gives_up_after_its_limit() {
        let backlog = Backlog::default();
        backlog.received.store(1, Ordering::Release);
        let started = std::time::Instant::now();
        backlog.settle(1).await;
        assert!(started.elapsed() >= SETTLE_LIMIT);
    }
}
