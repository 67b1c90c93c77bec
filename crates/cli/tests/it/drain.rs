//! Graceful shutdown: on SIGTERM the calls in flight finish while new ones get 503.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::*;

#[test]
fn calls_in_flight_complete_across_sigterm_and_new_ones_get_503() {
    let config = write_config(&format!(
        "[limits]\nshutdown_grace_s = 20\n\n{}",
        everything_stdio_server("everything")
    ));
    let mut gateway = Gateway::start(config);
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let url = gateway.url();
            std::thread::spawn(move || {
                py_client(
                    &["--url", &url],
                    "legacy",
                    json!([{"op": "call_tool", "name": "call_tool", "arguments": {
                        "name": "everything__trigger-long-running-operation",
                        "arguments": {"duration": 5, "steps": 5}}}]),
                )["steps"][0]
                    .clone()
            })
        })
        .collect();
    // Five POSTs in flight for 150 ms in a row are the calls: a handshake POST takes moments.
    let mut steady = 0;
    wait_until("five calls in flight", Duration::from_secs(30), || {
        let five = gateway
            .health()
            .is_some_and(|h| h["in_flight"].as_u64() >= Some(5));
        steady = if five { steady + 1 } else { 0 };
        steady >= 3
    });
    signal(gateway.proc.pid(), "TERM");
    let termed = Instant::now();
    wait_until("the drain to begin", Duration::from_secs(5), || {
        gateway.health().is_some_and(|h| h["draining"] == true)
    });
    let (status, headers, body) = initialize(&gateway.url(), None);
    assert_eq!(status, 503, "{body}");
    assert!(headers.contains_key("retry-after"), "{headers:?}");

    let mut completed = 0;
    for call in calls {
        let result = call.join().expect("a call thread");
        assert!(
            result_text(&result).contains("Long running operation completed"),
            "{result}"
        );
        completed += 1;
    }
    eprintln!("{completed} calls in flight completed across SIGTERM");
    // A client has its answer a moment before the gateway has finished writing the response:
    // the drain ends once the last body is done. Waiting for it here, rather than sending the
    // second signal at once, keeps that moment from racing the signal.
    wait_until("the drain to end", Duration::from_secs(10), || {
        gateway.log_text().contains("drained: no request in flight")
    });
    assert!(termed.elapsed() < Duration::from_secs(20));
    let status = gateway.proc.terminate();
    assert!(status.success(), "{status}\n{}", gateway.log_text());
}
