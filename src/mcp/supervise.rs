//! One adapter's supervisor: connects, lists and judges the tools, watches the session until it
//! ends or the tool list changes, and after a failure stops the child and retries with an
//! exponential backoff. It reports to the host through [`Reporter`] and knows nothing else of it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::{Peer, RoleClient};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::adapter::{AdapterConfig, Candidate, Connected, candidates, connect};
use super::error::McpError;
use super::types::{HostOptions, MAX_ERROR_BYTES};
use crate::text::{ELLIPSIS, truncate_bytes};

/// What a tool handler needs from a live session.
#[derive(Clone)]
pub(crate) struct Live {
    pub peer: Peer<RoleClient>,
    pub failure: Arc<Failure>,
}

/// A handler's report that the session's transport failed.
#[derive(Default)]
pub(crate) struct Failure {
    message: Mutex<Option<String>>,
    notify: Notify,
}

impl Failure {
    /// Records the first failure and wakes the supervisor.
    pub fn report(&self, message: String) {
        let mut slot = self.message.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(message);
        }
        drop(slot);
        self.notify.notify_one();
    }

    async fn wait(&self) -> String {
        self.notify.notified().await;
        self.message.lock().unwrap_or_else(|e| e.into_inner()).take().unwrap_or_else(|| "session failed".to_owned())
    }
}

/// What a supervisor tells its host about the adapter.
pub(crate) enum Event {
    /// A new attempt starts (after a backoff).
    Connecting,
    /// The session is up and its tools were (re)listed and judged.
    Listed { pid: Option<u32>, live: Live, candidates: Vec<Candidate> },
    /// The session failed; its child is still being stopped. `error` is bounded.
    SessionLost { error: String },
    /// The attempt or session failed and its child is gone; a retry follows. `error` is bounded.
    Retrying { error: String },
}

/// The host's side of a supervisor.
pub(crate) trait Reporter: Send + Sync + 'static {
    /// Applies `event` to the adapter's state. False when this supervisor is no longer current
    /// (adapter removed or restarted, or host gone): the supervisor then stops.
    fn report(&self, event: Event) -> bool;
}

/// How a session ended.
enum End {
    Cancelled,
    Failed(McpError),
}

/// Keeps one adapter connected until `cancel`. A restarted adapter's `previous` supervisor (and
/// so its child) finishes first.
pub(crate) async fn supervise(
    reporter: impl Reporter,
    config: Arc<AdapterConfig>,
    options: HostOptions,
    cancel: CancellationToken,
    previous: Option<JoinHandle<()>>,
) {
    let key = config.key.as_str();
    if let Some(previous) = previous {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = previous => {}
        }
    }
    let mut backoff = options.reconnect_backoff.min;
    let mut first = true;
    loop {
        if !first && !reporter.report(Event::Connecting) {
            return;
        }
        first = false;
        let attempt = tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(options.connect_timeout, connect(&config, &options)) => match r {
                Ok(r) => r,
                Err(_) => Err(McpError::ConnectTimeout(options.connect_timeout)),
            },
        };
        let error = match attempt {
            Err(e) => e,
            Ok(session) => match run_session(&reporter, &config, &options, &cancel, session, &mut backoff).await {
                End::Cancelled => return,
                End::Failed(e) => e,
            },
        };
        let error = shown(&error);
        tracing::warn!(adapter = key, error = error.as_str(), retry_in = ?backoff, "MCP adapter disconnected");
        if !reporter.report(Event::Retrying { error }) {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = options.reconnect_backoff.next(backoff);
    }
}

/// Lists tools, publishes them, and watches the session; relists on `list_changed`. Resets
/// `backoff` after the first listing. Stops the session (and child) before returning.
async fn run_session(
    reporter: &impl Reporter,
    config: &AdapterConfig,
    options: &HostOptions,
    cancel: &CancellationToken,
    session: Connected,
    backoff: &mut Duration,
) -> End {
    let key = config.key.as_str();
    let Connected { service, mut child, pid, tools_changed, ct } = session;
    let peer = service.peer().clone();
    let failure = Arc::new(Failure::default());
    let mut service_task = tokio::spawn(service.waiting());
    let mut service_done = false;
    let mut listed_once = false;

    let end = loop {
        // List (first time, or after a list_changed notification).
        let listing = tokio::select! {
            _ = cancel.cancelled() => break End::Cancelled,
            r = tokio::time::timeout(options.connect_timeout, peer.list_all_tools()) => r,
        };
        let tools = match listing {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => break End::Failed(McpError::ListTools(Box::new(e))),
            Err(_) => break End::Failed(McpError::ListTimeout(options.connect_timeout)),
        };
        let live = Live { peer: peer.clone(), failure: Arc::clone(&failure) };
        if !reporter.report(Event::Listed { pid, live, candidates: candidates(config, tools) }) {
            break End::Cancelled;
        }
        if !listed_once {
            listed_once = true;
            *backoff = options.reconnect_backoff.min;
            tracing::info!(adapter = key, pid = ?pid, "MCP adapter connected");
        }
        // Watch the session until it ends or the tool list changes.
        let relist = tokio::select! {
            _ = cancel.cancelled() => Err(End::Cancelled),
            status = wait_child(&mut child) => Err(End::Failed(McpError::ChildExited(status))),
            r = &mut service_task, if !service_done => {
                service_done = true;
                let why = match r {
                    Ok(Ok(reason)) => format!("{reason:?}"),
                    Ok(Err(e)) | Err(e) => e.to_string(),
                };
                Err(End::Failed(McpError::SessionEnded(why)))
            }
            message = failure.wait() => Err(End::Failed(McpError::Transport(message))),
            _ = tools_changed.notified() => Ok(()),
        };
        if let Err(end) = relist {
            break end;
        }
        tracing::debug!(adapter = key, "MCP tool list changed; listing again");
    };

    if let End::Failed(error) = &end {
        // Callers see the failure at once, not after the stop below.
        reporter.report(Event::SessionLost { error: shown(error) });
    }
    stop(key, ct, service_task, service_done, child, options.stop_grace).await;
    end
}

