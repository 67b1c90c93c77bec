//! Resource subscriptions on one server.
//!
//! However many clients want a resource, the server is asked once: [`Server::subscribe_resource`]
//! counts subscribers per URI and only the first reaches the server, as `resources/subscribe` on
//! a legacy session or as a `subscriptions/listen` stream naming the resource on 2026-07-28; the
//! last [`Server::unsubscribe_resource`] ends it (`resources/unsubscribe`, or cancelling the
//! stream). A new session, after a reconnect, is subscribed again to every resource still
//! wanted. What the server then says arrives as [`crate::ResourceUpdated`] through
//! [`crate::Upstreams::resource_updates`].
//!
//! Invariants: a URI is in `wanted` with a count of at least 1 exactly while someone holds a
//! subscription to it; `streams` holds the listen stream of a wanted URI on the current
//! 2026-07-28 session, and nothing for a legacy one.

// resources/subscribe and resources/unsubscribe are legacy-only in rmcp, which is the era they
// are used for here.
#![allow(deprecated)]

use std::{collections::HashMap, sync::Arc};

use rmcp::{
    model::{
        ErrorCode, ServerNotification, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams,
    },
    service::Subscription,
};
use tokio_util::sync::CancellationToken;

use super::{Server, lock};
use crate::{
    UpstreamError,
    connect::{self, Session, UpstreamClient},
};

#[derive(Default)]
pub(super) struct Subscriptions {
    /// Subscribers per URI (the server's own URI).
    wanted: HashMap<String, usize>,
    /// On a 2026-07-28 session: the listen stream of each wanted URI.
    streams: HashMap<String, CancellationToken>,
}

impl Server {
    /// One more subscriber to the resource `uri`; the server is asked when it is the first.
    /// Fails, counting nothing, when the server did not declare `resources.subscribe` or
    /// refused.
    pub async fn subscribe_resource(&self, uri: &str) -> Result<(), UpstreamError> {
        let first = {
            let mut subscriptions = lock(&self.subscriptions);
            let count = subscriptions.wanted.entry(uri.to_owned()).or_insert(0);
            *count += 1;
            *count == 1
        };
        if !first {
            return Ok(());
        }
        let asked = self.ask_to_subscribe(uri).await;
        if asked.is_err() {
            let mut subscriptions = lock(&self.subscriptions);
            if let Some(count) = subscriptions.wanted.get_mut(uri) {
                *count -= 1;
                if *count == 0 {
                    subscriptions.wanted.remove(uri);
                }
            }
        }
        asked
    }

    /// One subscriber fewer to the resource `uri`; the server is told when it was the last.
    /// Unknown URIs are ignored.
    pub async fn unsubscribe_resource(&self, uri: &str) {
        let stream = {
            let mut subscriptions = lock(&self.subscriptions);
            let Some(count) = subscriptions.wanted.get_mut(uri) else {
                return;
            };
            *count -= 1;
            if *count > 0 {
                return;
            }
            subscriptions.wanted.remove(uri);
            subscriptions.streams.remove(uri)
        };
        if let Some(stream) = stream {
            stream.cancel();
            return;
        }
        let session = lock(&self.live).as_ref().map(|live| live.session.clone());
        if let Some(session) = session
            && !session.is_closed()
            && let Err(error) = session
                .peer()
                .unsubscribe(UnsubscribeRequestParams::new(uri))
                .await
        {
            tracing::debug!(server = %self.name(), %uri, %error, "resources/unsubscribe failed");
        }
    }

    /// How many resources are subscribed to now.
    pub fn subscription_count(&self) -> usize {
        lock(&self.subscriptions).wanted.len()
    }

    async fn ask_to_subscribe(&self, uri: &str) -> Result<(), UpstreamError> {
        let session = self.session().await?;
        let declared = session.peer().peer_info().is_some_and(|info| {
            info.capabilities
                .resources
                .as_ref()
                .and_then(|resources| resources.subscribe)
                == Some(true)
        });
        if !declared {
            return Err(UpstreamError::Rpc {
                server: self.name().to_owned(),
                code: ErrorCode::METHOD_NOT_FOUND.0,
                message: "the server does not support resource subscriptions".to_owned(),
                data: None,
            });
        }
        if connect::is_modern(&session) {
            let subscription = session
                .peer()
                .listen(filter(uri))
                .await
                .map_err(|error| self.classify(error))?;
            let stream = CancellationToken::new();
            lock(&self.subscriptions)
                .streams
                .insert(uri.to_owned(), stream.clone());
            tokio::spawn(forward(subscription, self.handler.clone(), stream));
            Ok(())
        } else {
            session
                .peer()
                .subscribe(SubscribeRequestParams::new(uri))
                .await
                .map_err(|error| self.classify(error))
        }
    }

    /// Subscribes the new `session` to every resource still wanted (in the background: a
    /// connect does not wait for it).
    pub(super) fn resubscribe(&self, session: &Arc<Session>) {
        let mut subscriptions = lock(&self.subscriptions);
        for (_, stream) in subscriptions.streams.drain() {
            stream.cancel();
        }
        if subscriptions.wanted.is_empty() {
            return;
        }
        let uris: Vec<String> = subscriptions.wanted.keys().cloned().collect();
        let modern = connect::is_modern(session);
        for uri in uris {
            let session = session.clone();
            let handler = self.handler.clone();
            let server = self.name().to_owned();
            if modern {
                let stream = CancellationToken::new();
                subscriptions.streams.insert(uri.clone(), stream.clone());
                tokio::spawn(async move {
                    match session.peer().listen(filter(&uri)).await {
                        Ok(subscription) => forward(subscription, handler, stream).await,
                        Err(error) => {
                            tracing::warn!(%server, %uri, %error, "could not subscribe again to a resource");
                        }
                    }
                });
            } else {
                tokio::spawn(async move {
                    if let Err(error) = session
                        .peer()
                        .subscribe(SubscribeRequestParams::new(uri.as_str()))
                        .await
                    {
                        tracing::warn!(%server, %uri, %error, "could not subscribe again to a resource");
                    }
                });
            }
        }
    }
}

fn filter(uri: &str) -> SubscriptionFilter {
    let mut filter = SubscriptionFilter::default();
    filter.resource_subscriptions = Some(vec![uri.to_owned()]);
    filter
}

/// Passes a listen stream's resource updates on until `stream` is cancelled or the stream ends.
async fn forward(
    mut subscription: Subscription,
    handler: UpstreamClient,
    stream: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stream.cancelled() => {
                let _ = subscription.cancel().await;
                return;
            }
            next = subscription.next() => match next {
                Ok(Some(ServerNotification::ResourceUpdatedNotification(updated))) => {
                    handler.updated(updated.params.uri);
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(error) => {
                    tracing::debug!(%error, "resource subscription ended");
                    return;
                }
            },
        }
    }
}
