//! `GET /admin/v1/openapi.json` on a real `mcpgw serve` (issue 16): the document is valid
//! OpenAPI 3.1 by `openapi-spec-validator`; every operation it documents is asked of the running
//! gateway and answers with a status it documents and a body its schema accepts (checked with
//! JSON Schema 2020-12, as OpenAPI 3.1 says); every method a documented path does not document
//! is refused with 405; and the route is guarded like its siblings.

use std::{collections::BTreeSet, process::Command, thread, time::Duration};

use serde_json::{Value, json};

use crate::harness::*;

const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// `METHOD path` on the gateway with `headers` and, for a write, a JSON body: the status and
/// the body (JSON, `null` when there is none, the text as a string when it is not JSON).
fn ask(
    gateway: &Gateway,
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut request = reqwest::blocking::Client::new()
        .request(method, format!("http://127.0.0.1:{}{path}", gateway.port))
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.body(body.to_string());
    }
    let response = request.send().expect("gateway reachable");
    let status = response.status().as_u16();
    let text = response.text().unwrap_or_default();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, body)
}

/// `tests/clients/openapi_check.py` on `document` and `answers`: its report.
fn check(document: &Value, answers: &Value) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let (document_file, answers_file) =
        (dir.path().join("openapi.json"), dir.path().join("a.json"));
    std::fs::write(&document_file, document.to_string()).expect("write document");
    std::fs::write(&answers_file, answers.to_string()).expect("write answers");
    let output = Command::new(venv_bin("python"))
        .arg(repo_root().join("tests/clients/openapi_check.py"))
        .arg(&document_file)
        .arg(&answers_file)
        .output()
        .expect("the venv's python runs (scripts/setup-test-env.sh)");
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|_| panic!("a JSON report: {}", text(&output.stdout)))
}

/// Every operation of `document`: (METHOD, path).
fn operations(document: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in METHODS {
            if item.get(method.to_lowercase()).is_some() {
                operations.insert((method.to_owned(), path.clone()));
            }
        }
    }
    operations
}

/// The gateway of the main test: `time`, whose `get_current_time` needs approval, and a
/// profile.
fn config() -> ConfigDir {
    write_config(&format!(
        "{}\n[[approval.rules]]\ntools = [\"time__get_current_time\"]\naction = \"require\"\n\n[[profiles]]\nname = \"viewer\"\nallow = [\"time__convert_*\"]\n",
        time_stdio_server("time")
    ))
}

/// A call to `time__get_current_time` that waits for a person (the client has no
/// elicitation): the thread that made it ends with its report once it is decided.
fn waiting_call(gateway: &Gateway) -> thread::JoinHandle<Value> {
    let url = gateway.url();
    thread::spawn(move || {
        py_client(
            &["--url", &url],
            "legacy",
            json!([{"op": "call_tool", "name": "call_tool", "arguments": {
                "name": "time__get_current_time", "arguments": {"timezone": "UTC"}}}]),
        )
    })
}

