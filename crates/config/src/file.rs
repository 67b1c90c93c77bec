//! The mcpgw.toml file as written: serde types that reject unknown fields and keep
//! everything else loose (`Option`s, signed numbers) so `validate` can report all problems.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::{ClientAuth, Exposure, LogFormat, Prefix, Strategy};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConfigFile {
    #[serde(default)]
    pub gateway: GatewayFile,
    #[serde(default)]
    pub servers: Vec<ServerFile>,
    #[serde(default)]
    pub retrieval: RetrievalFile,
    #[serde(default)]
    pub store: StoreFile,
    #[serde(default)]
    pub network: NetworkFile,
    #[serde(default)]
    pub profiles: Vec<crate::policy::ProfileFile>,
    #[serde(default)]
    pub approval: crate::policy::ApprovalFile,
    #[serde(default)]
    pub limits: crate::policy::LimitsFile,
    #[serde(default)]
    pub audit: AuditFile,
    #[serde(default)]
    pub telemetry: TelemetryFile,
}

/// `[network]`: where outbound HTTP may go besides public https. Entries stay strings here so
/// that every bad one is a located problem (`validate`), not one parse error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetworkFile {
    #[serde(default)]
    pub allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GatewayFile {
    /// A string rather than `SocketAddr` so a bad address is a located problem with a hint.
    pub listen: Option<String>,
    pub exposure: Option<Exposure>,
    pub prefix: Option<Prefix>,
    pub token_budget: Option<i64>,
    pub pinned: Option<Vec<String>>,
    pub client_auth: Option<ClientAuth>,
    pub allow_unauthenticated_loopback: Option<bool>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub default_profile: Option<String>,
    pub jwt: Option<crate::policy::JwtFile>,
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RetrievalFile {
    pub strategy: Option<Strategy>,
    /// Signed so that `-1` is a located range problem, not a type error.
    pub balance: Option<i64>,
    pub min_similarity: Option<f64>,
    pub adaptive: Option<bool>,
    pub feedback: Option<bool>,
    pub vector_feedback: Option<bool>,
    pub fusion: Option<crate::Fusion>,
    pub field_vectors: Option<bool>,
    pub splade: Option<bool>,
    pub embedder: Option<EmbedderFile>,
}

/// `[retrieval.embedder]`: which model turns text into vectors.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum EmbedderFile {
    /// No embedder: BM25 only.
    None {},
    Local(LocalEmbedderFile),
    Remote(RemoteEmbedderFile),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LocalEmbedderFile {
    pub model: Option<String>,
    pub path: Option<String>,
    /// A second local model's name, or "none".
    pub blend: Option<String>,
    pub blend_weight: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoteEmbedderFile {
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub batch_size: Option<i64>,
    pub timeout_s: Option<i64>,
    pub retries: Option<i64>,
    pub dimensions: Option<i64>,
}

/// `[store]`: the database: a SQLite file (`path`, or `url = "sqlite://PATH"`) or PostgreSQL
/// (`url = "postgres://..."`), and where its secret key comes from.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StoreFile {
    pub path: Option<String>,
    pub url: Option<String>,
    pub key_file: Option<String>,
    pub redis: Option<UrlFile>,
    /// Signed so that `0` or `-1` is a located range problem, not a type error.
    pub replicas: Option<i64>,
    pub replica: Option<String>,
}

/// A URL that may hold a password: written out, or `{ env = "VAR" }`, read from the
/// environment when the configuration is loaded (a Kubernetes Secret, for example).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum UrlFile {
    Plain(String),
    Env(EnvRef),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvRef {
    pub env: String,
}

/// `[audit]`: how long the audit log keeps its rows. Signed so that `-1` is a located range
/// problem, not a type error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditFile {
    pub retention_days: Option<i64>,
    pub max_rows: Option<i64>,
}

/// `[telemetry]`: where traces go. Strings, so a bad URL is a located problem with a hint.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetryFile {
    pub otlp_endpoint: Option<String>,
    pub service_name: Option<String>,
}

