//! `mcpgw migrate` and `mcpgw store copy` through the real binary, against real SQLite files
//! and a real PostgreSQL (`scripts/test-postgres.sh start`; `$MCPGW_TEST_POSTGRES_URL` or
//! `.peers/postgres/url`). Each PostgreSQL test works in a schema of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use secrecy::ExposeSecret as _;
use sqlx::Connection as _;

use crate::harness::{mcpgw, repo_root, text};

/// A password the test server (trust authentication) ignores: it must never be shown.
const PASSWORD: &str = "hunter2-not-shown";

/// A fresh schema in the test PostgreSQL, and the URL of it (with [`PASSWORD`] in it).
pub(crate) fn postgres_schema() -> String {
    let base = match std::env::var("MCPGW_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => {
            let file = repo_root().join(".peers/postgres/url");
            std::fs::read_to_string(&file)
                .map(|url| url.trim().to_owned())
                .unwrap_or_else(|_| {
                    panic!(
                        "no PostgreSQL for the tests: MCPGW_TEST_POSTGRES_URL is not set and {} \
                         does not exist; start it with `scripts/test-postgres.sh start`",
                        file.display()
                    )
                })
        }
    };
    let schema = format!(
        "cli_{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut admin = sqlx::PgConnection::connect(&base).await.unwrap_or_else(|e| {
            panic!("cannot reach the test PostgreSQL: {e}; start it with `scripts/test-postgres.sh start`")
        });
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(&mut admin)
            .await
            .expect("create schema");
        let _ = admin.close().await;
    });
    let with_password = base.replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1);
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{with_password}{separator}options[search_path]={schema}")
}

/// Runs `mcpgw ARGS` (no configuration needed), with `env` set and `MCPGW_SECRET_KEY` unset.
fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(mcpgw());
    command
        .args(args)
        .env_remove("MCPGW_SECRET_KEY")
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("mcpgw runs")
}

fn shown(output: &std::process::Output) -> String {
    format!("{}{}", text(&output.stdout), text(&output.stderr))
}

/// What the installation being moved holds, written through the store as the gateway would.
struct Filled {
    client_key: String,
    audit: Vec<store::AuditEntry>,
    approval_id: String,
}

const ISSUER: &str = "https://auth.example.com";
const REDIRECT: &str = "http://127.0.0.1:8931/oauth/callback";

async fn fill(store: &store::Store) -> Filled {
    let client_key = store
        .add_client("ci")
        .await
        .expect("client")
        .expose_secret()
        .to_owned();
    store
        .put_client_registration(
            ISSUER,
            REDIRECT,
            &store::ClientRegistration {
                client_id: "client-1".into(),
                client_secret: Some("client-secret-1".to_owned().into()),
                metadata: r#"{"client_name":"mcpgw"}"#.into(),
            },
        )
        .await
        .expect("registration");
    store
        .put_credentials(
            "github",
            "local",
            &store::Credentials {
                issuer: ISSUER.into(),
                document: r#"{"access_token":"at-1","refresh_token":"rt-1"}"#.to_owned().into(),
                expires_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000)),
            },
        )
        .await
        .expect("credentials");
    store
        .put_auth_state(
            "state-1",
            &store::AuthState {
                server: "github".into(),
                principal: "local".into(),
                payload: r#"{"pkce":"verifier-1"}"#.to_owned().into(),
            },
        )
        .await
        .expect("auth state");
    let definition = serde_json::json!({"name": "echo", "description": "v1"});
    let changed = serde_json::json!({"name": "echo", "description": "v2"});
    let seen = |hash: u8, definition| store::SeenTool {
        server: "srv",
        tool: "echo",
        qualified: "srv__echo",
        hash: [hash; 32],
        definition,
    };
    store
        .pin_first_use(&[seen(1, &definition)])
        .await
        .expect("pin");
    store.hold_pins(&[seen(2, &changed)]).await.expect("hold");
    store
        .approve_pin("srv", "echo", None)
        .await
        .expect("approve");
    store
        .hold_pins(&[seen(3, &definition)])
        .await
        .expect("hold again");
    let arguments = serde_json::Map::from_iter([("path".to_owned(), serde_json::json!("/tmp/x"))]);
    let approval = store
        .create_approval(store::NewApproval {
            principal: "client:ci",
            server: "fs",
            tool: "fs__delete",
            arguments: &arguments,
            timeout: Duration::from_secs(600),
        })
        .await
        .expect("approval");
    store
        .decide_approval(
            &approval.id,
            store::Verdict::Approve { arguments: None },
            "local",
        )
        .await
        .expect("decided");
    let audit: Vec<store::AuditEntry> = (0..250u64)
        .map(|i| store::AuditEntry {
            at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + i / 2),
            principal: if i % 3 == 0 { "local" } else { "client:ci" }.into(),
            server: "fs".into(),
            tool: format!("fs__t{}", i % 7).into(),
            arguments_sha256: format!("{i:064x}"),
            decision: store::CallDecision::Allowed,
            outcome: store::CallOutcome::Ok,
            latency: Duration::from_millis(i),
            error: (i % 10 == 0).then(|| format!("error {i}")),
        })
        .collect();
    store.record_calls(&audit).await.expect("audit");
    store
        .put_embeddings(
            "all-MiniLM-L6-v2",
            &[
                (store::text_hash("read a file"), vec![0.5, -1.0, 2.0]),
                (store::text_hash("write a file"), vec![1.5, 0.0, -2.0]),
            ],
        )
        .await
        .expect("embeddings");
    assert!(
        store
            .try_lease(
                "refresh:github:local",
                "gateway-1",
                Duration::from_secs(600)
            )
            .await
            .expect("lease")
    );
    assert!(
        store
            .try_lease("refresh:linear:local", "gateway-1", Duration::ZERO)
            .await
            .expect("expired lease")
    );
    Filled {
        client_key,
        audit,
        approval_id: approval.id,
    }
}

