//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf bodies) to a collector, when
//! `[telemetry] otlp_endpoint` (or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`) names one.
//!
//! What is traced (`span`): one SERVER span per client request, named for its MCP method, whose
//! parent is the client's own trace context (the `traceparent` header of an HTTP request, else
//! `params._meta.traceparent`, SEP-414); one CLIENT span per request made to an upstream for it
//! (`tools/call`, `resources/read`, `prompts/get`, `completion/complete`), a child of it, whose
//! context goes upstream in the request's `_meta` (and as headers over HTTP); one INTERNAL span
//! per search. Attributes follow the OpenTelemetry MCP conventions (`mcp.method.name`,
//! `gen_ai.tool.name`, `error.type`) plus mcpgw's own (`mcpgw.server`, `mcpgw.outcome`,
//! `mcpgw.decision`). Never a tool's arguments or result, a search query, a header value, a
//! session id or a principal other than a client key's name.
//!
//! Spans are batched in memory and sent by the SDK's own thread (`BatchSpanProcessor`, with the
//! workspace's reqwest as a blocking client: the SDK's documented pairing), so a request never
//! waits for the collector; a collector that is down costs dropped spans and a warning in the
//! log, nothing more. [`Telemetry::flush_and_stop`] sends what is left at shutdown.
//!
//! With no endpoint nothing is built: the gateway holds no [`Telemetry`], and a request pays
//! one `None` check (no span, no allocation, no context extraction).
//!
//! Rejected: bridging `tracing` spans with `tracing-opentelemetry`. The request path has no
//! `tracing` spans to bridge, the parent comes from a header or `_meta` rather than from the
//! current span, and spans at a level the log filter lets through would be allocated on every
//! call even with tracing off (issue 11 counts CPU per call).

mod span;

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use opentelemetry::{KeyValue, trace::TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::{
    Resource,
    trace::{SdkTracer, SdkTracerProvider},
};
use url::Url;

pub(crate) use span::{Called, Outcome, RequestSpan, UpstreamSpan};

/// The standard variables read when the configuration names no endpoint or service name.
const TRACES_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
/// `true` turns tracing off whatever else is set (the OpenTelemetry SDK's switch).
const DISABLED_VAR: &str = "OTEL_SDK_DISABLED";

/// How long shutdown waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where traces go and under what name, once resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The URL spans are POSTed to (`.../v1/traces`).
    pub traces_url: Url,
    pub service_name: String,
}

