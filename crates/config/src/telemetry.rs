//! `[telemetry]`: where OpenTelemetry traces go. The rules for a collector's URL live here, so
//! the file's `otlp_endpoint` and the standard `OTEL_EXPORTER_OTLP_ENDPOINT` variable (which the
//! gateway reads when the file names none) are held to the same ones.

use url::Url;

use crate::Problem;

/// `service.name` of the exported traces when neither `service_name` nor `OTEL_SERVICE_NAME`
/// names one.
pub const DEFAULT_SERVICE_NAME: &str = "mcpgw";

/// The OTLP/HTTP path of traces beneath a collector's base URL (the OTLP exporter
/// specification's, as for `OTEL_EXPORTER_OTLP_ENDPOINT`).
pub const TRACES_PATH: &str = "v1/traces";

/// Longest `service_name` accepted: a name, not a document.
const MAX_SERVICE_NAME: usize = 255;

/// `[telemetry]`, resolved. Nothing is exported unless an endpoint is known: this one, or the
/// standard environment variables the gateway falls back to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// `otlp_endpoint`: the collector's OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`;
    /// traces are POSTed to [`traces_url`] of it.
    pub otlp_endpoint: Option<Url>,
    /// `service_name`: the traces' `service.name`. `None`: `OTEL_SERVICE_NAME`, else
    /// [`DEFAULT_SERVICE_NAME`].
    pub service_name: Option<String>,
}

