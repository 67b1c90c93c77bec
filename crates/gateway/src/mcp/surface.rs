//! Every upstream's resources, resource templates and prompts as clients see them: one immutable
//! snapshot ([`Surface`]), rebuilt (never mutated) with the catalog and whenever a server's lists
//! change, and the requests about them ([`requests`]).
//!
//! Namespacing, so that two servers never collide and every request finds its way back:
//! - prompt names follow the tool rules (`server__prompt`, or bare under `prefix =
//!   "when-needed"` when no other server has a prompt of that name; `catalog::naming`);
//! - resource URIs become `mcpgw://SERVER/ORIGINAL` and templates `mcpgw://SERVER/TEMPLATE`
//!   (`catalog::uri`); under `prefix = "when-needed"` with one server they pass through
//!   unchanged, and every URI goes to that server.
//!
//! Listing is paginated over the snapshot ([`page`]): the cursor is the offset of the next item,
//! opaque to clients. Items are kept in configuration order of their servers, then as listed.
//!
//! Invariants: a malformed item (no `uri`, `uriTemplate` or `name` string) is skipped, never
//! fails the build; a server's items are visible only to callers whose profile lets them see
//! the server; the snapshot knows nothing of sessions, so a dead upstream keeps its last good
//! items listed and fails only its own reads.

pub(crate) mod requests;

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
    sync::Arc,
};

use catalog::{
    IndexOptions,
    naming::{self, Namer, Prefix},
    uri,
};
use ids::ServerName;
use retrieval::{Bm25Index, DocId, Document, Field};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::{Gateway, mcp::meta, policy::access::Access, search::Search, telemetry::RequestSpan};

/// Items per page of `resources/list`, `resources/templates/list` and `prompts/list`.
pub(crate) const PAGE_SIZE: usize = 100;

/// One resource or resource template as listed.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub server: ServerName,
    /// The upstream's object with its `uri` (or `uriTemplate`) as clients see it.
    pub shown: Value,
    /// The `uri` (or `uriTemplate`) as the upstream wrote it.
    pub original: String,
}

/// One prompt as listed.
#[derive(Debug, Clone)]
pub(crate) struct Prompt {
    pub server: ServerName,
    /// The name clients see.
    pub name: String,
    /// The `server__prompt` name, which reaches it too when `name` is bare.
    pub prefixed: String,
    /// The name the upstream knows it by, sent on the wire.
    pub upstream_name: String,
    /// The upstream's object under `name`.
    pub shown: Value,
}

/// One server's lists, as the snapshot is built from them.
pub(crate) struct ServerLists {
    pub server: ServerName,
    pub lists: Option<Arc<upstream::Lists>>,
}

/// The snapshot.
pub(crate) struct Surface {
    /// Every enabled server, in configuration order (listed items or not: a template's
    /// expansion may name any of them).
    servers: Vec<ServerName>,
    /// Under `prefix = "when-needed"` with one server: that server, and URIs are its own.
    passthrough: Option<ServerName>,
    resources: Vec<Item>,
    templates: Vec<Item>,
    prompts: Vec<Prompt>,
    /// Shown prompt names, and the `server__prompt` names of prompts shown bare.
    prompt_names: HashMap<String, usize>,
    /// Shown `uriTemplate`s.
    template_uris: HashMap<String, usize>,
    /// Resources, then templates: document `i < resources.len()` is resource `i`.
    resource_index: Bm25Index,
    prompt_index: Bm25Index,
}

