//! Prometheus metrics, served at `GET /metrics` on the admin side of the request guard (the
//! admin token on an open loopback listener, an admin principal on a keyed one), in the
//! OpenMetrics text format (`prometheus-client`).
//!
//! Two kinds of series:
//!
//! - **Events**, counted where they happen: every resolved `tools/call` (from its audit record,
//!   the one place every call ends: calls by server, tool, decision and outcome, and the
//!   gateway's time per call), the upstream's own time per relayed call, every search (by the
//!   strategy that answered, with its time), sessions opened and closed, the embedding cache's
//!   hits and misses per tool text and the texts waiting to be embedded.
//! - **State**, read when scraped: each upstream's state, the catalog's and the held tools'
//!   sizes, the approvals pending, the audit log's written, dropped and failed rows, the
//!   OAuth token refreshes by outcome (counted in `upstream::oauth`, where they happen), and
//!   whether the replicas' Redis is up.
//!
//! Invariants: no label value comes from a client's input unchecked. A call's `tool` label is
//! its qualified name only when the catalog lists it (else `unlisted`), servers are the
//! configured ones, and no series is labelled by principal or arguments, so the number of
//! series is bounded by the configuration and the catalog. Names follow Prometheus
//! conventions: `mcpgw_` prefix, `_total` for counters, `_seconds` for durations.

use std::{sync::Mutex, time::Duration};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use crate::sync::lock;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `tool` label of a call to a tool the catalog does not list.
pub const UNLISTED: &str = "unlisted";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    server: String,
    tool: String,
    /// The audit log's words, which are static: no allocation for them per call.
    decision: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    server: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StrategyLabels {
    strategy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// What a scrape reads of the gateway's state (see [`Metrics::render`]).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Each enabled server with its state word (`ready`, `failed`, ...).
    pub upstreams: Vec<(String, &'static str)>,
    pub catalog_tools: usize,
    pub held_tools: usize,
    pub approvals_pending: usize,
    /// Whether Redis (`[store] redis`) answers and the replicas' events are heard.
    pub redis_up: bool,
    pub audit_written: u64,
    pub audit_dropped: u64,
    pub audit_failed: u64,
    pub audit_queued: usize,
    /// OAuth token refreshes since start by outcome (`upstream::oauth::refresh_counts`).
    pub oauth_refreshes: Vec<(&'static str, u64)>,
}

/// Every state word an upstream can be in, so that a scrape sets the old state's series to 0
/// when a server changes state.
pub const UPSTREAM_STATES: [&str; 6] = [
    "idle",
    "starting",
    "connecting",
    "ready",
    "failed",
    "unresponsive",
];

/// The gateway's metrics (see the module docs).
pub struct Metrics {
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    call_seconds: Family<ServerLabels, Histogram>,
    gateway_seconds: Family<ServerLabels, Histogram>,
    upstream_seconds: Family<ServerLabels, Histogram>,
    searches: Family<StrategyLabels, Counter>,
    search_seconds: Family<StrategyLabels, Histogram>,
    sessions_open: Gauge,
    sessions_opened: Counter,
    direct_calls: Counter,
    embedding_queue: Gauge,
    embedding_cache_hits: Counter,
    embedding_cache_misses: Counter,
    /// Set from the gateway's state when scraped.
    state: StateSeries,
    /// One scrape at a time brings the state series up to date and encodes them.
    scraping: Mutex<()>,
}

/// The series a scrape sets from the gateway's state ([`Snapshot`]).
struct StateSeries {
    upstream_up: Family<ServerLabels, Gauge>,
    upstream_state: Family<StateLabels, Gauge>,
    catalog_tools: Gauge,
    held_tools: Gauge,
    approvals_pending: Gauge,
    redis_up: Gauge,
    audit_queued: Gauge,
    audit_written: Counter,
    audit_dropped: Counter,
    audit_failed: Counter,
    oauth_refreshes: Family<OutcomeLabels, Counter>,
}

impl StateSeries {
    fn new(registry: &mut Registry) -> StateSeries {
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            register(registry, name, help, Gauge::default())
        };
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            register(registry, name, help, Counter::default())
        };
        StateSeries {
            upstream_up: register(
                registry,
                "upstream_up",
                "1 when the upstream server is ready, else 0",
                Family::default(),
            ),
            upstream_state: register(
                registry,
                "upstream_state",
                "1 for the state each upstream server is in, 0 for the others",
                Family::default(),
            ),
            catalog_tools: gauge(registry, "catalog_tools", "Tools in the published catalog"),
            held_tools: gauge(
                registry,
                "held_tools",
                "Tools held because their definition changed (pinning)",
            ),
            approvals_pending: gauge(
                registry,
                "approvals_pending",
                "Tool calls waiting for a human decision",
            ),
            redis_up: gauge(
                registry,
                "redis_up",
                "1 when the replicas' Redis answers and its events are heard, else 0 (also 0 without Redis)",
            ),
            audit_queued: gauge(
                registry,
                "audit_queued_rows",
                "Audit rows waiting to be written",
            ),
            audit_written: counter(
                registry,
                "audit_rows_written",
                "Audit rows written to the database",
            ),
            audit_dropped: counter(
                registry,
                "audit_rows_dropped",
                "Audit rows dropped because the queue was full",
            ),
            audit_failed: counter(
                registry,
                "audit_rows_failed",
                "Audit rows the database refused",
            ),
            oauth_refreshes: register(
                registry,
                "oauth_refreshes",
                "OAuth token refreshes of upstream servers by outcome",
                Family::default(),
            ),
        }
    }
}

