//! Tests for [`RemoteEmbedder`] against a real OpenAI-style HTTP server on loopback.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::*;

const KEY: &str = "sk-test-SECRET";
const SERVER_DIM: usize = 16;

/// What the test server does; the default is a well-behaved OpenAI.
#[derive(Clone)]
struct Behaviour {
    /// The bearer token it accepts; `None` accepts anything, including no header.
    expected_key: Option<&'static str>,
    /// Answer the first `fail_first` requests with `fail_status`.
    fail_first: usize,
    fail_status: StatusCode,
    retry_after: Option<&'static str>,
    reverse: bool,
    drop_last: bool,
    /// Shorten the second vector by one component.
    ragged: bool,
    ignore_dimensions: bool,
    /// Multiplies every vector: real servers do not always normalise.
    scale: f32,
    /// Never answer.
    hang: bool,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            expected_key: Some(KEY),
            fail_first: 0,
            fail_status: StatusCode::SERVICE_UNAVAILABLE,
            retry_after: None,
            reverse: false,
            drop_last: false,
            ragged: false,
            ignore_dimensions: false,
            scale: 1.0,
            hang: false,
        }
    }
}

struct Recorded {
    at: Instant,
    authorization: Option<String>,
    body: Value,
}

struct Server {
    behaviour: Behaviour,
    requests: Mutex<Vec<Recorded>>,
}

impl Server {
    fn count(&self) -> usize {
        self.requests.lock().expect("requests lock").len()
    }

    fn batch_sizes(&self) -> Vec<usize> {
        let requests = self.requests.lock().expect("requests lock");
        requests
            .iter()
            .map(|r| r.body["input"].as_array().map_or(0, Vec::len))
            .collect()
    }
}

/// Binds first, then serves: connections made before the accept loop runs wait in the
/// listen queue, so no test needs to wait for readiness.
async fn serve(behaviour: Behaviour) -> (Arc<Server>, Url) {
    let server = Arc::new(Server {
        behaviour,
        requests: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/embeddings", post(embeddings))
        .with_state(Arc::clone(&server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (server, base_url(addr))
}

fn base_url(addr: SocketAddr) -> Url {
    Url::parse(&format!("http://{addr}/v1")).expect("valid url")
}

async fn embeddings(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let number = {
        let mut requests = server.requests.lock().expect("requests lock");
        requests.push(Recorded {
            at: Instant::now(),
            authorization: authorization.clone(),
            body: body.clone(),
        });
        requests.len()
    };
    let b = &server.behaviour;
    if b.hang {
        std::future::pending::<()>().await;
    }
    if let Some(key) = b.expected_key {
        let token = authorization
            .as_deref()
            .and_then(|a| a.strip_prefix("Bearer "));
        if token != Some(key) {
            // Echoes the token like careless servers do, to prove the client redacts it.
            let message = format!("Incorrect API key provided: {}.", token.unwrap_or(""));
            let error = json!({"error": {"message": message, "type": "invalid_request_error"}});
            return (StatusCode::UNAUTHORIZED, Json(error)).into_response();
        }
    }
    if number <= b.fail_first {
        let error =
            json!({"error": {"message": "the server is\noverloaded", "type": "server_error"}});
        let mut response = (b.fail_status, Json(error)).into_response();
        if let Some(seconds) = b.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static(seconds));
        }
        return response;
    }

    let dim = match body.get("dimensions").and_then(Value::as_u64) {
        Some(d) if !b.ignore_dimensions => usize::try_from(d).expect("small dimension"),
        _ => SERVER_DIM,
    };
    let inputs = body["input"].as_array().cloned().unwrap_or_default();
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let mut vector: Vec<f32> = raw_vector(text.as_str().unwrap_or(""), dim)
                .into_iter()
                .map(|x| x * b.scale)
                .collect();
            if b.ragged && index == 1 {
                vector.pop();
            }
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    if b.reverse {
        data.reverse();
    }
    if b.drop_last {
        data.pop();
    }
    Json(json!({"object": "list", "data": data, "model": body["model"]})).into_response()
}

/// Deterministic bag of words: each word adds ±1 to one of `dim` components. `<zero>` is
/// the zero vector, which a real model can produce for degenerate input.
fn raw_vector(text: &str, dim: usize) -> Vec<f32> {
    let mut vector = vec![0.0; dim];
    if text == "<zero>" {
        return vector;
    }
    for word in text.split_whitespace() {
        // FNV-1a: stable across runs and platforms, unlike std's hasher.
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let bucket = usize::try_from(hash % dim as u64).expect("bucket fits");
        vector[bucket] += if hash >> 63 == 0 { 1.0 } else { -1.0 };
    }
    vector
}

fn expected_vector(text: &str) -> Vec<f32> {
    let mut vector = raw_vector(text, SERVER_DIM);
    normalise(&mut vector).expect("test texts have non-zero vectors");
    vector
}

fn config(base_url: Url) -> RemoteConfig {
    RemoteConfig {
        api_key: Some(KEY.into()),
        ..RemoteConfig::new(base_url, "test-embed")
    }
}

/// The embedder under test, with a 1 ms backoff base so retry tests run fast; the backoff
/// curve itself is checked in `backoff_doubles_with_bounded_jitter`.
fn embedder(config: RemoteConfig) -> RemoteEmbedder {
    let mut embedder =
        RemoteEmbedder::new(config, reqwest::Client::new()).expect("valid configuration");
    embedder.backoff.base = Duration::from_millis(1);
    embedder
}

fn texts(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|&t| t.to_owned()).collect()
}

fn norm(vector: &[f32]) -> f64 {
    vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt()
}

fn assert_close(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-6, "{actual:?} vs {expected:?}");
    }
}

