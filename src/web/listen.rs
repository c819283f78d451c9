//! The listener under the router: accepts connections and serves HTTP/1.1 on them, bounded so
//! that slow or greedy clients cannot take the host from the others.
//!
//! - At most `max_connections` connections are open at once. A further connection is not
//!   accepted until one closes: it waits in the kernel's backlog, and the connections already
//!   open are served meanwhile (each closed one lets the next in).
//! - A connection that does not send a request's headers within `header_read_timeout` is
//!   closed, and so is one left idle that long between two requests (hyper runs the same
//!   timer while it waits for the next request's headers): half-sent requests (slowloris)
//!   hold a connection for at most that long.
//! - A request's headers are at most [`MAX_HEAD_BYTES`] (431 beyond).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Largest request head (request line and headers) read into a connection's buffer: what one
/// connection may hold in memory before its request starts.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Shortest time between two warnings that every connection allowed is open.
const FULL_WARNING_EVERY: Duration = Duration::from_secs(60);

/// Pause after an accept that failed for want of resources (no file descriptor, no memory),
/// so that the loop does not spin while none frees up.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How the listener bounds its clients.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest time to send a request's headers, and to stay idle between two requests.
    pub header_read_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
    /// How long open requests may finish once the server stops.
    pub grace: Duration,
}

impl Limits {
    /// The defaults of `header_read_timeout` and `max_connections`, with this `grace`.
    pub fn with_grace(grace: Duration) -> Self {
        use crate::config::defaults::{HEADER_READ_TIMEOUT, MAX_CONNECTIONS};
        Self { header_read_timeout: HEADER_READ_TIMEOUT, max_connections: MAX_CONNECTIONS as usize, grace }
    }
}

/// Serves `app` on `listener` within `limits` until `cancel` fires, then lets open requests
/// finish for at most `limits.grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    cancel: CancellationToken,
    limits: Limits,
) -> std::io::Result<()> {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let open = move |permits: &Semaphore| (max - permits.available_permits()) as f64;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).max_buf_size(MAX_HEAD_BYTES);
    let connections = TaskTracker::new();
    let mut warned: Option<Instant> = None;
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                count_full(max, &mut warned);
                tokio::select! {
                    () = cancel.cancelled() => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                }
            }
        };
        let stream = tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(&error).await;
                    continue;
                }
            },
        };
        // Streamed answers are many small writes: without TCP_NODELAY each one after the
        // first waits for the client's delayed ACK (about 40 ms).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(
            app.clone().map_request(|request: hyper::Request<Incoming>| request.map(Body::new)),
        );
        let connection = http.serve_connection(TokioIo::new(stream), service);
        set_open(open(&permits));
        let (cancel, permits) = (cancel.clone(), permits.clone());
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                () = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection closed");
            }
            drop(permit);
            set_open(open(&permits));
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(limits.grace, connections.wait()).await.is_err() {
        tracing::warn!(grace_seconds = limits.grace.as_secs(), "open requests did not finish in time; closing them");
    }
    Ok(())
}

/// `akritas_http_connections`.
fn set_open(open: f64) {
    crate::telemetry::set("akritas_http_connections", "Client connections open.", &[], open);
}

/// Every connection `max_connections` allows is open: the next waits (counted; logged at most
/// once a minute).
fn count_full(max: usize, warned: &mut Option<Instant>) {
    if warned.is_none_or(|at| at.elapsed() >= FULL_WARNING_EVERY) {
        *warned = Some(Instant::now());
        tracing::warn!(
            max_connections = max,
            "every connection allowed is open; new connections wait for one to close (header_read_timeout closes \
             those that send nothing)"
        );
    }
    crate::telemetry::count(
        "akritas_http_connections_full_total",
        "Times every connection max_connections allows was open, so that new ones waited to be accepted.",
        &[],
        1.0,
    );
}

/// An accept that failed: the client's own trouble (it reset the connection) is skipped; a
/// shortage of file descriptors or memory is logged and waited out a little.
async fn accept_failed(error: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(error.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted) {
        return;
    }
    tracing::warn!(%error, "could not accept a connection; retrying");
    tokio::time::sleep(ACCEPT_BACKOFF).await;
}