impl Destination {
    /// `[telemetry]`, else the standard variables (`env` reads one): `otlp_endpoint`, else
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is), else `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (`v1/traces` beneath it). `None`: tracing is off (no endpoint, or `OTEL_SDK_DISABLED`).
    /// A variable holding no usable URL is an error naming it, as a bad key would be.
    pub fn resolve(
        config: &config::TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Destination>> {
        let set = |var: &str| env(var).filter(|value| !value.trim().is_empty());
        if set(DISABLED_VAR).is_some_and(|value| value.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let from_var = |var: &str| -> anyhow::Result<Option<Url>> {
            let Some(text) = set(var) else {
                return Ok(None);
            };
            config::otlp_endpoint(&text)
                .map(Some)
                .map_err(|(message, hint)| anyhow!("{var}: {message} (hint: {hint})"))
        };
        let traces_url = match &config.otlp_endpoint {
            Some(endpoint) => config::traces_url(endpoint),
            None => match from_var(TRACES_ENDPOINT_VAR)? {
                Some(url) => url,
                None => match from_var(ENDPOINT_VAR)? {
                    Some(endpoint) => config::traces_url(&endpoint),
                    None => return Ok(None),
                },
            },
        };
        let service_name = match (&config.service_name, set(SERVICE_NAME_VAR)) {
            (Some(name), _) => name.clone(),
            (None, Some(name)) => config::service_name(&name)
                .map_err(|message| anyhow!("{SERVICE_NAME_VAR}: {message}"))?,
            (None, None) => config::DEFAULT_SERVICE_NAME.to_owned(),
        };
        Ok(Some(Destination {
            traces_url,
            service_name,
        }))
    }
}

/// The tracer and its exporter, for a gateway that traces.
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    traces_url: Url,
}

impl Telemetry {
    /// Starts the exporter for `destination`. Nothing is sent until a span ends; a collector
    /// that is not there yet is no error.
    pub fn start(destination: &Destination) -> anyhow::Result<Telemetry> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(destination.traces_url.as_str())
            .build()
            .context("cannot set up the OTLP trace exporter")?;
        let resource = Resource::builder()
            .with_service_name(destination.service_name.clone())
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("mcpgw");
        Ok(Telemetry {
            provider,
            tracer,
            traces_url: destination.traces_url.clone(),
        })
    }

    /// Where spans are sent.
    pub fn traces_url(&self) -> &Url {
        &self.traces_url
    }

    /// Sends the spans still queued and stops the exporter. Blocks (up to a few seconds):
    /// call it off the async runtime's workers.
    pub fn flush_and_stop(&self) {
        if let Err(error) = self.provider.shutdown_with_timeout(FLUSH_TIMEOUT) {
            tracing::warn!(%error, url = %self.traces_url, "could not send the last spans");
        }
    }

    fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Telemetry exporting through `exporter` as each span ends (the unit tests' collector).
    #[cfg(test)]
    fn with_exporter(
        exporter: impl opentelemetry_sdk::trace::SpanExporter + 'static,
    ) -> std::sync::Arc<Telemetry> {
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter)
            .build();
        let tracer = provider.tracer("mcpgw");
        std::sync::Arc::new(Telemetry {
            provider,
            tracer,
            traces_url: Url::parse("http://collector.test/v1/traces").expect("url"),
        })
    }
}

/// How `server` is reached, as an upstream request's span says it.
pub(crate) fn transport(server: &upstream::Server) -> &'static str {
    match server.config().transport {
        config::Transport::Stdio(_) => "stdio",
        config::Transport::Http(_) => "http",
        config::Transport::Sse(_) => "sse",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resolve(toml: &str, vars: &[(&str, &str)]) -> Result<Option<(String, String)>, String> {
        let config =
            config::parse_toml(toml, std::path::Path::new("/x/mcpgw.toml")).expect("valid config");
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Destination::resolve(&config.telemetry, |var| vars.get(var).cloned())
            .map(|found| found.map(|d| (d.traces_url.to_string(), d.service_name)))
            .map_err(|error| error.to_string())
    }

    fn found(url: &str, service: &str) -> Result<Option<(String, String)>, String> {
        Ok(Some((url.to_owned(), service.to_owned())))
    }

    #[test]
    fn tracing_is_off_without_an_endpoint() {
        assert_eq!(resolve("", &[]), Ok(None));
        assert_eq!(
            resolve(
                "[telemetry]\nservice_name = \"gw\"\n",
                &[(SERVICE_NAME_VAR, "x")]
            ),
            Ok(None)
        );
        assert_eq!(resolve("", &[(ENDPOINT_VAR, "  ")]), Ok(None));
    }

    #[test]
    fn the_file_wins_over_the_standard_variables() {
        let toml = "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n";
        assert_eq!(
            resolve(toml, &[(ENDPOINT_VAR, "http://elsewhere:4318")]),
            found("http://127.0.0.1:4318/v1/traces", "mcpgw")
        );
        let named = "[telemetry]\notlp_endpoint = \"http://c:4318\"\nservice_name = \"gw-a\"\n";
        assert_eq!(
            resolve(named, &[(SERVICE_NAME_VAR, "other")]),
            found("http://c:4318/v1/traces", "gw-a")
        );
    }

    #[test]
    fn the_standard_variables_apply_when_the_file_names_no_endpoint() {
        assert_eq!(
            resolve("", &[(ENDPOINT_VAR, "https://otel.example:4318/base")]),
            found("https://otel.example:4318/base/v1/traces", "mcpgw")
        );
        // The signal's own variable is a full URL, and wins over the base one.
        assert_eq!(
            resolve(
                "",
                &[
                    (ENDPOINT_VAR, "http://a:4318"),
                    (TRACES_ENDPOINT_VAR, "http://b:4318/custom"),
                    (SERVICE_NAME_VAR, "gw-env"),
                ]
            ),
            found("http://b:4318/custom", "gw-env")
        );
        assert_eq!(
            resolve(
                "[telemetry]\notlp_endpoint = \"http://c:4318\"\n",
                &[(DISABLED_VAR, "TRUE")]
            ),
            Ok(None)
        );
    }

    #[test]
    fn a_bad_variable_is_an_error_that_names_it() {
        let error = resolve("", &[(ENDPOINT_VAR, "grpc://collector:4317")]).expect_err("bad");
        assert!(
            error.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: url scheme `grpc`"),
            "{error}"
        );
        let error = resolve("", &[(TRACES_ENDPOINT_VAR, "https://u:secret-pw@x")])
            .expect_err("credentials");
        assert!(error.contains("credentials"), "{error}");
        assert!(!error.contains("secret-pw"), "never echoed: {error}");
    }
}