/// `metric`, registered in `registry` under `name` (with the `mcpgw_` prefix).
fn register<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}

fn durations() -> Histogram {
    // 0.5 ms to about 16 s, doubling.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("mcpgw");
        let registry_ref = &mut registry;
        let calls = register(
            registry_ref,
            "tool_calls",
            "Tool calls by server, tool, the gateway's decision and the outcome",
            Family::<CallLabels, Counter>::default(),
        );
        let per_server = || {
            Family::<ServerLabels, Histogram>::new_with_constructor(durations as fn() -> Histogram)
        };
        let call_seconds = register(
            registry_ref,
            "tool_call_duration_seconds",
            "Time from a tool call's arrival to its answer, gateway and upstream together",
            per_server(),
        );
        let gateway_seconds = register(
            registry_ref,
            "gateway_call_duration_seconds",
            "The gateway's own part of a tool call: its whole time less the upstream's (a wait for approval or sign-in included)",
            per_server(),
        );
        let upstream_seconds = register(
            registry_ref,
            "upstream_call_duration_seconds",
            "Time the upstream server took to answer a relayed tool call",
            per_server(),
        );
        let searches = register(
            registry_ref,
            "searches",
            "search_tools calls by the strategy that answered",
            Family::<StrategyLabels, Counter>::default(),
        );
        let search_seconds = register(
            registry_ref,
            "search_duration_seconds",
            "Time a search took, embedding the query included",
            Family::<StrategyLabels, Histogram>::new_with_constructor(
                durations as fn() -> Histogram,
            ),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            register(registry, name, help, Gauge::default())
        };
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            register(registry, name, help, Counter::default())
        };
        Metrics {
            calls,
            call_seconds,
            gateway_seconds,
            upstream_seconds,
            searches,
            search_seconds,
            sessions_open: gauge(
                registry_ref,
                "sessions_open",
                "Streamable HTTP sessions open now",
            ),
            sessions_opened: counter(
                registry_ref,
                "sessions_opened",
                "Streamable HTTP sessions opened since start",
            ),
            direct_calls: counter(
                registry_ref,
                "tool_calls_direct",
                "Tool calls of legacy HTTP sessions answered in the request's own task, without rmcp's session worker",
            ),
            embedding_queue: gauge(
                registry_ref,
                "embedding_queue_depth",
                "Tool texts waiting to be embedded",
            ),
            embedding_cache_hits: counter(
                registry_ref,
                "embedding_cache_hits",
                "Tool texts whose embedding was found in the cache",
            ),
            embedding_cache_misses: counter(
                registry_ref,
                "embedding_cache_misses",
                "Tool texts embedded because the cache did not have them",
            ),
            state: StateSeries::new(registry_ref),
            registry,
            scraping: Mutex::new(()),
        }
    }

    /// One tool call ended after `took`, of which `upstream` waiting for the upstream server:
    /// `tool` is its qualified name, or [`UNLISTED`].
    pub fn call(
        &self,
        server: &str,
        tool: &str,
        decision: &'static str,
        outcome: &'static str,
        took: Duration,
        upstream: Duration,
    ) {
        self.calls
            .get_or_create(&CallLabels {
                server: server.to_owned(),
                tool: tool.to_owned(),
                decision,
                outcome,
            })
            .inc();
        let labels = ServerLabels {
            server: server.to_owned(),
        };
        self.call_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.gateway_seconds
            .get_or_create(&labels)
            .observe(took.saturating_sub(upstream).as_secs_f64());
    }

    /// The upstream `server` answered a relayed call (or failed to) after `took`.
    pub fn upstream_call(&self, server: &str, took: Duration) {
        self.upstream_seconds
            .get_or_create(&ServerLabels {
                server: server.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// A search answered by `strategy` (`bm25`, `vector`, `hybrid`) in `took`.
    pub fn search(&self, strategy: &str, took: Duration) {
        let labels = StrategyLabels {
            strategy: strategy.to_owned(),
        };
        self.searches.get_or_create(&labels).inc();
        self.search_seconds
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A session opened (`open` sessions now).
    pub fn session_opened(&self, open: usize) {
        self.sessions_opened.inc();
        self.sessions_open.set(gauge_value(open));
    }

    /// A tool call was answered on the direct path (`http::direct`).
    pub fn direct_call(&self) {
        self.direct_calls.inc();
    }

    /// An embedding run looked its tool texts up in the cache: `hits` found, `misses` not.
    pub fn embedding_cache(&self, hits: usize, misses: usize) {
        self.embedding_cache_hits.inc_by(count(hits));
        self.embedding_cache_misses.inc_by(count(misses));
    }

    /// `texts` wait to be embedded until the returned guard is dropped (the run finished,
    /// failed or was cancelled).
    pub fn embedding_queued(&self, texts: usize) -> Queued<'_> {
        let texts = gauge_value(texts);
        self.embedding_queue.inc_by(texts);
        Queued {
            gauge: &self.embedding_queue,
            texts,
        }
    }

    /// Sessions closed or swept: `open` are left.
    pub fn sessions_now(&self, open: usize) {
        self.sessions_open.set(gauge_value(open));
    }

    /// The text a scrape gets, with the state series set from `now`.
    pub fn render(&self, now: &Snapshot) -> String {
        let _one = lock(&self.scraping);
        // Only the servers configured now: a reload may have removed some (under the scrape
        // lock, so no scrape sees the series half set).
        self.state.upstream_up.clear();
        self.state.upstream_state.clear();
        for (server, state) in &now.upstreams {
            let up = i64::from(*state == "ready");
            self.state
                .upstream_up
                .get_or_create(&ServerLabels {
                    server: server.clone(),
                })
                .set(up);
            for known in UPSTREAM_STATES {
                self.state
                    .upstream_state
                    .get_or_create(&StateLabels {
                        server: server.clone(),
                        state: known.to_owned(),
                    })
                    .set(i64::from(known == *state));
            }
        }
        self.state.catalog_tools.set(gauge_value(now.catalog_tools));
        self.state.held_tools.set(gauge_value(now.held_tools));
        self.state.redis_up.set(i64::from(now.redis_up));
        self.state
            .approvals_pending
            .set(gauge_value(now.approvals_pending));
        self.state.audit_queued.set(gauge_value(now.audit_queued));
        catch_up(&self.state.audit_written, now.audit_written);
        catch_up(&self.state.audit_dropped, now.audit_dropped);
        catch_up(&self.state.audit_failed, now.audit_failed);
        for (outcome, total) in &now.oauth_refreshes {
            let counter = self
                .state
                .oauth_refreshes
                .get_or_create(&OutcomeLabels { outcome });
            catch_up(&counter, *total);
        }
        let mut text = String::new();
        if let Err(error) = encode(&mut text, &self.registry) {
            // Writing to a String fails only if a value cannot be formatted.
            tracing::warn!(%error, "metrics could not be encoded");
        }
        text
    }
}

/// Raises `counter` to `total`, a count kept elsewhere that only grows.
fn catch_up(counter: &Counter, total: u64) {
    let behind = total.saturating_sub(counter.get());
    if behind > 0 {
        counter.inc_by(behind);
    }
}

fn gauge_value(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Texts in the embedding queue ([`Metrics::embedding_queued`]); they leave it when dropped.
pub struct Queued<'a> {
    gauge: &'a Gauge,
    texts: i64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.gauge.dec_by(self.texts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_follow_prometheus_names_and_states_switch_over() {
        let metrics = Metrics::new();
        metrics.call(
            "time",
            "time__now",
            "allowed",
            "ok",
            Duration::from_millis(3),
            Duration::from_millis(2),
        );
        metrics.upstream_call("time", Duration::from_millis(2));
        metrics.search("bm25", Duration::from_micros(300));
        metrics.session_opened(1);
        let mut now = Snapshot {
            upstreams: vec![("time".into(), "starting")],
            catalog_tools: 2,
            audit_written: 5,
            ..Snapshot::default()
        };
        let text = metrics.render(&now);
        for line in [
            "mcpgw_tool_calls_total{server=\"time\",tool=\"time__now\",decision=\"allowed\",outcome=\"ok\"} 1",
            "mcpgw_tool_call_duration_seconds_count{server=\"time\"} 1",
            "mcpgw_upstream_call_duration_seconds_count{server=\"time\"} 1",
            "mcpgw_gateway_call_duration_seconds_count{server=\"time\"} 1",
            "mcpgw_gateway_call_duration_seconds_sum{server=\"time\"} 0.001",
            "mcpgw_searches_total{strategy=\"bm25\"} 1",
            "mcpgw_sessions_open 1",
            "mcpgw_upstream_up{server=\"time\"} 0",
            "mcpgw_upstream_state{server=\"time\",state=\"starting\"} 1",
            "mcpgw_catalog_tools 2",
            "mcpgw_audit_rows_written_total 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"), "OpenMetrics ends with EOF");
        now.upstreams = vec![("time".into(), "ready")];
        now.audit_written = 7;
        let text = metrics.render(&now);
        for line in [
            "mcpgw_upstream_up{server=\"time\"} 1",
            "mcpgw_upstream_state{server=\"time\",state=\"starting\"} 0",
            "mcpgw_upstream_state{server=\"time\",state=\"ready\"} 1",
            "mcpgw_audit_rows_written_total 7",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // A server a reload removed leaves the state series.
        now.upstreams = vec![("clock".into(), "ready")];
        let text = metrics.render(&now);
        assert!(
            text.contains("mcpgw_upstream_up{server=\"clock\"} 1"),
            "{text}"
        );
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("mcpgw_upstream_up{server=\"time\"")
                    || l.starts_with("mcpgw_upstream_state{server=\"time\"")),
            "{text}"
        );
    }

    #[test]
    fn the_embedding_queue_drains_and_cache_lookups_and_refreshes_are_counted() {
        let metrics = Metrics::new();
        let line = |text: &str, series: &str| {
            text.lines()
                .find(|l| l.split(' ').next() == Some(series))
                .map(str::to_owned)
                .unwrap_or_else(|| panic!("{series} in\n{text}"))
        };
        let mut now = Snapshot {
            oauth_refreshes: vec![("ok", 0), ("reauthorize", 0)],
            ..Snapshot::default()
        };
        let text = metrics.render(&now);
        // Every series is there from the start, at zero.
        assert_eq!(
            line(&text, "mcpgw_embedding_queue_depth"),
            "mcpgw_embedding_queue_depth 0"
        );
        assert_eq!(
            line(&text, "mcpgw_embedding_cache_hits_total"),
            "mcpgw_embedding_cache_hits_total 0"
        );
        assert_eq!(
            line(
                &text,
                "mcpgw_oauth_refreshes_total{outcome=\"reauthorize\"}"
            ),
            "mcpgw_oauth_refreshes_total{outcome=\"reauthorize\"} 0"
        );
        metrics.embedding_cache(3, 2);
        {
            let _queued = metrics.embedding_queued(2);
            let text = metrics.render(&now);
            assert_eq!(
                line(&text, "mcpgw_embedding_queue_depth"),
                "mcpgw_embedding_queue_depth 2"
            );
        }
        metrics.embedding_cache(5, 0);
        now.oauth_refreshes = vec![("ok", 4), ("reauthorize", 1)];
        let text = metrics.render(&now);
        for expected in [
            "mcpgw_embedding_queue_depth 0",
            "mcpgw_embedding_cache_hits_total 8",
            "mcpgw_embedding_cache_misses_total 2",
            "mcpgw_oauth_refreshes_total{outcome=\"ok\"} 4",
            "mcpgw_oauth_refreshes_total{outcome=\"reauthorize\"} 1",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected} in\n{text}");
        }
    }
}
