//! Connection limits: idle sockets beyond `[limits] max_connections` are answered 503 and
//! closed, a silent socket is closed after the header-read timeout, and a legitimate
//! keep-alive client keeps getting answers throughout.

use std::{
    io::Read,
    net::TcpStream,
    time::{Duration, Instant},
};

use crate::harness::*;

#[test]
fn idle_sockets_over_the_cap_are_refused_and_silent_ones_closed_while_a_client_is_served() {
    let config = write_config("[limits]\nmax_connections = 20\nheader_timeout_s = 2\n");
    let gateway = Gateway::start(config);
    let health = format!("http://127.0.0.1:{}/healthz", gateway.port);
    let client = reqwest::blocking::Client::new();
    assert!(
        client
            .get(&health)
            .send()
            .expect("first")
            .status()
            .is_success()
    );

    // 100 sockets that never send a byte: 19 fill the cap beside the client, the rest are
    // answered 503 at once.
    let idle: Vec<TcpStream> = (0..100)
        .map(|_| TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect"))
        .collect();
    let mut refused = 0;
    for mut socket in idle.iter().skip(30).take(10) {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut answer = String::new();
        let _ = socket.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("retry-after: 1"), "{answer}");
        refused += 1;
    }
    assert_eq!(refused, 10);

    // The legitimate client, on its open keep-alive connection, is answered all the while.
    let mut latencies = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let response = client.get(&health).send().expect("answered");
        assert!(response.status().is_success());
        latencies.push(started.elapsed());
    }
    latencies.sort();
    eprintln!(
        "with 100 idle sockets against a cap of 20: p50 {:?}, p99 {:?}",
        latencies[25], latencies[49]
    );

    // A silent socket inside the cap is closed after the header-read timeout.
    let mut silent = &idle[0];
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = silent.read_to_end(&mut rest);
    let closed_after = started.elapsed();
    assert!(read.is_ok(), "closed, not timed out: {read:?}");
    assert!(closed_after < Duration::from_secs(5), "{closed_after:?}");
}

/// Issue 13, finding 6: bare `initialize` requests cannot grow the sessions without bound.
/// One principal past `max_sessions_per_principal` gets 429, everyone past `max_sessions`
/// 503, both with `Retry-After`; a session ended with DELETE frees its place.
#[test]
fn sessions_past_their_caps_are_refused_and_ended_ones_free_their_place() {
    let config = write_config(&format!(
        "[limits]\nmax_sessions = 3\nmax_sessions_per_principal = 2\n\n{}",
        everything_stdio_server("e")
    ));
    let alice_key = add_client(&config.path, "alice");
    let bob_key = add_client(&config.path, "bob");
    let gateway = Gateway::start(config);
    let url = gateway.url();
    let alice = format!("Bearer {alice_key}");
    let bob = format!("Bearer {bob_key}");
    let session = |headers: &reqwest::header::HeaderMap| {
        headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };

    let (status, first, _) = initialize(&url, Some(&alice));
    assert_eq!(status, 200);
    let (status, _, _) = initialize(&url, Some(&alice));
    assert_eq!(status, 200);
    let (status, headers, body) = initialize(&url, Some(&alice));
    assert_eq!(status, 429, "{body}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");
    assert!(body.contains("max_sessions_per_principal"), "{body}");
    assert!(session(&headers).is_none(), "no session is handed out");

    let (status, _, _) = initialize(&url, Some(&bob));
    assert_eq!(status, 200);
    let (status, headers, body) = initialize(&url, Some(&bob));
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");

    // Alice ends one of hers; bob gets the place.
    let ended = reqwest::blocking::Client::new()
        .delete(&url)
        .header("authorization", &alice)
        .header("mcp-session-id", session(&first).expect("a session id"))
        .send()
        .expect("delete");
    assert_eq!(ended.status().as_u16(), 204);
    let (status, _, _) = initialize(&url, Some(&bob));
    assert_eq!(status, 200);
}