/// Required fields are `Option`s here: a missing one is a problem to collect, not a parse
/// error that hides every other problem.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServerFile {
    pub name: Option<String>,
    pub description: Option<String>,
    /// Signed so that `-1` is reported as out of range rather than as a type error.
    pub timeout_s: Option<i64>,
    /// Seconds between background re-listings; `0` turns them off.
    pub refresh_s: Option<i64>,
    /// Seconds between liveness pings; `0` turns them off.
    pub ping_s: Option<i64>,
    /// Unanswered pings in a row after which the server is restarted.
    pub ping_misses: Option<i64>,
    pub enabled: Option<bool>,
    pub transport: Option<TransportFile>,
    pub auth: Option<AuthFile>,
    pub allow_private_network: Option<bool>,
    pub trust_changes: Option<bool>,
}

/// `auth = { type = "bearer", env = "VAR" }` and friends. Tagged like [`TransportFile`], with
/// `deny_unknown_fields` on each variant's struct for the same reason.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum AuthFile {
    None(NoAuthFile),
    Bearer(BearerAuthFile),
    Header(HeaderAuthFile),
    OAuth(OAuthFile),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoAuthFile {}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BearerAuthFile {
    pub env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HeaderAuthFile {
    pub name: Option<String>,
    pub scheme: Option<String>,
    pub env: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OAuthFile {
    #[serde(default)]
    pub scopes: Vec<String>,
    pub client_id: Option<String>,
    pub client_secret_env: Option<String>,
    pub client_metadata_url: Option<String>,
    pub redirect_uri: Option<String>,
    #[serde(default)]
    pub authorization_params: BTreeMap<String, String>,
    #[serde(default)]
    pub token_params: BTreeMap<String, String>,
    pub resource: Option<String>,
}

/// Internally tagged. `deny_unknown_fields` has to sit on each variant's struct: serde
/// hands the variant the table minus `type`, and the struct is what knows its fields.
/// The tests pin this down because serde's tagged enums have ignored such attributes before.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum TransportFile {
    Stdio(StdioFile),
    Http(HttpFile),
    Sse(HttpFile),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StdioFile {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, ValueFile>,
    pub cwd: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpFile {
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, ValueFile>,
}

/// `"infra"` or `{ env = "VAR", prefix = "Bearer " }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ValueFile {
    Plain(String),
    Env { env: String, prefix: Option<String> },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvRefFile {
    env: String,
    prefix: Option<String>,
}

// Hand-written rather than `#[serde(untagged)]`: untagged enums replace the precise error
// (`unknown field `prefx``) with "data did not match any variant".
impl<'de> Deserialize<'de> for ValueFile {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ValueVisitor;

        impl<'de> Visitor<'de> for ValueVisitor {
            type Value = ValueFile;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a string or a secret reference like { env = "VAR" }"#)
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<ValueFile, E> {
                Ok(ValueFile::Plain(text.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ValueFile, A::Error> {
                let EnvRefFile { env, prefix } =
                    EnvRefFile::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(ValueFile::Env { env, prefix })
            }
        }

        deserializer.deserialize_any(ValueVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use expect_test::{Expect, expect};

    /// The problems `text` is read with, or how many servers it has.
    fn check(text: &str, expect: Expect) {
        let actual = match crate::parse_toml(text, Path::new("mcpgw.toml")) {
            Ok(config) => format!("ok {} servers", config.servers.len()),
            Err(err) => err.to_string(),
        };
        expect.assert_eq(&actual);
    }

    #[test]
    fn unknown_field_at_top_level() {
        check(
            "[gateway]\nlisten = \"127.0.0.1:1\"\n\n[retrieval]\nstrategy = \"bm25\"\n\n[tls]\ncert = \"x\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  7:2: tls: unknown key (hint: the keys here are `gateway`, `servers`, `retrieval`, `store`, `network`, `profiles`, `approval`, `limits`, `audit`, `telemetry`)"#]],
        );
    }

    #[test]
    fn unknown_field_in_gateway() {
        check(
            "[gateway]\nlisten = \"127.0.0.1:1\"\nport = 3\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:1: gateway.port: unknown key (hint: the keys here are `listen`, `exposure`, `prefix`, `token_budget`, `pinned`, `client_auth`, `allow_unauthenticated_loopback`, `allowed_hosts`, `allowed_origins`, `default_profile`, `jwt`, `log_format`)"#]],
        );
    }

    #[test]
    fn unknown_field_in_server() {
        check(
            "[[servers]]\nname = \"a\"\ntimeout = 3\ntransport = { type = \"stdio\", command = \"x\" }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:1: servers[0].timeout: unknown key (hint: did you mean `timeout_s`?)"#]],
        );
    }

    #[test]
    fn unknown_field_inside_transport() {
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"stdio\", command = \"x\", url = \"http://x\" }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:46: servers[0].transport.url: unknown key (hint: the keys here are `command`, `args`, `env`, `cwd`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\n\n[servers.transport]\ntype = \"http\"\nurl = \"http://x\"\nheader = {}\n",
            expect![[r#"
                invalid configuration (1 problem):
                  7:1: servers[0].transport.header: unknown key (hint: did you mean `headers`?)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"sse\", url = \"http://x\", headers = { A = { env = \"X\", prefx = \"B\" } } }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:76: servers[0].transport.headers.A.prefx: unknown key (hint: did you mean `prefix`?)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"ws\", url = \"http://x\" }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:22: servers[0].transport.type: unknown value `ws` (hint: use one of `stdio`, `http`, `sse`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\ntransport = { url = \"http://x\" }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:13: servers[0].transport: missing field `type`"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\ntransport = { type = \"stdio\", command = \"x\", env = { A = 1 } }\n",
            expect![[r#"
                invalid configuration (1 problem):
                  3:13: servers[0].transport: invalid type: integer `1`, expected a string or a secret reference like { env = "VAR" }"#]],
        );
    }

    #[test]
    fn unknown_field_or_type_in_auth() {
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"bearer\", token = \"x\" }\n",
            expect![[r#"
                invalid configuration (3 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:1: servers[0].auth.env: missing env (hint: name the environment variable that holds the credential, such as env = "A_TOKEN")
                  3:27: servers[0].auth.token: unknown key (hint: the keys here are `env`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"header\", name = \"X\", env = \"E\", prefix = \"x\" }\n",
            expect![[r#"
                invalid configuration (2 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:50: servers[0].auth.prefix: unknown key (hint: the keys here are `name`, `scheme`, `env`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"none\", env = \"E\" }\n",
            expect![[r#"
                invalid configuration (2 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:25: servers[0].auth.env: unknown key (hint: this table takes no other keys; remove the line)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\n[servers.auth]\ntype = \"oauth\"\nscope = \"read\"\n",
            expect![[r#"
                invalid configuration (3 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:1: servers[0].auth: invalid type: a string, expected an array
                  5:1: servers[0].auth.scope: unknown key (hint: did you mean `scopes`?)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"basic\", env = \"E\" }\n",
            expect![[r#"
                invalid configuration (2 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:17: servers[0].auth.type: unknown value `basic` (hint: use one of `none`, `bearer`, `header`, `oauth`)"#]],
        );
        check(
            "[[servers]]\nname = \"a\"\nauth = { type = \"oauth\", scopes = \"read write\" }\n",
            expect![[r#"
                invalid configuration (2 problems):
                  1:1: servers[0].transport: missing transport (hint: add transport = { type = "stdio", command = "..." } or { type = "http", url = "https://..." })
                  3:8: servers[0].auth: invalid type: a string, expected an array"#]],
        );
    }

    #[test]
    fn audit_fields_are_checked_for_name_and_type_with_their_position() {
        check(
            "[audit]\nretention_days = 30\nmax_rows = 0\n",
            expect!["ok 0 servers"],
        );
        check(
            "[audit]\nretention = 30\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:1: audit.retention: unknown key (hint: the keys here are `retention_days`, `max_rows`)"#]],
        );
        check(
            "[audit]\nretention_days = \"90d\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:18: audit.retention_days: invalid type: a string, expected an integer"#]],
        );
        check(
            "[audit]\nmax_rows = 1e6\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:12: audit.max_rows: invalid type: floating point `1000000.0`, expected an integer"#]],
        );
        check(
            "[audit]\nmax_rows = 99999999999999999999\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:12: audit.max_rows: invalid type: integer `99999999999999999999`, expected an integer"#]],
        );
    }

    #[test]
    fn syntax_error_has_position() {
        check(
            "[gateway]\nlisten = \n",
            expect!["mcpgw.toml:2:10: string values must be quoted, expected literal string"],
        );
        check(
            "[gateway]\nexposure = \"all\"\n",
            expect![[r#"
                invalid configuration (1 problem):
                  2:12: gateway.exposure: unknown value `all` (hint: use one of `search`, `passthrough`, `auto`)"#]],
        );
        check("", expect!["ok 0 servers"]);
    }
}
