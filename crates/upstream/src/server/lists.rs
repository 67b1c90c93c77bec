//! A server's resources, resource templates and prompts: its last good lists, and the
//! read-only requests about them (`resources/read`, `prompts/get`, `completion/complete`).
//!
//! Lists are fetched only when the server declared the capability (`resources`, `prompts`), every
//! page, at most [`MAX_PAGES`] per list, stopping at a cursor seen before. The three are fetched
//! at once, each on its own: one that fails keeps its last good version and does not hold back
//! the others.
//! Items are kept as the JSON the server sent, like tools; the gateway reads what it needs.
//!
//! All of these requests only read, so a request that meets a lost session is sent again on a
//! new one (once), and each is bounded by the server's timeout like every other request.

use std::{collections::HashSet, future::Future, sync::Arc, time::Instant};

use rmcp::{
    model::{
        CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResponse,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
        ServerCapabilities,
    },
    service::ServiceError,
};
use serde::Serialize;
use serde_json::Value;

use super::{Server, lock};
use crate::{TraceContext, UpstreamError, connect::Session};

/// Most pages fetched for one list (see [`super::MAX_TOOL_PAGES`] for why there is a bound).
const MAX_PAGES: usize = 100;

/// A server's resources, resource templates and prompts, each as the server sent it. A list the
/// server did not declare the capability for is empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lists {
    pub resources: Vec<Value>,
    pub resource_templates: Vec<Value>,
    pub prompts: Vec<Value>,
}

/// One of the three lists.
#[derive(Clone, Copy, Debug)]
enum Which {
    Resources,
    Templates,
    Prompts,
}

impl Server {
    /// The last good lists, kept while the server is down so listing keeps working. `None`
    /// until they were first fetched.
    pub fn lists(&self) -> Option<Arc<Lists>> {
        lock(&self.lists).as_ref().map(|(_, lists)| lists.clone())
    }

    /// [`Server::lists`] with the time they were fetched.
    pub(crate) fn lists_fetched(&self) -> Option<(Instant, Arc<Lists>)> {
        lock(&self.lists).clone()
    }

    #[cfg(test)]
    pub(crate) fn set_lists_for_test(&self, lists: Lists) {
        *lock(&self.lists) = Some((Instant::now(), Arc::new(lists)));
    }

    /// Connects if needed and fetches the resource, template and prompt lists (those the server
    /// declared). A list that fails keeps its last good version; the first failure is returned
    /// after the others were tried and what did arrive is kept.
    pub async fn refresh_lists(&self) -> Result<Arc<Lists>, UpstreamError> {
        // The three at once: a server slow to list costs one timeout, not three.
        let fetch_one = |which| async move {
            let fetched = self
                .with_session(true, |session| async move { fetch(&session, which).await })
                .await;
            (which, fetched)
        };
        let fetched = futures::future::join_all(
            [Which::Resources, Which::Templates, Which::Prompts].map(fetch_one),
        )
        .await;
        let mut lists = self.lists().map(|l| l.as_ref().clone()).unwrap_or_default();
        let mut failure = None;
        for (which, fetched) in fetched {
            match (fetched, which) {
                (Ok(items), Which::Resources) => lists.resources = items,
                (Ok(items), Which::Templates) => lists.resource_templates = items,
                (Ok(items), Which::Prompts) => lists.prompts = items,
                (Err(error), _) => {
                    tracing::warn!(server = %self.name(), list = ?which, %error, "listing failed; keeping the last good list");
                    failure.get_or_insert(error);
                }
            }
        }
        let lists = Arc::new(lists);
        *lock(&self.lists) = Some((Instant::now(), lists.clone()));
        match failure {
            Some(error) => Err(error),
            None => Ok(lists),
        }
    }