/// Reads back through a store opened on the copy with the original key: everything is there.
async fn check(store: &store::Store, filled: &Filled) {
    assert_eq!(
        store
            .authenticate_client(&filled.client_key)
            .await
            .expect("auth")
            .as_deref(),
        Some("ci"),
        "the client key still works (its hash was copied)"
    );
    let registration = store
        .client_registration(ISSUER, REDIRECT)
        .await
        .expect("registration")
        .expect("present");
    assert_eq!(registration.client_id, "client-1");
    assert_eq!(
        registration
            .client_secret
            .as_ref()
            .map(|s| s.expose_secret()),
        Some("client-secret-1"),
        "the sealed client secret opens with the same key"
    );
    let credentials = store
        .credentials("github", "local")
        .await
        .expect("credentials")
        .expect("present");
    assert_eq!(
        credentials.document.expose_secret(),
        r#"{"access_token":"at-1","refresh_token":"rt-1"}"#
    );
    assert_eq!(
        credentials.expires_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_900_000_000))
    );
    let state = store
        .take_auth_state("state-1")
        .await
        .expect("state")
        .expect("present");
    assert_eq!(state.payload.expose_secret(), r#"{"pkce":"verifier-1"}"#);
    let pin = store
        .tool_pin("srv", "echo")
        .await
        .expect("pin")
        .expect("pinned");
    assert_eq!(pin.trusted.hash, [2; 32]);
    assert_eq!(pin.pending.as_ref().map(|p| p.hash), Some([3; 32]));
    assert_eq!(store.pins_generation().await.expect("generation"), 1);
    let approval = store
        .approval(&filled.approval_id)
        .await
        .expect("approval")
        .expect("present");
    assert_eq!(approval.status, store::ApprovalStatus::Approved);
    assert_eq!(approval.decided_by.as_deref(), Some("local"));
    let mut audit = store
        .audit_entries(&store::AuditQuery {
            limit: 1000,
            ..store::AuditQuery::default()
        })
        .await
        .expect("audit");
    audit.reverse();
    assert_eq!(audit, filled.audit, "every audit row, in the same order");
    let vectors = store
        .cached_embeddings(
            "all-MiniLM-L6-v2",
            &[
                store::text_hash("read a file"),
                store::text_hash("write a file"),
            ],
        )
        .await
        .expect("embeddings");
    assert_eq!(
        vectors[&store::text_hash("read a file")],
        vec![0.5, -1.0, 2.0]
    );
    assert_eq!(vectors.len(), 2);
    assert!(
        !store
            .try_lease("refresh:github:local", "gateway-2", Duration::from_secs(60))
            .await
            .expect("lease"),
        "a live lease keeps its holder"
    );
    // A new audit row after the copied ones gets the next id (PostgreSQL's identity moved on).
    let mut newest = filled.audit[0].clone();
    newest.at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_800_000_000_000);
    store.record_call(&newest).await.expect("a new row");
    let first = store
        .audit_entries(&store::AuditQuery {
            limit: 1,
            ..store::AuditQuery::default()
        })
        .await
        .expect("audit");
    assert_eq!(first, [newest]);
}

