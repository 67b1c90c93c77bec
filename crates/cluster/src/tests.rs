//! Against a real Redis: the test server of `scripts/test-redis.sh start`
//! (`$MCPGW_TEST_REDIS_URL`, else `.peers/redis/url`), each test in a namespace of its own; the
//! outage test runs a private `redis-server` it can stop and start again.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::*;

const URL_VAR: &str = "MCPGW_TEST_REDIS_URL";

fn test_url() -> String {
    if let Ok(url) = std::env::var(URL_VAR)
        && !url.trim().is_empty()
    {
        return url.trim().to_owned();
    }
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.peers/redis/url");
    match std::fs::read_to_string(&file) {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => panic!(
            "no Redis for the tests: {URL_VAR} is not set and {} does not exist; start one with \
             `scripts/test-redis.sh start`",
            file.display()
        ),
    }
}

/// A namespace no other test uses.
fn namespace(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("mcpgw-test-{test}-{nanos}")
}

async fn connected(url: &str, namespace: &str) -> Cluster {
    let cluster = Cluster::connect(url, namespace).expect("connect");
    assert!(
        cluster.wait_up(Duration::from_secs(10)).await,
        "redis at the test URL did not come up: {:?}",
        cluster.health()
    );
    cluster
}

async fn next_event(events: &mut broadcast::Receiver<Event>, within: Duration) -> Option<Event> {
    tokio::time::timeout(within, events.recv()).await.ok()?.ok()
}

#[tokio::test]
async fn an_event_reaches_the_other_processes_and_not_the_sender() {
    let url = test_url();
    let ns = namespace("events");
    let a = connected(&url, &ns).await;
    let b = connected(&url, &ns).await;
    let elsewhere = connected(&url, &namespace("elsewhere")).await;
    let mut heard_by_a = a.events();
    let mut heard_by_b = b.events();
    let mut heard_elsewhere = elsewhere.events();

    let sent = Instant::now();
    a.publish(&Event::Approval { id: "ap-1".into() })
        .await
        .expect("publish");
    let event = next_event(&mut heard_by_b, Duration::from_secs(2)).await;
    assert_eq!(event, Some(Event::Approval { id: "ap-1".into() }));
    assert!(
        sent.elapsed() < Duration::from_millis(300),
        "{:?}",
        sent.elapsed()
    );

    b.publish(&Event::Server {
        name: ServerName::from("files"),
    })
    .await
    .expect("publish");
    assert_eq!(
        next_event(&mut heard_by_a, Duration::from_secs(2)).await,
        Some(Event::Server {
            name: ServerName::from("files")
        }),
        "a hears b, and not its own approval event first"
    );
    assert_eq!(
        next_event(&mut heard_by_b, Duration::from_millis(300)).await,
        None,
        "b does not hear its own event"
    );
    assert_eq!(
        next_event(&mut heard_elsewhere, Duration::from_millis(100)).await,
        None,
        "another namespace hears nothing"
    );
    assert_eq!(a.health().events_published, 1);
    assert_eq!(a.health().events_received, 1);
}

#[tokio::test]
async fn a_bucket_is_shared_by_every_process() {
    let url = test_url();
    let ns = namespace("bucket");
    let a = connected(&url, &ns).await;
    let b = connected(&url, &ns).await;
    assert_eq!(a.take_token("client:ci", 3).await.expect("redis"), Ok(()));
    assert_eq!(b.take_token("client:ci", 3).await.expect("redis"), Ok(()));
    assert_eq!(a.take_token("client:ci", 3).await.expect("redis"), Ok(()));
    // Three a minute: one token every 20 s, so the wait is at most that.
    let wait = b
        .take_token("client:ci", 3)
        .await
        .expect("redis")
        .expect_err("the fourth call of three a minute");
    assert!(
        wait > Duration::from_secs(19) && wait <= Duration::from_secs(20),
        "{wait:?}"
    );
    assert_eq!(
        a.take_token("client:other", 3).await.expect("redis"),
        Ok(()),
        "each key has its own bucket"
    );
    // A lower figure applies at once: the bucket holds at most one token now, none left.
    assert!(a.take_token("client:ci", 1).await.expect("redis").is_err());
    assert!(a.take_token("client:ci", 0).await.expect("redis").is_err());
}

#[tokio::test]
async fn a_pending_login_is_taken_once_and_expires() {
    let url = test_url();
    let ns = namespace("state");
    let a = connected(&url, &ns).await;
    let b = connected(&url, &ns).await;
    assert!(a.put_auth_state("st-1", "payload-1").await.expect("redis"));
    assert!(
        !a.put_auth_state("st-1", "payload-2").await.expect("redis"),
        "a pending state is never replaced"
    );
    let client = redis::Client::open(url.as_str()).expect("client");
    let mut raw = client
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    let ttl: i64 = redis::cmd("TTL")
        .arg(format!("{ns}:oauth-state:st-1"))
        .query_async(&mut raw)
        .await
        .expect("ttl");
    assert!((590..=600).contains(&ttl), "ttl {ttl}");
    assert_eq!(
        b.take_auth_state("st-1").await.expect("redis").as_deref(),
        Some("payload-1"),
        "taken by another process"
    );
    assert_eq!(a.take_auth_state("st-1").await.expect("redis"), None);
    assert_eq!(b.take_auth_state("unknown").await.expect("redis"), None);
}

#[tokio::test]
async fn an_unusable_url_is_refused_without_echoing_it() {
    let error = Cluster::connect("http://user:s3cret@host/", "x").expect_err("not redis");
    assert!(!error.to_string().contains("s3cret"), "{error}");
}

/// A `redis-server` of the test's own on `port`, killed when dropped.
struct PrivateRedis(Child);

impl PrivateRedis {
    fn start(port: u16) -> PrivateRedis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt-get install redis-server)");
        PrivateRedis(child)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[tokio::test]
async fn redis_down_fails_fast_and_its_return_is_noticed() {
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let ns = namespace("outage");
    let server = PrivateRedis::start(port);
    let a = connected(&url, &ns).await;
    let b = connected(&url, &ns).await;
    let mut heard_by_b = b.events();

    drop(server);
    let gone = Instant::now();
    while a.is_up() || b.is_up() {
        assert!(
            gone.elapsed() < Duration::from_secs(5),
            "still up: {:?}",
            a.health()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(a.health().redis, "down");
    let asked = Instant::now();
    assert!(matches!(
        a.take_token("k", 5).await,
        Err(ClusterError::Down)
    ));
    assert!(matches!(
        a.publish(&Event::Approval { id: "x".into() }).await,
        Err(ClusterError::Down)
    ));
    assert!(
        asked.elapsed() < Duration::from_millis(50),
        "a Redis known down costs nothing: {:?}",
        asked.elapsed()
    );

    let _server = PrivateRedis::start(port);
    assert!(a.wait_up(Duration::from_secs(15)).await, "a came back");
    assert!(b.wait_up(Duration::from_secs(15)).await, "b came back");
    assert_eq!(
        next_event(&mut heard_by_b, Duration::from_secs(2)).await,
        Some(Event::Resubscribed),
        "b says it may have missed events"
    );
    a.publish(&Event::Approval { id: "after".into() })
        .await
        .expect("publish after the outage");
    assert_eq!(
        next_event(&mut heard_by_b, Duration::from_secs(2)).await,
        Some(Event::Approval { id: "after".into() })
    );
}