/// One request per documented operation, in an order where each can succeed: the document's
/// path, the path asked, the body sent, and the status the request should get. A server
/// `clock` is added, read, changed, disabled, enabled, tested and removed; `time` stays. The
/// pending approvals `approve` and `reject` are decided; a client `probe` is added and removed.
fn probes(
    time_server: &str,
    approve: &str,
    reject: &str,
) -> Vec<(&'static str, &'static str, String, Option<Value>, u16)> {
    let clock = json!({"name": "clock", "transport": {"type": "stdio", "command": time_server}});
    vec![
        (
            "GET",
            "/admin/v1/openapi.json",
            "/admin/v1/openapi.json".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/servers",
            "/admin/v1/servers".into(),
            None,
            200,
        ),
        (
            "POST",
            "/admin/v1/servers",
            "/admin/v1/servers".into(),
            Some(clock.clone()),
            201,
        ),
        (
            "GET",
            "/admin/v1/servers/{name}",
            "/admin/v1/servers/clock".into(),
            None,
            200,
        ),
        (
            "PATCH",
            "/admin/v1/servers/{name}",
            "/admin/v1/servers/clock".into(),
            Some(json!({"timeout_s": 60})),
            200,
        ),
        (
            "PUT",
            "/admin/v1/servers/{name}",
            "/admin/v1/servers/clock".into(),
            Some(clock),
            200,
        ),
        (
            "POST",
            "/admin/v1/servers/{name}/disable",
            "/admin/v1/servers/clock/disable".into(),
            Some(json!({})),
            200,
        ),
        (
            "POST",
            "/admin/v1/servers/{name}/enable",
            "/admin/v1/servers/clock/enable".into(),
            Some(json!({})),
            200,
        ),
        (
            "POST",
            "/admin/v1/servers/{name}/test",
            "/admin/v1/servers/clock/test".into(),
            Some(json!({})),
            200,
        ),
        (
            "GET",
            "/admin/v1/servers/{name}/credentials",
            "/admin/v1/servers/clock/credentials".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/tools",
            "/admin/v1/tools?server=time".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/tools/held",
            "/admin/v1/tools/held".into(),
            None,
            200,
        ),
        // Nothing is held (`time` never changes its definitions): the handler's 404 in the
        // documented shape. `admin_records.rs` trusts a real held definition.
        (
            "POST",
            "/admin/v1/tools/held/{name}/approve",
            "/admin/v1/tools/held/time__get_current_time/approve".into(),
            Some(json!({})),
            404,
        ),
        (
            "GET",
            "/admin/v1/search",
            "/admin/v1/search?q=current+time&top_k=3&strategy=bm25&server=time".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/search/compare",
            "/admin/v1/search/compare?q=current+time&top_k=3&server=time".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/audit",
            "/admin/v1/audit?limit=10&since=1d".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/approvals",
            "/admin/v1/approvals?status=all".into(),
            None,
            200,
        ),
        (
            "POST",
            "/admin/v1/approvals/{id}/approve",
            format!("/admin/v1/approvals/{approve}/approve"),
            Some(json!({"arguments": {"timezone": "Europe/Paris"}})),
            200,
        ),
        (
            "POST",
            "/admin/v1/approvals/{id}/reject",
            format!("/admin/v1/approvals/{reject}/reject"),
            Some(json!({"reason": "not now"})),
            200,
        ),
        (
            "POST",
            "/admin/v1/clients",
            "/admin/v1/clients".into(),
            Some(json!({"name": "probe"})),
            201,
        ),
        (
            "GET",
            "/admin/v1/clients",
            "/admin/v1/clients".into(),
            None,
            200,
        ),
        (
            "DELETE",
            "/admin/v1/clients/{name}",
            "/admin/v1/clients/probe".into(),
            Some(json!({})),
            204,
        ),
        (
            "GET",
            "/admin/v1/profiles",
            "/admin/v1/profiles".into(),
            None,
            200,
        ),
        (
            "GET",
            "/admin/v1/connections",
            "/admin/v1/connections".into(),
            None,
            200,
        ),
        // `time` has no OAuth: the documented 409. `admin_records.rs` signs in to a real
        // OAuth server.
        (
            "POST",
            "/admin/v1/connections/{server}/signin",
            "/admin/v1/connections/time/signin".into(),
            Some(json!({})),
            409,
        ),
        // A client that never had a session with `time` nor signed in: the handler's 404, in
        // the documented error shape (the router's own 404 has no body and would fail the
        // schema). `local` would end the gateway's own session with the server: 204.
        (
            "DELETE",
            "/admin/v1/connections/{server}/{principal}",
            "/admin/v1/connections/time/client:nobody".into(),
            Some(json!({})),
            404,
        ),
        (
            "DELETE",
            "/admin/v1/servers/{name}",
            "/admin/v1/servers/clock".into(),
            Some(json!({})),
            200,
        ),
    ]
}

