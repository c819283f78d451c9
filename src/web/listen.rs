//! The listener under the router: accepts connections and serves HTTP/1.1 on them, bounded so
//! that slow or greedy clients cannot take the host from the others.
//!
//! - A connection that does not send a request's headers within `header_read_timeout` is
//!   closed, and so is one left idle that long between two requests (hyper runs the same
//!   timer while it waits for the next request's headers): a half-sent request (slowloris)
//!   holds a connection for at most that long.
//! - At most `max_connections` connections are open at once. When all are open, a new one
//!   takes the place of the oldest connection that has no request in flight (a half-sent
//!   request, or an idle keep-alive connection), which is closed; when every one is serving
//!   a request, the new one waits until one closes. Requests being served are never cut.
//! - A request's head (request line and headers) is at most [`MAX_HEAD_BYTES`] (431 beyond).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
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

/// One open connection, as the accept loop sees it.
struct Slot {
    /// Requests whose answer is not sent yet (0: it waits for a request's headers).
    in_flight: AtomicUsize,
    /// Cancelled to close the connection for a new one.
    evict: CancellationToken,
    /// The connection's socket, to see whether a request has arrived that is not parsed yet.
    fd: std::os::fd::RawFd,
}

impl Slot {
    /// Whether the client has sent bytes the server has not read yet: a request arrived and
    /// waits to be parsed, so the connection is not idle (a slow sender's bytes are read as
    /// they come and leave nothing pending).
    fn has_unread_bytes(&self) -> bool {
        let mut byte = [0u8; 1];
        // SAFETY: a one-byte buffer; MSG_PEEK leaves the byte for hyper to read.
        unsafe { libc::recv(self.fd, byte.as_mut_ptr().cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) > 0 }
    }
}

/// The open connections, oldest first.
#[derive(Default)]
struct Open {
    next: AtomicUsize,
    slots: Mutex<BTreeMap<usize, Arc<Slot>>>,
}

impl Open {
    fn add(&self, fd: std::os::fd::RawFd) -> (usize, Arc<Slot>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot { in_flight: AtomicUsize::new(0), evict: CancellationToken::new(), fd });
        self.lock().insert(id, slot.clone());
        (id, slot)
    }

    fn remove(&self, id: usize) {
        self.lock().remove(&id);
    }

    /// Closes the oldest connection with no request in flight; `false` when every connection
    /// is serving one.
    fn evict_oldest_waiting(&self) -> bool {
        let slots = self.lock();
        let victim = slots.values().find(|slot| {
            slot.in_flight.load(Ordering::Acquire) == 0 && !slot.evict.is_cancelled() && !slot.has_unread_bytes()
        });
        victim.inspect(|slot| slot.evict.cancel()).is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<Slot>>> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Counts a request in flight on its connection until its answer is sent (or dropped).
struct InFlight(Arc<Slot>);

impl InFlight {
    fn new(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(slot.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in flight until it is sent.
struct Answering {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Answering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
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
    let open = Arc::new(Open::default());
    let count_open = move |permits: &Semaphore| set_open((max - permits.available_permits()) as f64);
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout).max_buf_size(MAX_HEAD_BYTES);
    let connections = TaskTracker::new();
    let mut warned: Option<Instant> = None;
    loop {
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
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let evicted = open.evict_oldest_waiting();
                count_full(max, evicted, &mut warned);
                tokio::select! {
                    () = cancel.cancelled() => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                }
            }
        };
        // Streamed answers are many small writes: without TCP_NODELAY each one after the
        // first waits for the client's delayed ACK (about 40 ms).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        let (id, slot) = open.add(std::os::fd::AsRawFd::as_raw_fd(&stream));
        let service = {
            let (app, slot) = (app.clone(), slot.clone());
            hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                let in_flight = InFlight::new(&slot);
                let answer = app.clone().oneshot(request.map(Body::new));
                async move {
                    let response = answer.await?;
                    Ok::<_, Infallible>(response.map(|body| Body::new(Answering { body, _in_flight: in_flight })))
                }
            })
        };
        let connection = http.serve_connection(TokioIo::new(stream), service);
        count_open(&permits);
        let (cancel, permits, open) = (cancel.clone(), permits.clone(), open.clone());
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let served = tokio::select! {
                served = connection.as_mut() => served,
                // Closed for a new connection: it had no request in flight.
                () = slot.evict.cancelled() => Ok(()),
                () = cancel.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection closed");
            }
            open.remove(id);
            drop(permit);
            count_open(&permits);
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

/// A connection came while every one `max_connections` allows was open: counted by what
/// happened to it (it took the place of one with no request in flight, or it waits for one
/// serving a request to close), logged at most once a minute.
fn count_full(max: usize, evicted: bool, warned: &mut Option<Instant>) {
    let outcome = if evicted { "replaced_waiting" } else { "waited" };
    if warned.is_none_or(|at| at.elapsed() >= FULL_WARNING_EVERY) {
        *warned = Some(Instant::now());
        tracing::warn!(
            max_connections = max,
            outcome,
            "every connection allowed is open: a new one replaces the oldest with no request in flight, or waits"
        );
    }
    crate::telemetry::count(
        "akritas_http_connections_full_total",
        "Connections that came while every one max_connections allows was open, by what happened: replaced_waiting \
         (the oldest connection with no request in flight was closed for it) or waited (every one was serving a \
         request).",
        &[("outcome", outcome)],
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