fn key_file(dir: &Path) -> PathBuf {
    dir.join("secret.key")
}

#[test]
fn store_copy_moves_everything_from_sqlite_to_postgres_and_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = dir.path().join("mcpgw.db");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    // The installation being moved: a SQLite file and the key file beside it.
    let filled = runtime.block_on(async {
        let store = store::Store::open_with(
            &sqlite,
            store::KeySource::new(key_file(dir.path())).with_env(|_| None),
        )
        .await
        .expect("sqlite");
        let filled = fill(&store).await;
        store.close().await;
        filled
    });
    assert!(key_file(dir.path()).exists());
    let from = format!("sqlite://{}", sqlite.display());
    let to = postgres_schema();

    let copied = run(&["store", "copy", &from, &to], &[]);
    let out = shown(&copied);
    assert!(copied.status.success(), "{out}");
    assert!(
        !out.contains(PASSWORD),
        "the password is never shown: {out}"
    );
    assert!(out.contains("postgres:***@"), "{out}");
    for (table, rows) in [
        ("audit", 250),
        ("clients", 1),
        ("oauth_clients", 1),
        ("oauth_credentials", 1),
        ("oauth_states", 1),
        ("tool_pins", 1),
        ("approvals", 1),
        ("embeddings", 2),
        ("leases", 1),
    ] {
        let line = format!("  {table:<18} {rows:>8} rows");
        assert!(out.contains(&line), "{line}\n{out}");
    }
    assert!(out.contains("skipped 1 expired lease(s)"), "{out}");

    // Copying again into the same database is refused: it holds rows now.
    let again = run(&["store", "copy", &from, &to], &[]);
    let out = shown(&again);
    assert_eq!(again.status.code(), Some(2), "{out}");
    assert!(out.contains("is not empty (embeddings: 2 rows"), "{out}");
    assert!(out.contains("--force"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");

    // The gateway's own commands read the copy through `[store] url`, with the key file from
    // outside the database.
    let config = dir.path().join("pg.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nurl = \"{to}\"\nkey_file = \"{}\"\n",
            key_file(dir.path()).display()
        ),
    )
    .expect("config");
    let listed = run(
        &[
            "clients",
            "list",
            "--json",
            "--config",
            &config.display().to_string(),
        ],
        &[],
    );
    assert!(listed.status.success(), "{}", shown(&listed));
    assert!(
        text(&listed.stdout).contains("\"ci\""),
        "{}",
        shown(&listed)
    );
    let status = run(
        &[
            "migrate",
            "status",
            "--config",
            &config.display().to_string(),
        ],
        &[],
    );
    let out = shown(&status);
    assert!(status.status.success(), "{out}");
    assert!(out.contains("backend:  postgres"), "{out}");
    assert!(
        out.contains(&format!("version {0} of {0}", store::latest_version())),
        "{out}"
    );
    assert!(out.contains("pending:  none"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");

    // Read everything back from PostgreSQL, then copy it back to a new SQLite file and read
    // everything there too (the second check also proves the first left the rows intact).
    let back = dir.path().join("back/mcpgw.db");
    runtime.block_on(async {
        let location = store::Location::parse(&to).expect("url");
        let keys = store::KeySource::external(Some(key_file(dir.path()))).with_env(|_| None);
        let store = store::Store::open_at(&location, keys)
            .await
            .expect("postgres");
        check(&store, &filled).await;
        store.close().await;
    });
    let copied_back = run(
        &[
            "store",
            "copy",
            &to,
            &format!("sqlite://{}", back.display()),
        ],
        &[],
    );
    assert!(copied_back.status.success(), "{}", shown(&copied_back));
    runtime.block_on(async {
        let keys = store::KeySource::new(key_file(dir.path())).with_env(|_| None);
        let store = store::Store::open_with(&back, keys).await.expect("sqlite");
        // What `check` left on PostgreSQL: the auth state taken, one audit row more.
        let mut audit = store
            .audit_entries(&store::AuditQuery {
                limit: 1000,
                ..store::AuditQuery::default()
            })
            .await
            .expect("audit");
        assert_eq!(audit.len(), 251);
        audit.remove(0);
        audit.reverse();
        assert_eq!(audit, filled.audit);
        assert!(
            store
                .take_auth_state("state-1")
                .await
                .expect("state")
                .is_none()
        );
        assert_eq!(
            store
                .authenticate_client(&filled.client_key)
                .await
                .expect("auth")
                .as_deref(),
            Some("ci")
        );
        let credentials = store
            .credentials("github", "local")
            .await
            .expect("credentials")
            .expect("the sealed credentials open in the SQLite copy too");
        assert!(credentials.document.expose_secret().contains("rt-1"));
        assert_eq!(store.pins_generation().await.expect("generation"), 1);
        store.close().await;
    });
}

#[test]
fn migrate_reports_and_applies_on_both_backends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}", dir.path().join("new/mcpgw.db").display());
    let postgres = postgres_schema();
    let latest = store::latest_version();
    for url in [sqlite.as_str(), postgres.as_str()] {
        let status = run(&["migrate", "status", "--url", url, "--json"], &[]);
        assert!(status.status.success(), "{}", shown(&status));
        let report: serde_json::Value =
            serde_json::from_slice(&status.stdout).expect("json status");
        assert_eq!(report["applied"], 0, "{report}");
        assert_eq!(report["latest"], latest);
        assert_eq!(
            report["pending"].as_array().map(Vec::len),
            Some(store::MIGRATIONS.len())
        );
        assert_eq!(report["pending"][0]["name"], "embeddings");
        assert!(!report.to_string().contains(PASSWORD));

        let applied = run(&["migrate", "apply", "--url", url], &[]);
        let out = shown(&applied);
        assert!(applied.status.success(), "{out}");
        assert!(out.contains("applied 0001 embeddings, 0002 oauth"), "{out}");
        assert!(out.contains(&format!("schema version {latest}")), "{out}");
        assert!(!out.contains(PASSWORD), "{out}");

        let again = run(&["migrate", "apply", "--url", url], &[]);
        assert!(
            shown(&again).contains("nothing to apply"),
            "{}",
            shown(&again)
        );
        let status = run(&["migrate", "--url", url], &[]);
        assert_eq!(
            status.status.code(),
            Some(2),
            "--url belongs to a subcommand"
        );
        let status = run(&["migrate", "status", "--url", url], &[]);
        let out = shown(&status);
        assert!(out.contains("pending:  none"), "{out}");
    }
    assert!(
        run(&["migrate", "status", "--url", "sqlite://"], &[])
            .status
            .code()
            == Some(2)
    );
    let bad = run(
        &["migrate", "status", "--url", "mysql://root:hunter2@db/x"],
        &[],
    );
    assert_eq!(bad.status.code(), Some(2));
    assert!(!shown(&bad).contains("hunter2"), "{}", shown(&bad));
}

#[test]
fn a_postgres_store_without_a_key_from_outside_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = postgres_schema();
    let config = dir.path().join("mcpgw.toml");
    std::fs::write(&config, format!("[store]\nurl = \"{url}\"\n")).expect("config");
    let config = config.display().to_string();
    let added = run(&["clients", "add", "ci", "--config", &config], &[]);
    let out = shown(&added);
    assert!(!added.status.success(), "{out}");
    assert!(out.contains("MCPGW_SECRET_KEY"), "{out}");
    assert!(out.contains("key_file"), "{out}");
    assert!(!out.contains(PASSWORD), "{out}");
    assert!(
        !dir.path().join("secret.key").exists(),
        "no key made up beside the configuration"
    );
    // With the key in the environment the same command works.
    let key = "KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";
    let added = run(
        &["clients", "add", "ci", "--config", &config],
        &[("MCPGW_SECRET_KEY", key)],
    );
    assert!(added.status.success(), "{}", shown(&added));
    assert!(text(&added.stdout).contains("mcpgw_"));
}