impl Surface {
    /// Builds the snapshot from every enabled server's lists, in configuration order.
    pub(crate) fn build(servers: &[ServerLists], prefix: Prefix) -> Surface {
        let names: Vec<ServerName> = servers.iter().map(|s| s.server.clone()).collect();
        let passthrough = match (prefix, names.as_slice()) {
            (Prefix::WhenNeeded, [only]) => Some(only.clone()),
            _ => None,
        };
        let show_uri = |server: &str, original: &str| match &passthrough {
            Some(_) => original.to_owned(),
            None => uri::namespace(server, original),
        };
        let show_template = |server: &str, original: &str| match &passthrough {
            Some(_) => original.to_owned(),
            None => uri::namespace_template(server, original),
        };

        let mut resources = Vec::new();
        let mut templates = Vec::new();
        let mut template_uris = HashMap::new();
        for ServerLists { server, lists } in servers {
            let Some(lists) = lists else { continue };
            let mut seen = HashSet::new();
            for raw in &lists.resources {
                if let Some(item) = item(server, raw, "uri", &mut seen, &show_uri) {
                    resources.push(item);
                }
            }
            let mut seen = HashSet::new();
            for raw in &lists.resource_templates {
                if let Some(item) = item(server, raw, "uriTemplate", &mut seen, &show_template) {
                    template_uris
                        .entry(string(&item.shown, "uriTemplate").to_owned())
                        .or_insert(templates.len());
                    templates.push(item);
                }
            }
        }

        let prompts = prompts(servers, prefix);
        let mut prompt_names = HashMap::new();
        for (i, prompt) in prompts.iter().enumerate() {
            prompt_names.insert(prompt.name.clone(), i);
        }
        for (i, prompt) in prompts.iter().enumerate() {
            prompt_names.entry(prompt.prefixed.clone()).or_insert(i);
        }

        let options = IndexOptions::default();
        let documents: Vec<Document> = resources
            .iter()
            .chain(&templates)
            .map(item_document)
            .collect();
        let resource_index =
            Bm25Index::build_with(&documents, &options.bm25, options.analyzer.clone());
        let documents: Vec<Document> = prompts.iter().map(prompt_document).collect();
        let prompt_index = Bm25Index::build_with(&documents, &options.bm25, options.analyzer);

        Surface {
            servers: names,
            passthrough,
            resources,
            templates,
            prompts,
            prompt_names,
            template_uris,
            resource_index,
            prompt_index,
        }
    }

    pub(crate) fn resources(&self) -> &[Item] {
        &self.resources
    }

    pub(crate) fn templates(&self) -> &[Item] {
        &self.templates
    }

    pub(crate) fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    /// The prompt clients call `name` (its shown name, or its `server__prompt` name).
    pub(crate) fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.get(*self.prompt_names.get(name)?)
    }

    /// The URI clients see for `server`'s resource `original` (a read result's contents, a
    /// prompt's embedded resource).
    pub(crate) fn show_uri(&self, server: &str, original: &str) -> String {
        match &self.passthrough {
            Some(_) => original.to_owned(),
            None => uri::namespace(server, original),
        }
    }

    /// The server and upstream URI behind `shown`: a resource's URI, a client's expansion of a
    /// template, or a template itself (`ref/resource` in `completion/complete`). `None` when it
    /// names no configured server.
    pub(crate) fn route<'u>(&self, shown: &'u str) -> Option<(&str, Cow<'u, str>)> {
        if let Some(server) = &self.passthrough {
            return Some((server, Cow::Borrowed(shown)));
        }
        if let Some(template) = self
            .template_uris
            .get(shown)
            .and_then(|&i| self.templates.get(i))
        {
            return Some((&template.server, Cow::Owned(template.original.clone())));
        }
        let (server, original) = uri::split(shown)?;
        let server = self
            .servers
            .iter()
            .find(|name| name.as_str() == server)
            .or_else(|| {
                // Host names are case-insensitive; a client may have lowered ours.
                let mut alike = self
                    .servers
                    .iter()
                    .filter(|name| name.eq_ignore_ascii_case(server));
                let first = alike.next();
                first.filter(|_| alike.next().is_none())
            })?;
        Some((server, original))
    }

    /// Resources and templates matching `query` (BM25 over name, title, description and URI)
    /// among the servers `keep` lets through, best first, at most `top_k`.
    pub(crate) fn search_resources(
        &self,
        query: &str,
        top_k: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Vec<Value> {
        let at = |doc: DocId| -> Option<(&Item, &str)> {
            let doc = usize::try_from(doc).ok()?;
            match doc.checked_sub(self.resources.len()) {
                None => self.resources.get(doc).map(|item| (item, "uri")),
                Some(t) => self.templates.get(t).map(|item| (item, "uriTemplate")),
            }
        };
        self.resource_index
            .rank(query, &|doc| {
                at(doc).is_some_and(|(item, _)| keep(&item.server))
            })
            .into_iter()
            .take(top_k)
            .filter_map(|hit| {
                let (item, key) = at(hit.doc)?;
                let mut found = json!({
                    key: item.shown.get(key),
                    "name": item.shown.get("name"),
                    "server": item.server,
                    "score": rounded(hit.score),
                });
                for optional in ["title", "description", "mimeType"] {
                    if let Some(value) = item.shown.get(optional) {
                        found[optional] = value.clone();
                    }
                }
                Some(found)
            })
            .collect()
    }

    /// Prompts matching `query` (BM25 over name, title, description and arguments) among the
    /// servers `keep` lets through, best first, at most `top_k`.
    pub(crate) fn search_prompts(
        &self,
        query: &str,
        top_k: usize,
        keep: &dyn Fn(&str) -> bool,
    ) -> Vec<Value> {
        let at = |doc: DocId| self.prompts.get(usize::try_from(doc).ok()?);
        self.prompt_index
            .rank(query, &|doc| at(doc).is_some_and(|p| keep(&p.server)))
            .into_iter()
            .take(top_k)
            .filter_map(|hit| {
                let prompt = at(hit.doc)?;
                let mut found = json!({
                    "name": prompt.name,
                    "server": prompt.server,
                    "score": rounded(hit.score),
                });
                for optional in ["title", "description", "arguments"] {
                    if let Some(value) = prompt.shown.get(optional) {
                        found[optional] = value.clone();
                    }
                }
                Some(found)
            })
            .collect()
    }
}