    /// `resources/read`, as the caller wrote it but for its `_meta` (this session's own is
    /// sent, with `trace`, the caller's span for it, if any). An `input_required` answer is
    /// returned as it is, for the caller to relay.
    pub async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        trace: Option<&TraceContext>,
    ) -> Result<ReadResourceResponse, UpstreamError> {
        let mut params = params;
        params.meta = trace.map(TraceContext::meta);
        self.with_session(true, move |session| {
            let params = params.clone();
            async move { session.peer().read_resource_once(params).await }
        })
        .await
    }

    /// `prompts/get` by the prompt's upstream name; see [`Server::read_resource`].
    pub async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        trace: Option<&TraceContext>,
    ) -> Result<GetPromptResponse, UpstreamError> {
        let mut params = params;
        params.meta = trace.map(TraceContext::meta);
        self.with_session(true, move |session| {
            let params = params.clone();
            async move { session.peer().get_prompt_once(params).await }
        })
        .await
    }

    /// `completion/complete` for an upstream prompt name or resource template.
    pub async fn complete(
        &self,
        params: CompleteRequestParams,
        trace: Option<&TraceContext>,
    ) -> Result<CompleteResult, UpstreamError> {
        let mut params = params;
        params.meta = trace.map(TraceContext::meta);
        self.with_session(true, move |session| {
            let params = params.clone();
            async move { session.peer().complete(params).await }
        })
        .await
    }
}

/// One list, every page; empty when the server did not declare the capability.
async fn fetch(session: &Session, which: Which) -> Result<Vec<Value>, ServiceError> {
    let declared = |has: fn(&ServerCapabilities) -> bool| {
        session
            .peer()
            .peer_info()
            .is_some_and(|info| has(&info.capabilities))
    };
    let peer = session.peer();
    match which {
        Which::Resources if declared(|c| c.resources.is_some()) => {
            all_pages(which, |params| async move {
                let page = peer.list_resources(params).await?;
                Ok((page.resources, page.next_cursor))
            })
            .await
        }
        Which::Templates if declared(|c| c.resources.is_some()) => {
            all_pages(which, |params| async move {
                let page = peer.list_resource_templates(params).await?;
                Ok((page.resource_templates, page.next_cursor))
            })
            .await
        }
        Which::Prompts if declared(|c| c.prompts.is_some()) => {
            all_pages(which, |params| async move {
                let page = peer.list_prompts(params).await?;
                Ok((page.prompts, page.next_cursor))
            })
            .await
        }
        _ => Ok(Vec::new()),
    }
}

/// Follows `nextCursor` from the first page, at most [`MAX_PAGES`] pages, stopping at a cursor
/// seen before; every item as JSON.
async fn all_pages<T, F, Fut>(which: Which, page: F) -> Result<Vec<Value>, ServiceError>
where
    T: Serialize,
    F: Fn(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen = HashSet::new();
    for _ in 0..MAX_PAGES {
        let params = cursor
            .clone()
            .map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (page, next) = page(params).await?;
        items.extend(
            page.iter()
                .filter_map(|item| serde_json::to_value(item).ok()),
        );
        match next {
            Some(next) if seen.insert(next.clone()) => cursor = Some(next),
            Some(next) => {
                tracing::warn!(list = ?which, cursor = %next, "upstream repeated a cursor; stopping");
                break;
            }
            None => break,
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Pages as a server would answer them: `pages[i]` is `(items, next cursor)`, asked for by
    /// the cursor `i` (none for the first).
    async fn follow(pages: Vec<(Vec<u32>, Option<&str>)>) -> (Vec<Value>, Vec<Option<String>>) {
        let asked = Mutex::new(Vec::new());
        let items = all_pages(Which::Resources, |params| {
            let cursor = params.and_then(|p| p.cursor);
            asked.lock().expect("lock").push(cursor.clone());
            let at: usize = cursor.map_or(0, |c| c.parse().expect("our cursor"));
            let (items, next) = pages[at].clone();
            async move { Ok((items, next.map(str::to_owned))) }
        })
        .await
        .expect("listed");
        (items, asked.into_inner().expect("lock"))
    }

    #[tokio::test]
    async fn every_page_is_followed_and_a_repeated_cursor_ends_the_listing() {
        let (items, asked) = follow(vec![
            (vec![1, 2], Some("1")),
            (vec![3], Some("2")),
            (vec![4], None),
        ])
        .await;
        assert_eq!(items, [1, 2, 3, 4].map(|n| serde_json::json!(n)));
        assert_eq!(asked, [None, Some("1".to_owned()), Some("2".to_owned())]);

        // A server whose cursor never advances is asked once per cursor, not forever.
        let (items, asked) = follow(vec![(vec![1], Some("1")), (vec![2], Some("1"))]).await;
        assert_eq!(items, [1, 2].map(|n| serde_json::json!(n)));
        assert_eq!(asked.len(), 2);
    }
}