/// A collector URL, or why it is not one: the message and a hint. The text is never echoed,
/// since a pasted URL may hold a credential.
pub fn otlp_endpoint(text: &str) -> Result<Url, (String, &'static str)> {
    const EXAMPLE: &str = "write the collector's OTLP/HTTP address, e.g. \"http://127.0.0.1:4318\"";
    let url =
        Url::parse(text.trim()).map_err(|error| (format!("invalid url: {error}"), EXAMPLE))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err((
            format!(
                "url scheme `{}` is not supported: traces are sent over OTLP/HTTP",
                url.scheme()
            ),
            "use an http:// or https:// url (OTLP over gRPC is not built in)",
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(("the url names no host".to_owned(), EXAMPLE));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err((
            "the url holds credentials, which must not be written in it".to_owned(),
            "send them as headers from the environment: OTEL_EXPORTER_OTLP_HEADERS=\"authorization=...\"",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err((
            "the url has a query or fragment, which OTLP/HTTP does not use".to_owned(),
            "keep scheme, host, port and path only; credentials go in OTEL_EXPORTER_OTLP_HEADERS",
        ));
    }
    Ok(url)
}

/// Where traces are POSTed for collector base URL `endpoint`: [`TRACES_PATH`] beneath it, or
/// `endpoint` itself when it already ends in that path (a signal URL pasted as the base).
pub fn traces_url(endpoint: &Url) -> Url {
    let path = endpoint.path().trim_end_matches('/');
    if path.ends_with(&format!("/{TRACES_PATH}")) {
        return endpoint.clone();
    }
    let mut url = endpoint.clone();
    url.set_path(&format!("{path}/{TRACES_PATH}"));
    url
}

/// A `service_name` as written, or why it cannot be one.
pub fn service_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() {
        return Err("service_name is empty".to_owned());
    }
    if name.chars().count() > MAX_SERVICE_NAME || name.chars().any(char::is_control) {
        return Err(format!(
            "service_name must be at most {MAX_SERVICE_NAME} printable characters"
        ));
    }
    Ok(name.to_owned())
}

/// `[telemetry]` as written: every bad key is a problem at its path.
pub(crate) fn resolve(
    file: crate::file::TelemetryFile,
    problems: &mut Vec<Problem>,
) -> TelemetryConfig {
    let otlp_endpoint = file
        .otlp_endpoint
        .and_then(|text| match otlp_endpoint(&text) {
            Ok(url) => Some(url),
            Err((message, hint)) => {
                problems.push(Problem::new("telemetry.otlp_endpoint", message).hint(hint));
                None
            }
        });
    let service_name = file
        .service_name
        .and_then(|text| match service_name(&text) {
            Ok(name) => Some(name),
            Err(message) => {
                problems.push(
                    Problem::new("telemetry.service_name", message)
                        .hint(format!("leave it out for \"{DEFAULT_SERVICE_NAME}\"")),
                );
                None
            }
        });
    TelemetryConfig {
        otlp_endpoint,
        service_name,
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check(text: &str, expect: Expect) {
        let actual = match crate::parse_toml(text, std::path::Path::new("/x/mcpgw.toml")) {
            Ok(config) => format!(
                "endpoint={:?} traces={:?} service={:?}",
                config.telemetry.otlp_endpoint.as_ref().map(Url::as_str),
                config
                    .telemetry
                    .otlp_endpoint
                    .as_ref()
                    .map(|url| traces_url(url).to_string()),
                config.telemetry.service_name
            ),
            Err(error) => error.to_string(),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn telemetry_is_off_unless_an_endpoint_is_written() {
        check("", expect![[r#"endpoint=None traces=None service=None"#]]);
        check(
            "[telemetry]\n",
            expect![[r#"endpoint=None traces=None service=None"#]],
        );
        check(
            "[telemetry]\nservice_name = \"gw-eu\"\n",
            expect![[r#"endpoint=None traces=None service=Some("gw-eu")"#]],
        );
    }

    #[test]
    fn traces_go_beneath_the_base_url_once() {
        check(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n",
            expect![[
                r#"endpoint=Some("http://127.0.0.1:4318/") traces=Some("http://127.0.0.1:4318/v1/traces") service=None"#
            ]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"https://otel.example/collector/\"\n",
            expect![[
                r#"endpoint=Some("https://otel.example/collector/") traces=Some("https://otel.example/collector/v1/traces") service=None"#
            ]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"http://otel:4318/v1/traces\"\n",
            expect![[
                r#"endpoint=Some("http://otel:4318/v1/traces") traces=Some("http://otel:4318/v1/traces") service=None"#
            ]],
        );
    }

    #[test]
    fn every_bad_telemetry_key_is_reported_without_echoing_the_url() {
        check(
            "[telemetry]\notlp_endpoint = \"127.0.0.1:4318\"\nservice_name = \" \"\n",
            expect![[r#"
                invalid configuration (2 problems):
                  2:1: telemetry.otlp_endpoint: invalid url: relative URL without a base (hint: write the collector's OTLP/HTTP address, e.g. "http://127.0.0.1:4318")
                  3:1: telemetry.service_name: service_name is empty (hint: leave it out for "mcpgw")"#]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"grpc://collector:4317\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: telemetry.otlp_endpoint: url scheme `grpc` is not supported: traces are sent over OTLP/HTTP (hint: use an http:// or https:// url (OTLP over gRPC is not built in))"#]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"https://user:hunter2@otel.example\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: telemetry.otlp_endpoint: the url holds credentials, which must not be written in it (hint: send them as headers from the environment: OTEL_EXPORTER_OTLP_HEADERS="authorization=...")"#]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"https://otel.example/?api_key=hunter2\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: telemetry.otlp_endpoint: the url has a query or fragment, which OTLP/HTTP does not use (hint: keep scheme, host, port and path only; credentials go in OTEL_EXPORTER_OTLP_HEADERS)"#]],
        );
        check(
            "[telemetry]\notlp_endpoint = \"not a url\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: telemetry.otlp_endpoint: invalid url: relative URL without a base (hint: write the collector's OTLP/HTTP address, e.g. "http://127.0.0.1:4318")"#]],
        );
        check(
            "[telemetry]\nendpoint = \"http://x:4318\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: telemetry.endpoint: unknown key (hint: the keys here are `otlp_endpoint`, `service_name`)"#]],
        );
    }

    #[test]
    fn service_names_are_short_printable_text() {
        assert_eq!(service_name(" gw "), Ok("gw".to_owned()));
        assert!(service_name(&"x".repeat(256)).is_err());
        assert!(service_name("a\nb").is_err());
    }
}