impl Default for Surface {
    fn default() -> Self {
        Surface::build(&[], Prefix::Always)
    }
}

/// `search_tools` with `include` naming resources or prompts: the tools as ever (when
/// included, ranking untouched), then BM25 over the resources, templates and prompts of the
/// servers the caller may see and asked for, the queries taken together, at most `top_k` each.
pub(crate) async fn search(
    gateway: &Gateway,
    access: &Access<'_>,
    known: &[&str],
    search: &Search,
    include: meta::Include,
    trace: Option<&RequestSpan>,
) -> CallToolResult {
    let found = match include.tools {
        true => {
            let mut found = gateway.search_in(search, trace).await;
            found
                .starting
                .retain(|server| access.permits_server(server));
            found.held = gateway.held_count(|server| {
                access.permits_server(server)
                    && search
                        .filter
                        .servers
                        .as_ref()
                        .is_none_or(|servers| servers.iter().any(|s| s == server))
            });
            Some(found)
        }
        false => None,
    };
    let surface = gateway.surface();
    let query = search.queries.join(" ");
    let keep = |server: &str| {
        access.permits_server(server)
            && search
                .filter
                .servers
                .as_ref()
                .is_none_or(|only| only.iter().any(|name| name == server))
    };
    let resources = include
        .resources
        .then(|| surface.search_resources(&query, search.top_k, &keep));
    let prompts = include
        .prompts
        .then(|| surface.search_prompts(&query, search.top_k, &keep));
    meta::render_search_including(known, search, found.as_ref(), resources, prompts)
}

/// Why a cursor was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadCursor;

/// The page of `items` that starts at `cursor` (none: the first), at most `size` long, and the
/// cursor of the next page, if any. A cursor past the end (the list shrank) gives an empty last
/// page; one that is not a cursor of ours is refused.
pub(crate) fn page<T>(
    items: Vec<T>,
    cursor: Option<&str>,
    size: usize,
) -> Result<(Vec<T>, Option<String>), BadCursor> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor.parse::<usize>().map_err(|_| BadCursor)?,
    };
    let total = items.len();
    let end = start.saturating_add(size.max(1)).min(total);
    let next = (end < total).then(|| end.to_string());
    let page = items
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start));
    Ok((page.collect(), next))
}