#[test]
fn the_openapi_document_is_valid_and_every_operation_answers_as_documented() {
    let time_server = venv_bin("mcp-server-time");
    let gateway = Gateway::start(config());
    let token = gateway.admin_token();
    let admin = [("x-mcpgw-admin-token", token.as_str())];

    // Two calls wait for a person: one to approve, one to reject.
    let callers = [waiting_call(&gateway), waiting_call(&gateway)];
    let mut pending = Vec::new();
    wait_until("two calls to wait", Duration::from_secs(60), || {
        let (_, listed) = ask(&gateway, "GET", "/admin/v1/approvals", None, &admin);
        pending = listed["approvals"].as_array().cloned().unwrap_or_default();
        pending.len() == 2
    });
    let id = |n: usize| pending[n]["id"].as_str().expect("an id").to_owned();
    let (approve, reject) = (id(0), id(1));

    let (status, document) = ask(&gateway, "GET", "/admin/v1/openapi.json", None, &admin);
    assert_eq!(status, 200, "{document}");
    assert_eq!(document["openapi"], "3.1.0", "{document}");

    // The validator is real: a document it must refuse (a path parameter never declared).
    let mut broken = document.clone();
    broken["paths"]["/admin/v1/servers/{name}"]["parameters"] = json!([]);
    let report = check(&broken, &json!([]));
    assert_eq!(report["valid"], false, "{report}");
    assert!(
        report["error"]
            .as_str()
            .is_some_and(|e| e.contains("'name'")),
        "{report}"
    );

    // Every documented operation, asked once; the list of probes is the document's list.
    let probes = probes(&time_server, &approve, &reject);
    let probed: BTreeSet<(String, String)> = probes
        .iter()
        .map(|(method, path, ..)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(
        probed,
        operations(&document),
        "each documented operation has one probe here, and each probe is documented"
    );
    let mut answers = Vec::new();
    for (method, path, asked, body, expected) in &probes {
        let (status, answer) = ask(&gateway, method, asked, body.as_ref(), &admin);
        assert_eq!(status, *expected, "{method} {asked}: {answer}");
        answers.push(json!({"method": method, "path": path, "status": status, "body": answer}));
    }
    let report = check(&document, &Value::Array(answers));
    assert_eq!(report["valid"], true, "{report}");
    let answers = report["answers"].as_array().expect("answers");
    assert_eq!(answers.len(), probes.len(), "{report}");
    for answer in answers {
        assert_eq!(
            answer["problems"],
            json!([]),
            "the answer is not what the document says: {answer}"
        );
    }

    // The decided calls end: one ran (with the approver's arguments), one was refused.
    let reports: Vec<Value> = callers
        .into_iter()
        .map(|caller| caller.join().expect("the caller"))
        .collect();
    let mut errors: Vec<bool> = reports
        .iter()
        .map(|report| report["steps"][0]["isError"] == true)
        .collect();
    errors.sort_unstable();
    assert_eq!(errors, [false, true], "{reports:?}");
    assert!(
        reports
            .iter()
            .any(|report| report["steps"][0]["isError"] == false
                && result_text(&report["steps"][0]).contains("Europe/Paris")),
        "the approved call ran with the approver's arguments: {reports:?}"
    );
    // A decided approval is not decided again; an unknown id is not found.
    for (asked, expected) in [
        (format!("/admin/v1/approvals/{approve}/reject"), 409),
        ("/admin/v1/approvals/nothing/approve".to_owned(), 404),
    ] {
        let (status, answer) = ask(&gateway, "POST", &asked, Some(&json!({})), &admin);
        assert_eq!(status, expected, "{asked}: {answer}");
        assert!(answer["error"].is_string(), "{answer}");
    }

    // No method a documented path leaves out is routed: 405 (not 404, and not served).
    let documented = operations(&document);
    for path in document["paths"].as_object().expect("paths").keys() {
        let asked = path
            .replace("{name}", "time")
            .replace("{server}", "time")
            .replace("{principal}", "local")
            .replace("{id}", "nothing");
        for method in METHODS {
            if documented.contains(&(method.to_owned(), path.clone())) {
                continue;
            }
            let (status, answer) = ask(&gateway, method, &asked, Some(&json!({})), &admin);
            assert_eq!(
                status, 405,
                "{method} {asked} is routed but not documented: {answer}"
            );
        }
    }
    // And a path the document does not have is not served.
    let (status, _) = ask(&gateway, "GET", "/admin/v1/nothing-here", None, &admin);
    assert_eq!(status, 404);
}

#[test]
fn the_openapi_document_is_refused_without_the_admin_credential_like_its_siblings() {
    // The open loopback listener: the admin token, and never another site.
    let gateway = Gateway::start(write_config(&time_stdio_server("time")));
    for path in ["/admin/v1/openapi.json", "/admin/v1/servers"] {
        let (status, answer) = ask(&gateway, "GET", path, None, &[]);
        assert_eq!(status, 401, "{path}: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("admin token")),
            "{path}: {answer}"
        );
        let (status, _) = ask(
            &gateway,
            "GET",
            path,
            None,
            &[("x-mcpgw-admin-token", "not-the-token")],
        );
        assert_eq!(status, 401, "{path}");
        let token = gateway.admin_token();
        let (status, answer) = ask(
            &gateway,
            "GET",
            path,
            None,
            &[
                ("x-mcpgw-admin-token", &token),
                ("origin", "https://evil.example"),
            ],
        );
        assert_eq!(status, 403, "{path} from another site: {answer}");
    }
    drop(gateway);

    // A keyed listener: an administrator's key, not any client's.
    let config = write_config(&format!(
        "{}\n[[profiles]]\nname = \"ops\"\nclients = [\"boss\"]\nadmin = true\n\n[[profiles]]\nname = \"viewer\"\nclients = [\"bob\"]\n",
        time_stdio_server("time")
    ));
    let boss = format!("Bearer {}", add_client(&config.path, "boss"));
    let bob = format!("Bearer {}", add_client(&config.path, "bob"));
    let gateway = Gateway::start(config);
    for path in ["/admin/v1/openapi.json", "/admin/v1/servers"] {
        let (status, _) = ask(&gateway, "GET", path, None, &[]);
        assert_eq!(status, 401, "{path} without a key");
        let (status, answer) = ask(&gateway, "GET", path, None, &[("authorization", &bob)]);
        assert_eq!(status, 403, "{path} for a viewer: {answer}");
        assert!(
            answer["error"]
                .as_str()
                .is_some_and(|e| e.contains("client:bob is not an administrator")),
            "{answer}"
        );
        let (status, answer) = ask(&gateway, "GET", path, None, &[("authorization", &boss)]);
        assert_eq!(status, 200, "{path} for an administrator: {answer}");
    }
}