async fn embed_err(embedder: &RemoteEmbedder, input: &[&str]) -> String {
    match embedder.embed(&texts(input), TextKind::Passage).await {
        Ok(vectors) => panic!("expected an error, got {vectors:?}"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn vectors_come_back_in_input_order_across_batches() {
    let (server, url) = serve(Behaviour {
        reverse: true,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(RemoteConfig {
        batch_size: 2,
        ..config(url)
    });
    let input = texts(&[
        "search the web",
        "read a file",
        "create github issue",
        "send slack message",
        "query postgres database",
    ]);

    let vectors = embedder
        .embed(&input, TextKind::Passage)
        .await
        .expect("embeddings");

    assert_eq!(server.batch_sizes(), vec![2, 2, 1]);
    assert_eq!(vectors.len(), input.len());
    for (text, vector) in input.iter().zip(&vectors) {
        assert_close(vector, &expected_vector(text));
    }
    assert_eq!(embedder.dim(), SERVER_DIM);
}

#[tokio::test]
async fn request_carries_model_float_encoding_and_bearer_key() {
    let (server, url) = serve(Behaviour::default()).await;
    let embedder = embedder(config(url));

    embedder
        .embed(&texts(&["hello world"]), TextKind::Query)
        .await
        .expect("embeddings");

    let requests = server.requests.lock().expect("requests lock");
    assert_eq!(
        requests[0].body,
        json!({"model": "test-embed", "input": ["hello world"], "encoding_format": "float"})
    );
    assert_eq!(
        requests[0].authorization.as_deref(),
        Some("Bearer sk-test-SECRET")
    );
}

#[tokio::test]
async fn no_authorization_header_without_a_key() {
    let (server, url) = serve(Behaviour {
        expected_key: None,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(RemoteConfig::new(url, "local-model"));

    embedder
        .embed(&texts(&["hello"]), TextKind::Query)
        .await
        .expect("embeddings");

    let requests = server.requests.lock().expect("requests lock");
    assert_eq!(requests[0].authorization, None);
}

#[tokio::test]
async fn trailing_slash_on_base_url_reaches_the_same_endpoint() {
    let (server, url) = serve(Behaviour::default()).await;
    let with_slash = Url::parse(&format!("{url}/")).expect("valid url");
    let embedder = embedder(config(with_slash));

    embedder
        .embed(&texts(&["hello"]), TextKind::Query)
        .await
        .expect("embeddings");

    assert_eq!(server.count(), 1);
}

#[tokio::test]
async fn unnormalised_server_vectors_come_back_unit_length() {
    let (_server, url) = serve(Behaviour {
        scale: 7.5,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(config(url));
    let input = texts(&["alpha beta gamma", "delta"]);

    let vectors = embedder
        .embed(&input, TextKind::Passage)
        .await
        .expect("embeddings");

    for (text, vector) in input.iter().zip(&vectors) {
        assert!((norm(vector) - 1.0).abs() < 1e-6, "norm of {vector:?}");
        assert_close(vector, &expected_vector(text));
    }
}

#[tokio::test]
async fn connect_learns_the_dimension_with_one_probe() {
    let (server, url) = serve(Behaviour::default()).await;
    assert_eq!(embedder(config(url.clone())).dim(), 0, "new() does no IO");

    let embedder = RemoteEmbedder::connect(config(url), reqwest::Client::new())
        .await
        .expect("connect");

    assert_eq!(embedder.dim(), SERVER_DIM);
    assert_eq!(server.batch_sizes(), vec![1]);
}

#[tokio::test]
async fn connect_fails_early_on_a_wrong_key() {
    let (_server, url) = serve(Behaviour::default()).await;
    let config = RemoteConfig {
        api_key: Some("sk-wrong".into()),
        ..config(url)
    };

    let error = RemoteEmbedder::connect(config, reqwest::Client::new())
        .await
        .expect_err("wrong key");

    assert!(error.to_string().contains("401"), "{error}");
}

#[tokio::test]
async fn configured_dimensions_are_requested_and_known_up_front() {
    let (server, url) = serve(Behaviour::default()).await;
    let embedder = embedder(RemoteConfig {
        dimensions: Some(8),
        ..config(url)
    });
    assert_eq!(embedder.dim(), 8);

    let vectors = embedder
        .embed(&texts(&["hello"]), TextKind::Query)
        .await
        .expect("embeddings");

    assert_eq!(vectors[0].len(), 8);
    let requests = server.requests.lock().expect("requests lock");
    assert_eq!(requests[0].body["dimensions"], json!(8));
}

#[tokio::test]
async fn server_ignoring_dimensions_is_an_error() {
    let (_server, url) = serve(Behaviour {
        ignore_dimensions: true,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(RemoteConfig {
        dimensions: Some(8),
        ..config(url)
    });

    let error = embed_err(&embedder, &["hello"]).await;

    assert!(
        error.contains("asked for 8 dimensions, server returned 16"),
        "{error}"
    );
}

#[tokio::test]
async fn retries_503_then_succeeds() {
    let (server, url) = serve(Behaviour {
        fail_first: 2,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(config(url));

    let vectors = embedder
        .embed(&texts(&["hello"]), TextKind::Query)
        .await
        .expect("third attempt succeeds");

    assert_eq!(server.count(), 3);
    assert_close(&vectors[0], &expected_vector("hello"));
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let (server, url) = serve(Behaviour {
        fail_first: 1,
        fail_status: StatusCode::TOO_MANY_REQUESTS,
        retry_after: Some("1"),
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(config(url));

    embedder
        .embed(&texts(&["hello"]), TextKind::Query)
        .await
        .expect("second attempt succeeds");

    let requests = server.requests.lock().expect("requests lock");
    assert_eq!(requests.len(), 2);
    // The backoff base is 1 ms here, so only the header can explain a one-second gap.
    let gap = requests[1].at - requests[0].at;
    assert!(gap >= Duration::from_millis(950), "waited only {gap:?}");
}

#[tokio::test]
async fn does_not_retry_401_and_reports_the_server_message() {
    let (server, url) = serve(Behaviour {
        expected_key: Some("sk-the-right-one"),
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(config(url));

    let error = embed_err(&embedder, &["hello"]).await;

    assert_eq!(server.count(), 1);
    assert!(error.contains("401 Unauthorized"), "{error}");
    assert!(
        error.contains("Incorrect API key provided: [redacted]."),
        "{error}"
    );
}

#[tokio::test]
async fn gives_up_after_retries_with_the_last_status() {
    let (server, url) = serve(Behaviour {
        fail_first: usize::MAX,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(RemoteConfig {
        retries: 2,
        ..config(url)
    });

    let error = embed_err(&embedder, &["hello"]).await;

    assert_eq!(server.count(), 3);
    assert!(
        error.contains("gave up after 3 attempts; last error: server answered 503 Service Unavailable: the server is overloaded"),
        "{error}"
    );
}

#[tokio::test]
async fn times_out_on_a_server_that_hangs() {
    let (server, url) = serve(Behaviour {
        hang: true,
        ..Behaviour::default()
    })
    .await;
    let embedder = embedder(RemoteConfig {
        timeout: Duration::from_millis(200),
        retries: 1,
        ..config(url)
    });
    let started = Instant::now();

    let error = embed_err(&embedder, &["hello"]).await;

    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.count(), 2, "a timeout is retried");
    assert!(
        error.contains("gave up after 2 attempts; last error: request timed out after 200ms"),
        "{error}"
    );
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    // A port that was just free: nothing listens there once the listener is dropped.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let embedder = embedder(RemoteConfig {
        retries: 1,
        ..config(base_url(addr))
    });

    let error = embed_err(&embedder, &["hello"]).await;

    assert!(
        error.contains("gave up after 2 attempts; last error: could not connect"),
        "{error}"
    );
}

#[tokio::test]
async fn malformed_answers_are_rejected_without_retry() {
    // (behaviour, input, expected message)
    let cases: [(Behaviour, &[&str], &str); 3] = [
        (
            Behaviour {
                drop_last: true,
                ..Behaviour::default()
            },
            &["a", "b", "c"],
            "invalid response: expected 3 embeddings, got 2",
        ),
        (
            Behaviour {
                ragged: true,
                ..Behaviour::default()
            },
            &["a", "b"],
            "invalid response: embedding 1 has 15 dimensions, embedding 0 has 16",
        ),
        (
            Behaviour::default(),
            &["a", "<zero>"],
            "invalid response: embedding 1 is all zeros and cannot be normalised",
        ),
    ];
    for (behaviour, input, expected) in cases {
        let (server, url) = serve(behaviour).await;
        let embedder = embedder(config(url));

        let error = embed_err(&embedder, input).await;

        assert!(error.contains(expected), "{error}");
        assert_eq!(server.count(), 1, "{expected}: not retried");
    }
}

#[tokio::test]
async fn empty_input_sends_no_request() {
    let (server, url) = serve(Behaviour::default()).await;
    let embedder = embedder(config(url));

    let vectors = embedder
        .embed(&[], TextKind::Query)
        .await
        .expect("nothing to do");

    assert!(vectors.is_empty());
    assert_eq!(server.count(), 0);
}

#[tokio::test]
async fn key_never_appears_in_errors_or_debug_output() {
    let scenarios = [
        // The server echoes the rejected key in its message.
        Behaviour {
            expected_key: Some("sk-the-right-one"),
            ..Behaviour::default()
        },
        Behaviour {
            fail_first: usize::MAX,
            ..Behaviour::default()
        },
        Behaviour {
            drop_last: true,
            ..Behaviour::default()
        },
        Behaviour {
            hang: true,
            ..Behaviour::default()
        },
    ];
    for behaviour in scenarios {
        let (_server, url) = serve(behaviour).await;
        let config = RemoteConfig {
            timeout: Duration::from_millis(200),
            retries: 1,
            ..config(url)
        };
        let embedder = embedder(config.clone());

        let error = embedder
            .embed(&texts(&["a", "b"]), TextKind::Query)
            .await
            .expect_err("every scenario fails");

        for shown in [
            error.to_string(),
            format!("{error:?}"),
            format!("{embedder:?}"),
            format!("{config:?}"),
            embedder.id().to_owned(),
        ] {
            assert!(!shown.contains("SECRET"), "key leaked: {shown}");
        }
    }
}

#[test]
fn credentials_in_base_url_are_rejected_without_being_echoed() {
    let url = Url::parse("https://user:hunter2@api.example.com/v1").expect("valid url");
    let config = RemoteConfig::new(url, "m");

    let error = RemoteEmbedder::new(config.clone(), reqwest::Client::new())
        .expect_err("credentials rejected");

    let shown = format!("{error} {error:?} {config:?}");
    assert!(shown.contains("must not contain credentials"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn invalid_configuration_is_rejected() {
    let base = Url::parse("https://api.example.com/v1").expect("valid url");
    let cases = [
        (
            RemoteConfig {
                batch_size: 0,
                ..RemoteConfig::new(base.clone(), "m")
            },
            "batch_size must be at least 1",
        ),
        (
            RemoteConfig {
                timeout: Duration::ZERO,
                ..RemoteConfig::new(base.clone(), "m")
            },
            "timeout must be positive",
        ),
        (
            RemoteConfig {
                dimensions: Some(0),
                ..RemoteConfig::new(base.clone(), "m")
            },
            "dimensions must be at least 1",
        ),
        (RemoteConfig::new(base, " "), "model is empty"),
        (
            RemoteConfig::new(Url::parse("ftp://example.com/v1").expect("valid url"), "m"),
            "base_url must be http or https, not ftp",
        ),
    ];
    for (config, expected) in cases {
        let error = RemoteEmbedder::new(config, reqwest::Client::new())
            .expect_err(expected)
            .to_string();
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn endpoint_and_id_follow_the_base_url() {
    fn check(base: &str, dimensions: Option<usize>, endpoint: &str, id: &str) {
        let config = RemoteConfig {
            dimensions,
            ..RemoteConfig::new(
                Url::parse(base).expect("valid url"),
                "text-embedding-3-small",
            )
        };
        let embedder =
            RemoteEmbedder::new(config, reqwest::Client::new()).expect("valid configuration");
        assert_eq!(embedder.endpoint.as_str(), endpoint, "endpoint of {base}");
        assert_eq!(embedder.id(), id, "id of {base}");
    }

    check(
        "https://api.openai.com/v1",
        None,
        "https://api.openai.com/v1/embeddings",
        "openai/text-embedding-3-small@https://api.openai.com/v1",
    );
    check(
        "https://api.openai.com/v1/",
        None,
        "https://api.openai.com/v1/embeddings",
        "openai/text-embedding-3-small@https://api.openai.com/v1",
    );
    check(
        "http://localhost:11434",
        None,
        "http://localhost:11434/embeddings",
        "openai/text-embedding-3-small@http://localhost:11434",
    );
    check(
        "https://example.azure.com/openai/v1?api-version=2024-02-01",
        None,
        "https://example.azure.com/openai/v1/embeddings?api-version=2024-02-01",
        "openai/text-embedding-3-small@https://example.azure.com/openai/v1?api-version=2024-02-01",
    );
    check(
        "https://api.openai.com/v1",
        Some(256),
        "https://api.openai.com/v1/embeddings",
        "openai/text-embedding-3-small@https://api.openai.com/v1#dimensions=256",
    );
}

#[test]
fn backoff_doubles_with_bounded_jitter() {
    let backoff = Backoff::DEFAULT;
    let ms = Duration::from_millis;

    assert_eq!(backoff.delay(0, 1.0), ms(250));
    assert_eq!(backoff.delay(1, 1.0), ms(500));
    assert_eq!(backoff.delay(2, 1.0), ms(1000));
    assert_eq!(backoff.delay(2, 0.0), ms(500));
    assert_eq!(backoff.delay(10, 1.0), backoff.max);
    assert_eq!(backoff.delay(u32::MAX, 1.0), backoff.max);

    let unit = random_unit();
    assert!((0.0..1.0).contains(&unit), "{unit}");
}

#[test]
fn retry_after_headers_are_parsed_and_capped() {
    fn check(name: &'static str, value: &'static str, expected: Option<Duration>) {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        assert_eq!(retry_after(&headers), expected, "{name}: {value}");
    }

    check("retry-after", "2", Some(Duration::from_secs(2)));
    check("retry-after", "0.5", Some(Duration::from_millis(500)));
    check("retry-after", "3600", Some(MAX_RETRY_AFTER));
    check("retry-after", "-1", None);
    check("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT", None);
    check("retry-after-ms", "250", Some(Duration::from_millis(250)));
    assert_eq!(retry_after(&HeaderMap::new()), None);
}

#[test]
fn server_messages_are_extracted_flattened_and_cut() {
    fn check(body: &str, expected: &str) {
        let key = SecretString::from(KEY);
        assert_eq!(server_message(body.as_bytes(), Some(&key)), expected);
    }

    check(
        r#"{"error": {"message": "bad model", "type": "invalid_request_error"}}"#,
        "bad model",
    );
    check(r#"{"error": "model not found"}"#, "model not found");
    check(r#"{"detail": "Not Found"}"#, "Not Found");
    check(
        "<html>\n  <body>Bad Gateway</body>\n</html>",
        "<html> <body>Bad Gateway</body> </html>",
    );
    check("key sk-test-SECRET rejected", "key [redacted] rejected");
    let long = "é".repeat(MAX_MESSAGE_CHARS + 10);
    let cut = format!("{}…", "é".repeat(MAX_MESSAGE_CHARS));
    check(&long, &cut);
}

#[test]
fn index_permutations_are_validated() {
    fn check(body: Value, expected: Result<Vec<Vec<f32>>, &str>) {
        let bytes = serde_json::to_vec(&body).expect("json");
        assert_eq!(
            parse_embeddings(&bytes, 2),
            expected.map_err(str::to_owned),
            "{body}"
        );
    }

    check(
        json!({"data": [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 4.0]}]}),
        Ok(vec![vec![0.6, 0.8], vec![0.0, 1.0]]),
    );
    check(
        json!({"data": [{"embedding": [3.0, 4.0]}, {"embedding": [0.0, 2.0]}]}),
        Ok(vec![vec![0.6, 0.8], vec![0.0, 1.0]]),
    );
    check(
        json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}),
        Err("index 0 appears twice"),
    );
    check(
        json!({"data": [{"index": 0, "embedding": [1.0]}, {"index": 2, "embedding": [1.0]}]}),
        Err("index 2 is out of range for 2 inputs"),
    );
    check(
        json!({"data": [{"index": 0, "embedding": [1.0]}, {"embedding": [1.0]}]}),
        Err("item 1 has no index"),
    );
    check(
        json!({"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": []}]}),
        Err("embedding 0 is empty"),
    );
    check(
        json!({"data": [{"index": 0, "embedding": [1e38, 1e38]}, {"index": 1, "embedding": [1.0, 0.0]}]}),
        Ok(vec![
            vec![
                std::f32::consts::FRAC_1_SQRT_2,
                std::f32::consts::FRAC_1_SQRT_2,
            ],
            vec![1.0, 0.0],
        ]),
    );
}