/// One resource or template of `server`, if well-formed and its `key` not seen before.
fn item(
    server: &str,
    raw: &Value,
    key: &str,
    seen: &mut HashSet<String>,
    show: &dyn Fn(&str, &str) -> String,
) -> Option<Item> {
    let original = raw.get(key)?.as_str()?;
    raw.get("name")?.as_str()?;
    if !seen.insert(original.to_owned()) {
        tracing::debug!(
            server,
            uri = original,
            "duplicate in the server's list; skipped"
        );
        return None;
    }
    let mut shown = raw.clone();
    shown[key] = Value::String(show(server, original));
    Some(Item {
        server: server.into(),
        shown,
        original: original.to_owned(),
    })
}

/// Every well-formed prompt, named under `prefix` (the first of two with one name is kept: the
/// second could never be got).
fn prompts(servers: &[ServerLists], prefix: Prefix) -> Vec<Prompt> {
    let listed: Vec<(&str, Vec<&Value>)> = servers
        .iter()
        .filter_map(|s| Some((s.server.as_str(), s.lists.as_ref()?)))
        .map(|(server, lists)| {
            let mut seen = HashSet::new();
            let prompts = lists
                .prompts
                .iter()
                .filter(|raw| {
                    raw.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|name| seen.insert(name))
                })
                .collect();
            (server, prompts)
        })
        .collect();
    let contested = naming::contested(
        listed
            .iter()
            .map(|(_, prompts)| prompts.iter().map(|raw| string(raw, "name"))),
    );
    let rules = naming::Rules {
        prefix,
        reserved: &[],
    };
    let mut namer = Namer::with_rules(rules, contested);
    let mut out = Vec::new();
    for (server, prompts) in listed {
        for raw in prompts {
            let upstream_name = string(raw, "name").to_owned();
            let naming::Assigned { name, prefixed } = namer.assign_both(server, &upstream_name);
            let mut shown = raw.clone();
            shown["name"] = Value::String(name.clone());
            out.push(Prompt {
                server: server.into(),
                name,
                prefixed,
                upstream_name,
                shown,
            });
        }
    }
    out
}

fn string<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn rounded(score: f32) -> f64 {
    (f64::from(score) * 10_000.0).round() / 10_000.0
}

fn item_document(item: &Item) -> Document {
    let raw = &item.shown;
    Document {
        key: format!("{}\0{}", item.server, item.original),
        fields: vec![
            (
                Field::Name,
                format!("{} {}", string(raw, "name"), string(raw, "title")),
            ),
            (Field::Server, item.server.to_string()),
            (Field::Description, string(raw, "description").to_owned()),
            // The URI's words (`demo`, `static`, `document`, `architecture`) say what it is.
            (Field::ParamName, item.original.clone()),
        ],
    }
}

