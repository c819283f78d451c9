//! Who may open and use an MCP session at `/mcp`: a session belongs to the API key
//! that opened it, and opens are capped host-wide (`mcp_max_sessions`, 503) and per key
//! (`mcp_max_sessions_per_key`, 429), checked and reserved under one lock.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use super::auth::Caller;

#[derive(Clone)]
pub(super) struct SessionGate {
    manager: Arc<LocalSessionManager>,
    max: usize,
    per_key: usize,
    book: Arc<std::sync::Mutex<SessionBook>>,
}

/// Who holds which session, and the opens under way: checked and reserved under one lock,
/// so racing `initialize` requests never exceed a cap.
#[derive(Default)]
struct SessionBook {
    /// The API key that opened each session, and when it was booked (sessions the manager
    /// closed are pruned).
    owners: std::collections::HashMap<String, (String, u64)>,
    /// Bookings so far: a session booked after a look at the manager's live sessions is
    /// never pruned for missing from that look.
    booked: u64,
    /// Opens under way, by API key.
    opening: std::collections::HashMap<String, usize>,
}

impl SessionBook {
    fn held(&self, key: &str) -> usize {
        self.owners.values().filter(|(owner, _)| owner == key).count() + self.opening.get(key).copied().unwrap_or(0)
    }

    fn done_opening(&mut self, key: &str) {
        if let Some(n) = self.opening.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.opening.remove(key);
            }
        }
    }
}

impl SessionGate {
    pub(super) fn new(manager: Arc<LocalSessionManager>, max: usize, per_key: usize) -> Self {
        SessionGate { manager, max, per_key, book: Arc::default() }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, SessionBook> {
        self.book.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reserves an open for `key`, or says which cap is full.
    async fn reserve(&self, key: &str) -> Result<OpenReservation, Response> {
        let seen = self.book().booked;
        let live: std::collections::HashSet<String> =
            self.manager.sessions.read().await.keys().map(|id| id.to_string()).collect();
        let mut book = self.book();
        // A session booked since the look may be missing from it: only older ones are pruned.
        book.owners.retain(|id, (_, booked)| *booked >= seen || live.contains(id.as_str()));
        let open = live.len() + book.opening.values().sum::<usize>();
        let refused = if open >= self.max {
            Some((
                StatusCode::SERVICE_UNAVAILABLE,
                "mcp_sessions_exhausted",
                "mcp_max_sessions",
                format!(
                    "{} MCP sessions are open (mcp_max_sessions); close one (DELETE /mcp) or retry when idle sessions expire",
                    self.max
                ),
            ))
        } else if book.held(key) >= self.per_key {
            Some((
                StatusCode::TOO_MANY_REQUESTS,
                "mcp_sessions_per_key",
                "mcp_max_sessions_per_key",
                format!(
                    "this API key holds {} MCP sessions (mcp_max_sessions_per_key); close one (DELETE /mcp) or reuse it",
                    self.per_key
                ),
            ))
        } else {
            None
        };
        if let Some((status, code, setting, message)) = refused {
            crate::slots::count_refusal("mcp_sessions", setting, "");
            return Err(super::error::ApiError::new(status, code, message).retry_after("5").into_response());
        }
        *book.opening.entry(key.to_string()).or_default() += 1;
        Ok(OpenReservation { gate: self.clone(), key: key.to_string() })
    }
}

/// An open under way; dropping it (the request ended, or was cancelled) releases it.
struct OpenReservation {
    gate: SessionGate,
    key: String,
}

impl OpenReservation {
    /// The open succeeded: the session is now held by the key.
    fn opened(self, session: &str) {
        let mut book = self.gate.book();
        let booked = book.booked;
        book.booked += 1;
        book.owners.insert(session.to_string(), (self.key.clone(), booked));
    }
}

impl Drop for OpenReservation {
    fn drop(&mut self) {
        self.gate.book().done_opening(&self.key);
    }
}

/// A session belongs to the API key that opened it: another key's request naming it gets
/// the 404 of an unknown session. A request that would open a session (a POST without
/// `Mcp-Session-Id`) while `max` sessions are open gets 503 with `Retry-After`, so memory
/// stays bounded; while its key holds `per_key` sessions, 429. Both are checked and the
/// open reserved atomically.
pub(super) async fn gate_sessions(State(gate): State<SessionGate>, request: Request, next: Next) -> Response {
    let key = request.extensions().get::<Caller>().map(|caller| caller.name.clone()).unwrap_or_default();
    let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(session) = &session
        && gate.book().owners.get(session).is_some_and(|(owner, _)| *owner != key)
    {
        return super::error::ApiError::not_found(
            "no MCP session with this Mcp-Session-Id for this API key; send initialize to open one",
        )
        .into_response();
    }
    let opens = request.method() == Method::POST && session.is_none();
    let reservation = if opens {
        match gate.reserve(&key).await {
            Ok(reservation) => Some(reservation),
            Err(refused) => return refused,
        }
    } else {
        None
    };
    let response = next.run(request).await;
    if let (Some(reservation), Some(opened)) =
        (reservation, response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()))
    {
        reservation.opened(opened);
    }
    response
}
