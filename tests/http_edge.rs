//! The HTTP edge of the real `akritas serve` under slow and greedy clients (a red team held
//! the host for 50 s with 1,100 half-sent requests: `/health` and alert deliveries failed and
//! the log said "Too many open files"): a connection that does not finish its request's
//! headers within `header_read_timeout`, or stays idle that long, is closed; at most
//! `max_connections` are open, and a further one takes the place of the oldest with no
//! request in flight, or waits while every one serves a request; the open-file limit is
//! raised to the hard one at start.

use akritas_testkit as support;

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use serde_json::Value;
use support::{Server, serve_command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const AM_TOKEN: &str = "edge-alertmanager-token-0123";
/// What a half-sent request sends: a request line and a header, never the blank line.
const HALF_SENT: &[u8] = b"POST /api/v1/alerts/am/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
/// Longest a client here waits for any answer: an answer that does not come is a failure.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// `akritas serve` with one Alertmanager AlertSource (`am`), these settings in the
/// environment, and its soft open-file limit at `open_files` (its hard limit unchanged).
fn server(settings: &[(&str, &str)], open_files: libc::rlim_t) -> (Server, tempfile::TempDir) {
    let resources = tempfile::tempdir().unwrap();
    let source = "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\nmetadata: {name: am}\n\
                  spec: {provider: alertmanager, auth: {bearerToken: {env: AKRITAS_EDGE_AM_TOKEN}}}\n";
    std::fs::write(resources.path().join("am.yaml"), source).unwrap();
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command.arg("--resources").arg(resources.path()).env("AKRITAS_EDGE_AM_TOKEN", AM_TOKEN);
    for (name, value) in settings {
        command.env(name, value);
    }
    // SAFETY: between fork and exec the child only calls getrlimit and setrlimit, which are
    // async-signal-safe, on its own limits.
    unsafe {
        command.pre_exec(move || {
            let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = open_files.min(limit.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    (Server::start(command), resources)
}

/// Lets this process open `wanted` files (its soft limit up to its hard one): the test holds
/// more connections than a default soft limit of 1024 allows.
fn allow_open_files(wanted: libc::rlim_t) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write only the struct they are given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
    assert!(
        limit.rlim_max >= wanted,
        "this test needs a hard open-file limit of {wanted} (`ulimit -Hn`): {}",
        limit.rlim_max
    );
    limit.rlim_cur = limit.rlim_cur.max(wanted);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
}

fn address(server: &Server) -> SocketAddr {
    server.url.trim_start_matches("http://").parse().unwrap()
}

/// `count` connections that each send part of a request's headers and never the rest.
async fn half_sent(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(HALF_SENT).await.unwrap();
        held.push(stream);
    }
    held
}

/// Whether the server closed `stream` (EOF or reset) before [`CLIENT_TIMEOUT`]; whatever it
/// wrote before closing is read and dropped.
async fn closed_by_server(mut stream: TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(CLIENT_TIMEOUT, read_to_end).await.is_ok()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(CLIENT_TIMEOUT).build().unwrap()
}

async fn deliver(client: &reqwest::Client, server: &Server, starts_at: &str) -> (u16, Value) {
    let response = client
        .post(format!("{}/api/v1/alerts/am/webhook", server.url))
        .bearer_auth(AM_TOKEN)
        .header("content-type", "application/json")
        .body(FIRING.replace("2026-11-29T22:41:16Z", starts_at))
        .send()
        .await
        .expect("the alert delivery is answered");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The red team's attack: 1,100 half-sent requests against a host started, as by a
/// distribution's default, with a soft open-file limit of 1024.
#[test]
fn a_slowloris_of_1100_half_sent_requests_starves_neither_health_nor_alert_deliveries() {
    if support::in_own_process(
        module_path!(),
        "a_slowloris_of_1100_half_sent_requests_starves_neither_health_nor_alert_deliveries",
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(slowloris());
    }
}

async fn slowloris() {
    allow_open_files(4096);
    let (server, _resources) = server(&[("AKRITAS_HEADER_READ_TIMEOUT", "3s")], 1024);
    let started = std::time::Instant::now();
    let held = half_sent(address(&server), 1100).await;
    let opened = started.elapsed();

    let client = client();
    let health = client.get(format!("{}/health", server.url)).send().await.expect("/health is answered");
    assert_eq!(health.status().as_u16(), 200);
    let answered = started.elapsed();
    let (status, delivered) = deliver(&client, &server, "2026-11-30T01:00:00Z").await;
    assert_eq!(status, 202, "{delivered}");
    let delivered_at = started.elapsed();

    // Every half-sent request is closed by the server (after header_read_timeout).
    let closed = futures_util::future::join_all(held.into_iter().map(closed_by_server)).await;
    assert_eq!(closed.iter().filter(|c| !**c).count(), 0, "half-sent requests the server kept open");
    println!(
        "slowloris: 1,100 half-sent requests opened in {:.2} s; /health answered at {:.2} s, the delivery at {:.2} s, \
         every half-sent request closed by {:.2} s (header_read_timeout 3 s, max_connections 1024)",
        opened.as_secs_f64(),
        answered.as_secs_f64(),
        delivered_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let log = server.log_text();
    assert!(!log.to_ascii_lowercase().contains("too many open files"), "{log}");
    assert!(log.contains("open-file limit raised"), "the start logs the limit it raised: {log}");
}

/// The value of the `akritas_http_connections_full_total` series with this outcome.
async fn full(client: &reqwest::Client, server: &Server, outcome: &str) -> f64 {
    let metrics = client.get(format!("{}/metrics", server.url)).send().await.unwrap().text().await.unwrap();
    let series = format!("akritas_http_connections_full_total{{outcome=\"{outcome}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|n| n.parse().ok()).unwrap_or(0.0)
}

/// With every connection `max_connections` allows open, a new one takes the place of the
/// oldest that has no request in flight (an idle keep-alive connection, a half-sent request):
/// it is answered long before `header_read_timeout` (10 minutes here) would free one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_max_connections_replaces_the_oldest_with_no_request_in_flight() {
    let settings = [("AKRITAS_HEADER_READ_TIMEOUT", "10m"), ("AKRITAS_MAX_CONNECTIONS", "8")];
    let (server, _resources) = server(&settings, 1024);
    let addr = address(&server);
    // The oldest: a keep-alive connection that got its answer and stays idle.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let mut answer = [0u8; 12];
    idle.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    let mut held = half_sent(addr, 7).await;

    let client = client();
    let (status, delivered) = deliver(&client, &server, "2026-11-30T02:00:00Z").await;
    assert_eq!(status, 202, "{delivered}");
    assert!(closed_by_server(idle).await, "the idle keep-alive connection made room");
    // The next connection (a new client: the first one keeps its connection) takes the place
    // of the oldest half-sent request.
    assert_eq!(self::client().get(format!("{}/health", server.url)).send().await.unwrap().status(), 200);
    assert!(closed_by_server(held.remove(0)).await, "the oldest half-sent request made room");
    assert!(full(&client, &server, "replaced_waiting").await >= 2.0, "each replacement is counted");
}

/// When every connection is serving a request (here: its body arrives slowly), a new one waits
/// until one closes: the requests in flight get their answers (408 once their body stalls for
/// `body_timeout`), never a cut connection. An idle keep-alive connection is closed after
/// `header_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_are_never_cut_for_a_new_connection_which_waits_instead() {
    let settings =
        [("AKRITAS_HEADER_READ_TIMEOUT", "3s"), ("AKRITAS_MAX_CONNECTIONS", "4"), ("AKRITAS_BODY_TIMEOUT", "2s")];
    let (server, _resources) = server(&settings, 1024);
    let addr = address(&server);
    let mut in_flight = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // `Expect: 100-continue`: the server says `100 Continue` once the handler reads the body,
        // so the request is in flight (not an idle connection the server may close for a new one)
        // before the next connection comes, however busy the machine.
        let head = format!(
            "POST /api/v1/alerts/am/webhook HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {AM_TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            FIRING.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut interim = [0u8; 25];
        stream.read_exact(&mut interim).await.unwrap();
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        stream.write_all(b"{\"receiver\":").await.unwrap();
        in_flight.push(stream);
    }

    let client = client();
    let health = client.get(format!("{}/health", server.url)).send().await.expect("/health is answered");
    assert_eq!(health.status().as_u16(), 200);
    for mut stream in in_flight {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(CLIENT_TIMEOUT, stream.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "no answer to a request in flight");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408"), "a request in flight gets its answer: {text}");
    }
    assert!(full(&client, &server, "waited").await >= 1.0, "the wait is counted");

    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let mut answer = [0u8; 12];
    idle.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200");
    assert!(closed_by_server(idle).await, "an idle keep-alive connection is closed after header_read_timeout");
}