fn prompt_document(prompt: &Prompt) -> Document {
    let raw = &prompt.shown;
    let arguments = raw.get("arguments").and_then(Value::as_array);
    let argument_text = |key: &str| {
        arguments
            .into_iter()
            .flatten()
            .map(|argument| string(argument, key))
            .collect::<Vec<_>>()
            .join(" ")
    };
    Document {
        key: prompt.name.clone(),
        fields: vec![
            (
                Field::Name,
                format!("{} {}", prompt.upstream_name, string(raw, "title")),
            ),
            (Field::Server, prompt.server.to_string()),
            (Field::Description, string(raw, "description").to_owned()),
            (Field::ParamName, argument_text("name")),
            (Field::ParamDescription, argument_text("description")),
        ],
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn everything(name: &str) -> ServerLists {
        ServerLists {
            server: name.into(),
            lists: Some(Arc::new(upstream::Lists {
                resources: vec![
                    json!({"uri": "demo://resource/static/document/architecture.md", "name": "architecture.md", "description": "Static document file exposed from /docs: architecture.md", "mimeType": "text/markdown"}),
                    json!({"uri": "file:///a", "name": "a"}),
                    json!({"uri": "file:///a", "name": "duplicate"}),
                    json!({"name": "no uri"}),
                    json!({"uri": "http://[::1]/x", "name": "ipv6"}),
                ],
                resource_templates: vec![
                    json!({"uriTemplate": "demo://resource/dynamic/text/{resourceId}", "name": "Dynamic Text Resource"}),
                    json!({"uriTemplate": 7, "name": "bad"}),
                ],
                prompts: vec![
                    json!({"name": "simple-prompt", "description": "A prompt with no arguments"}),
                    json!({"name": "args-prompt", "arguments": [{"name": "city", "description": "Name of the city"}]}),
                    json!({"name": "simple-prompt", "description": "second copy"}),
                    json!({"description": "no name"}),
                ],
            })),
        }
    }

    fn time() -> ServerLists {
        ServerLists {
            server: "time".into(),
            lists: Some(Arc::new(upstream::Lists {
                prompts: vec![
                    json!({"name": "timezone-help", "description": "Explain a time zone"}),
                ],
                ..upstream::Lists::default()
            })),
        }
    }

    fn listing(surface: &Surface) -> String {
        let mut lines = Vec::new();
        for item in surface.resources() {
            lines.push(format!(
                "resource {} <- {}",
                item.shown["uri"], item.original
            ));
        }
        for item in surface.templates() {
            lines.push(format!(
                "template {} <- {}",
                item.shown["uriTemplate"], item.original
            ));
        }
        for prompt in surface.prompts() {
            lines.push(format!(
                "prompt {} <- {}/{}",
                prompt.name, prompt.server, prompt.upstream_name
            ));
        }
        lines.join("\n")
    }

    fn check(servers: &[ServerLists], prefix: Prefix, expect: Expect) {
        expect.assert_eq(&listing(&Surface::build(servers, prefix)));
    }

    #[test]
    fn two_servers_are_namespaced_and_malformed_items_skipped() {
        check(
            &[everything("everything"), everything("other"), time()],
            Prefix::Always,
            expect![[r#"
                resource "mcpgw://everything/demo://resource/static/document/architecture.md" <- demo://resource/static/document/architecture.md
                resource "mcpgw://everything/file:///a" <- file:///a
                resource "mcpgw://everything/~http%3A%2F%2F%5B%3A%3A1%5D%2Fx" <- http://[::1]/x
                resource "mcpgw://other/demo://resource/static/document/architecture.md" <- demo://resource/static/document/architecture.md
                resource "mcpgw://other/file:///a" <- file:///a
                resource "mcpgw://other/~http%3A%2F%2F%5B%3A%3A1%5D%2Fx" <- http://[::1]/x
                template "mcpgw://everything/demo://resource/dynamic/text/{resourceId}" <- demo://resource/dynamic/text/{resourceId}
                template "mcpgw://other/demo://resource/dynamic/text/{resourceId}" <- demo://resource/dynamic/text/{resourceId}
                prompt everything__simple-prompt <- everything/simple-prompt
                prompt everything__args-prompt <- everything/args-prompt
                prompt other__simple-prompt <- other/simple-prompt
                prompt other__args-prompt <- other/args-prompt
                prompt time__timezone-help <- time/timezone-help"#]],
        );
    }

    #[test]
    fn when_needed_prefixes_only_shared_prompt_names_and_keeps_uris_namespaced() {
        check(
            &[everything("everything"), everything("other"), time()],
            Prefix::WhenNeeded,
            expect![[r#"
                resource "mcpgw://everything/demo://resource/static/document/architecture.md" <- demo://resource/static/document/architecture.md
                resource "mcpgw://everything/file:///a" <- file:///a
                resource "mcpgw://everything/~http%3A%2F%2F%5B%3A%3A1%5D%2Fx" <- http://[::1]/x
                resource "mcpgw://other/demo://resource/static/document/architecture.md" <- demo://resource/static/document/architecture.md
                resource "mcpgw://other/file:///a" <- file:///a
                resource "mcpgw://other/~http%3A%2F%2F%5B%3A%3A1%5D%2Fx" <- http://[::1]/x
                template "mcpgw://everything/demo://resource/dynamic/text/{resourceId}" <- demo://resource/dynamic/text/{resourceId}
                template "mcpgw://other/demo://resource/dynamic/text/{resourceId}" <- demo://resource/dynamic/text/{resourceId}
                prompt everything__simple-prompt <- everything/simple-prompt
                prompt everything__args-prompt <- everything/args-prompt
                prompt other__simple-prompt <- other/simple-prompt
                prompt other__args-prompt <- other/args-prompt
                prompt timezone-help <- time/timezone-help"#]],
        );
    }

    #[test]
    fn when_needed_with_one_server_passes_everything_through() {
        let surface = Surface::build(&[everything("everything")], Prefix::WhenNeeded);
        expect![[r#"
            resource "demo://resource/static/document/architecture.md" <- demo://resource/static/document/architecture.md
            resource "file:///a" <- file:///a
            resource "http://[::1]/x" <- http://[::1]/x
            template "demo://resource/dynamic/text/{resourceId}" <- demo://resource/dynamic/text/{resourceId}
            prompt simple-prompt <- everything/simple-prompt
            prompt args-prompt <- everything/args-prompt"#]]
        .assert_eq(&listing(&surface));
        assert_eq!(
            surface.route("anything:at/all"),
            Some(("everything", Cow::Borrowed("anything:at/all")))
        );
        assert_eq!(surface.show_uri("everything", "file:///b"), "file:///b");
        let prompt = surface.prompt("everything__args-prompt").expect("alias");
        assert_eq!(prompt.name, "args-prompt");
    }

    #[test]
    fn uris_route_back_to_their_server() {
        let surface = Surface::build(&[everything("everything"), time()], Prefix::Always);
        let route = |shown: &str| {
            surface
                .route(shown)
                .map(|(server, original)| format!("{server} {original}"))
        };
        assert_eq!(
            route("mcpgw://everything/file:///a").as_deref(),
            Some("everything file:///a")
        );
        // A template, and a client's expansion of it.
        assert_eq!(
            route("mcpgw://everything/demo://resource/dynamic/text/{resourceId}").as_deref(),
            Some("everything demo://resource/dynamic/text/{resourceId}")
        );
        assert_eq!(
            route("mcpgw://everything/demo://resource/dynamic/text/7").as_deref(),
            Some("everything demo://resource/dynamic/text/7")
        );
        // Not listed, but a configured server: its own business whether the URI exists.
        assert_eq!(route("mcpgw://time/x:y").as_deref(), Some("time x:y"));
        assert_eq!(
            route("mcpgw://EVERYTHING/x:y").as_deref(),
            Some("everything x:y")
        );
        assert_eq!(route("mcpgw://nope/x:y"), None);
        assert_eq!(route("file:///a"), None);
        assert_eq!(
            surface.show_uri("everything", "file:///b"),
            "mcpgw://everything/file:///b"
        );
    }

    #[test]
    fn search_finds_resources_templates_and_prompts_of_permitted_servers() {
        let surface = Surface::build(
            &[everything("everything"), everything("other"), time()],
            Prefix::Always,
        );
        let only_everything = |server: &str| server == "everything";
        let found = surface.search_resources("architecture document", 5, &only_everything);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0]["uri"],
            "mcpgw://everything/demo://resource/static/document/architecture.md"
        );
        let found = surface.search_resources("dynamic text", 5, &|_| true);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0]["uriTemplate"].is_string(), "{found:?}");
        let found = surface.search_prompts("city weather", 5, &only_everything);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0]["name"], "everything__args-prompt");
        assert!(
            surface
                .search_prompts("time zone", 5, &only_everything)
                .is_empty()
        );
    }

    #[test]
    fn pages_cover_the_list_once_and_refuse_foreign_cursors() {
        let items: Vec<u32> = (0..250).collect();
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let (items, next) = page(items.clone(), cursor.as_deref(), 100).expect("our cursor");
            pages += 1;
            seen.extend(items);
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(seen, items);
        assert_eq!(
            page(items.clone(), Some("100"), 100).map(|(p, n)| (p.len(), n)),
            Ok((100, Some("200".to_owned())))
        );
        assert_eq!(page(items.clone(), Some("999"), 100), Ok((vec![], None)));
        assert_eq!(page(items.clone(), Some("x"), 100), Err(BadCursor));
        assert_eq!(page(Vec::<u32>::new(), None, 100), Ok((vec![], None)));
        assert_eq!(
            page(items, None, 250).map(|(p, n)| (p.len(), n)),
            Ok((250, None))
        );
    }
}