/// An error as status and logs show it: redacted (every resolved secret, credential-looking
/// fragments), then bounded.
fn shown(error: &McpError) -> String {
    truncate_bytes(&crate::redact::redact(&error.to_string()), MAX_ERROR_BYTES, ELLIPSIS)
}

async fn wait_child(child: &mut Option<tokio::process::Child>) -> String {
    match child {
        Some(c) => match c.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        },
        None => std::future::pending().await,
    }
}

/// Closes the session (stdin EOF for a child), sends SIGTERM, and kills the child if it has
/// not exited after `grace`.
async fn stop(
    key: &str,
    ct: CancellationToken,
    service_task: JoinHandle<Result<rmcp::service::QuitReason, tokio::task::JoinError>>,
    service_done: bool,
    child: Option<tokio::process::Child>,
    grace: Duration,
) {
    ct.cancel();
    if let Some(mut child) = child
        && let (Ok(None), Some(pid)) = (child.try_wait(), child.id())
    {
        terminate(pid);
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            tracing::warn!(adapter = key, pid, "MCP child did not exit after SIGTERM; killing it");
            let _ = child.kill().await;
        }
    }
    if !service_done {
        let _ = tokio::time::timeout(grace, service_task).await;
    }
}

/// SIGTERM to a child we have not reaped yet (so the pid cannot have been reused).
fn terminate(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid belongs to our un-reaped child.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::adapter::Transport;
    use crate::mcp::types::Backoff;

    /// Records events as text; stops being current after `limit` events.
    struct Recorder {
        events: Arc<Mutex<Vec<String>>>,
        limit: usize,
    }

    impl Reporter for Recorder {
        fn report(&self, event: Event) -> bool {
            let mut events = self.events.lock().unwrap();
            events.push(match event {
                Event::Connecting => "connecting".to_owned(),
                Event::Listed { .. } => "listed".to_owned(),
                Event::SessionLost { error } => format!("lost: {error}"),
                Event::Retrying { error } => format!("retrying: {error}"),
            });
            events.len() < self.limit
        }
    }

    #[tokio::test]
    async fn the_first_transport_failure_is_kept() {
        let failure = Failure::default();
        failure.report("first".into());
        failure.report("second".into());
        assert_eq!(failure.wait().await, "first");
    }

    #[tokio::test]
    async fn failed_starts_are_retried_until_the_supervisor_is_no_longer_current() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let config = Arc::new(AdapterConfig {
            key: "McpAdapter/ns/broken".into(),
            namespace: "broken".into(),
            transport: Transport::Stdio {
                command: "/nonexistent/akritas-mcp-server".into(),
                args: vec![],
                env: vec![("TOKEN".into(), "hunter2".into())],
                working_dir: None,
            },
            allow: Default::default(),
            tools: None,
            call_timeout: Duration::from_secs(1),
            fingerprint: "f".into(),
        });
        let options = HostOptions {
            reconnect_backoff: Backoff { min: Duration::from_millis(1), max: Duration::from_millis(4) },
            ..HostOptions::default()
        };
        let recorder = Recorder { events: Arc::clone(&events), limit: 3 };
        let task = tokio::spawn(supervise(recorder, config, options, CancellationToken::new(), None));
        tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
        let events = events.lock().unwrap().clone();
        assert_eq!(events.len(), 3, "{events:?}");
        assert!(events[0].starts_with("retrying: cannot start \"/nonexistent/akritas-mcp-server\""), "{events:?}");
        assert_eq!(events[1], "connecting");
        assert_eq!(events[2], events[0]);
        assert!(events.iter().all(|e| !e.contains("hunter2")));
    }

    #[tokio::test]
    async fn cancellation_stops_a_supervisor_waiting_for_its_predecessor() {
        let cancel = CancellationToken::new();
        let previous = tokio::spawn(std::future::pending::<()>());
        let config = Arc::new(AdapterConfig {
            key: "k".into(),
            namespace: "k".into(),
            transport: Transport::Http { url: "http://127.0.0.1:1/mcp".into(), headers: vec![] },
            allow: Default::default(),
            tools: None,
            call_timeout: Duration::from_secs(1),
            fingerprint: "f".into(),
        });
        let events = Arc::new(Mutex::new(Vec::new()));
        let recorder = Recorder { events: Arc::clone(&events), limit: usize::MAX };
        let task = tokio::spawn(supervise(recorder, config, HostOptions::default(), cancel.clone(), Some(previous)));
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(10), task).await.unwrap().unwrap();
        assert!(events.lock().unwrap().is_empty());
    }
}
