//! The MCP host: one supervisor task per adapter keeps a session alive, lists and judges its tools,
//! and publishes the authorized ones as a tool [`Registry`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::{Peer, RoleClient, ServiceError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::adapter::{AdapterConfig, Candidate, Connected, bounded, candidates, connect, render_result};
use crate::tools::{Permission, Registry, RegistryBuilder, ToolFuture, ToolHandler, ToolLimits};

/// Bound on an error message kept in status.
const MAX_ERROR_BYTES: usize = 1024;

/// Exponential reconnect backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
}

/// Host-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// Names of host environment variables a stdio child may inherit; nothing else is inherited.
    pub base_env: Vec<String>,
    /// Bound on one rendered tool result in bytes.
    pub max_result_bytes: usize,
    /// Time a stopping child gets after SIGTERM before it is killed.
    pub stop_grace: Duration,
    pub reconnect_backoff: Backoff,
    /// Bound on starting a session (spawn/connect + initialize) and on listing tools.
    pub connect_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            base_env: ["PATH", "HOME", "LANG", "TZ", "TMPDIR"].into_iter().map(str::to_owned).collect(),
            max_result_bytes: 256 * 1024,
            stop_grace: Duration::from_secs(5),
            reconnect_backoff: Backoff { min: Duration::from_millis(500), max: Duration::from_secs(30) },
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// One remote tool as the host sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredTool {
    /// Host tool name `<namespace>.<remote name>` (bounded; may be invalid when not authorized).
    pub name: String,
    pub remote_name: String,
    pub permission: Permission,
    pub authorized: bool,
    /// Why the tool is not authorized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where an adapter's supervisor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterPhase {
    /// Starting a session (first attempt or after a backoff).
    Connecting,
    /// Session up and tools listed.
    Connected,
    /// The last attempt or session failed (`last_error`); waiting to retry.
    Retrying,
}

/// Observed state of one adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterStatus {
    pub key: String,
    pub connected: bool,
    pub phase: AdapterPhase,
    /// Most recent connection, listing or session failure; cleared by a successful listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Process id of the live stdio child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Tools of the last successful listing (kept while reconnecting).
    pub tools: Vec<DiscoveredTool>,
}

/// Runs MCP adapters and exposes their authorized tools. Cheap to clone.
#[derive(Clone)]
pub struct McpHost {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHost").field("adapters", &self.inner.lock().slots.keys().collect::<Vec<_>>()).finish()
    }
}

struct Inner {
    options: HostOptions,
    state: Mutex<State>,
    version: watch::Sender<u64>,
    next_id: AtomicU64,
}

struct State {
    slots: BTreeMap<String, Slot>,
    registry: Registry,
}

struct Slot {
    /// Distinguishes this slot from an earlier or later one with the same key.
    id: u64,
    config: Arc<AdapterConfig>,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    connected: bool,
    phase: AdapterPhase,
    last_error: Option<String>,
    pid: Option<u32>,
    live: Option<Live>,
    candidates: Vec<Candidate>,
    /// Final verdicts after registration (a registration error revokes authorization).
    tools: Vec<DiscoveredTool>,
}

/// What a tool handler needs from a live session.
#[derive(Clone)]
struct Live {
    peer: Peer<RoleClient>,
    failure: Arc<Failure>,
}

/// A handler's report that the session's transport failed.
#[derive(Default)]
struct Failure {
    message: Mutex<Option<String>>,
    notify: Notify,
}

impl Failure {
    fn report(&self, message: String) {
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

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v = v.wrapping_add(1));
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Supervisors hold only weak references; stop them (and so their children).
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for slot in state.slots.values() {
            slot.cancel.cancel();
        }
    }
}

impl McpHost {
    /// A host with no adapters.
    pub fn new(options: HostOptions) -> Self {
        let limits = ToolLimits { max_result_bytes: options.max_result_bytes, ..ToolLimits::default() };
        let (version, _) = watch::channel(0);
        let state = State { slots: BTreeMap::new(), registry: RegistryBuilder::new(limits).build() };
        Self { inner: Arc::new(Inner { options, state: Mutex::new(state), version, next_id: AtomicU64::new(1) }) }
    }

    /// Makes the running adapters match `desired`: starts new ones, restarts those whose
    /// fingerprint changed, stops removed ones; unchanged ones keep their session. Connecting
    /// happens in the background; this waits only for removed adapters to stop.
    pub async fn reconcile(&self, desired: Vec<AdapterConfig>) {
        let mut stopping = Vec::new();
        {
            let mut state = self.inner.lock();
            let mut wanted: BTreeMap<String, AdapterConfig> = BTreeMap::new();
            for config in desired {
                if wanted.contains_key(&config.key) {
                    tracing::warn!(adapter = config.key.as_str(), "duplicate MCP adapter key; keeping the first");
                    continue;
                }
                wanted.insert(config.key.clone(), config);
            }
            let removed: Vec<String> = state.slots.keys().filter(|k| !wanted.contains_key(*k)).cloned().collect();
            for key in removed {
                if let Some(mut slot) = state.slots.remove(&key) {
                    tracing::info!(adapter = key.as_str(), "stopping MCP adapter");
                    slot.cancel.cancel();
                    stopping.extend(slot.task.take());
                }
            }
            for (key, config) in wanted {
                let previous = match state.slots.get(&key) {
                    Some(slot) if slot.config.fingerprint == config.fingerprint => continue,
                    Some(_) => state.slots.remove(&key).and_then(|mut old| {
                        tracing::info!(adapter = key.as_str(), "restarting MCP adapter (configuration changed)");
                        old.cancel.cancel();
                        old.task.take()
                    }),
                    None => None,
                };
                let slot = self.start(config, previous);
                state.slots.insert(key, slot);
            }
            rebuild(&self.inner, &mut state);
        }
        self.inner.bump();
        let bound = self.inner.options.stop_grace + Duration::from_secs(2);
        for task in stopping {
            let _ = tokio::time::timeout(bound, task).await;
        }
    }

    fn start(&self, config: AdapterConfig, previous: Option<JoinHandle<()>>) -> Slot {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let config = Arc::new(config);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(supervise(
            Arc::downgrade(&self.inner),
            id,
            Arc::clone(&config),
            self.inner.options.clone(),
            cancel.clone(),
            previous,
        ));
        Slot {
            id,
            config,
            cancel,
            task: Some(task),
            connected: false,
            phase: AdapterPhase::Connecting,
            last_error: None,
            pid: None,
            live: None,
            candidates: Vec::new(),
            tools: Vec::new(),
        }
    }

    /// All authorized tools of all adapters that have listed tools.
    pub fn registry(&self) -> Registry {
        self.inner.lock().registry.clone()
    }

    /// Status of every adapter, by key.
    pub fn status(&self) -> Vec<AdapterStatus> {
        self.inner
            .lock()
            .slots
            .values()
            .map(|s| AdapterStatus {
                key: s.config.key.clone(),
                connected: s.connected,
                phase: s.phase,
                last_error: s.last_error.clone(),
                pid: s.pid,
                tools: s.tools.clone(),
            })
            .collect()
    }

    /// Process id of the adapter's live stdio child.
    pub fn child_pid(&self, key: &str) -> Option<u32> {
        self.inner.lock().slots.get(key).and_then(|s| s.pid)
    }

    /// Stops every adapter (SIGTERM, then kill after `stop_grace`) and waits for them.
    pub async fn shutdown(&self) {
        let tasks: Vec<JoinHandle<()>> = {
            let mut state = self.inner.lock();
            let slots = std::mem::take(&mut state.slots);
            rebuild(&self.inner, &mut state);
            slots
                .into_values()
                .filter_map(|mut s| {
                    s.cancel.cancel();
                    s.task.take()
                })
                .collect()
        };
        self.inner.bump();
        let bound = self.inner.options.stop_grace + Duration::from_secs(2);
        for task in tasks {
            let _ = tokio::time::timeout(bound, task).await;
        }
    }

    /// Bumps whenever the registry or status changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }
}

/// Recomputes final tool verdicts and the registry from every slot's candidates.
fn rebuild(inner: &Arc<Inner>, state: &mut State) {
    let limits = ToolLimits { max_result_bytes: inner.options.max_result_bytes, ..ToolLimits::default() };
    let mut builder = RegistryBuilder::new(limits);
    let weak = Arc::downgrade(inner);
    for slot in state.slots.values_mut() {
        let mut tools = Vec::with_capacity(slot.candidates.len());
        for candidate in &slot.candidates {
            let mut tool = candidate.tool.clone();
            if let Some(spec) = &candidate.spec {
                let handler = handler(
                    weak.clone(),
                    slot.config.key.clone(),
                    spec.name.to_string(),
                    tool.remote_name.clone(),
                    slot.config.effective_call_timeout(),
                    inner.options.max_result_bytes,
                );
                if let Err(e) = builder.register(spec.clone(), handler) {
                    tool.authorized = false;
                    tool.reason = Some(bounded(&e.to_string(), MAX_ERROR_BYTES));
                }
            }
            tools.push(tool);
        }
        slot.tools = tools;
    }
    state.registry = builder.build();
}

/// A registry handler that calls the adapter's live session at call time.
fn handler(
    inner: Weak<Inner>,
    key: String,
    host_name: String,
    remote: String,
    call_timeout: Duration,
    max_result_bytes: usize,
) -> Arc<dyn ToolHandler> {
    Arc::new(move |arguments: Value| -> ToolFuture {
        let live = current_session(&inner, &key, &host_name);
        let params = match arguments {
            Value::Object(map) => Ok(CallToolRequestParams::new(remote.clone()).with_arguments(map)),
            _ => Err("arguments must be a JSON object".to_owned()),
        };
        let key = key.clone();
        Box::pin(async move {
            let live = live?;
            let params = params?;
            match tokio::time::timeout(call_timeout, live.peer.call_tool(params)).await {
                Err(_) => Err(format!("MCP adapter {key} did not answer within {call_timeout:?}")),
                Ok(Err(e)) => {
                    let message = bounded(&format!("MCP adapter {key}: {e}"), MAX_ERROR_BYTES);
                    if matches!(e, ServiceError::TransportSend(_) | ServiceError::TransportClosed) {
                        live.failure.report(message.clone());
                    }
                    Err(message)
                }
                Ok(Ok(result)) => Ok(render_result(&result, max_result_bytes)),
            }
        })
    })
}

fn current_session(inner: &Weak<Inner>, key: &str, host_name: &str) -> Result<Live, String> {
    let inner = inner.upgrade().ok_or_else(|| "the MCP host has stopped".to_owned())?;
    let state = inner.lock();
    let slot = state.slots.get(key).ok_or_else(|| format!("MCP adapter {key} is not configured"))?;
    if !slot.tools.iter().any(|t| t.authorized && t.name == host_name) {
        return Err(format!("tool {host_name} is no longer authorized by MCP adapter {key}"));
    }
    slot.live.clone().ok_or_else(|| match &slot.last_error {
        Some(e) => format!("MCP adapter {key} is not connected (last error: {e})"),
        None => format!("MCP adapter {key} is not connected"),
    })
}

/// Applies `f` to this supervisor's slot (if it is still current), optionally rebuilding the
/// registry, and bumps the version. False when the slot or the host is gone.
fn update(inner: &Weak<Inner>, key: &str, id: u64, rebuild_registry: bool, f: impl FnOnce(&mut Slot)) -> bool {
    let Some(inner) = inner.upgrade() else { return false };
    {
        let mut state = inner.lock();
        match state.slots.get_mut(key) {
            Some(slot) if slot.id == id => f(slot),
            _ => return false,
        }
        if rebuild_registry {
            rebuild(&inner, &mut state);
        }
    }
    inner.bump();
    true
}

/// How a session ended.
enum End {
    Cancelled,
    Failed(String),
}

async fn supervise(
    inner: Weak<Inner>,
    id: u64,
    config: Arc<AdapterConfig>,
    options: HostOptions,
    cancel: CancellationToken,
    previous: Option<JoinHandle<()>>,
) {
    let key = config.key.as_str();
    // A restarted adapter's old session (and child) goes first.
    if let Some(previous) = previous {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = previous => {}
        }
    }
    let mut backoff = options.reconnect_backoff.min;
    let mut first = true;
    loop {
        if !first && !update(&inner, key, id, false, |slot| slot.phase = AdapterPhase::Connecting) {
            return;
        }
        first = false;
        let attempt = tokio::select! {
            _ = cancel.cancelled() => return,
            r = tokio::time::timeout(options.connect_timeout, connect(&config, &options)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!("connecting did not finish within {:?}", options.connect_timeout)),
            },
        };
        let error = match attempt {
            Err(e) => e,
            Ok(session) => match run_session(&inner, id, &config, &options, &cancel, session, &mut backoff).await {
                End::Cancelled => return,
                End::Failed(e) => e,
            },
        };
        let error = bounded(&error, MAX_ERROR_BYTES);
        tracing::warn!(adapter = key, error = error.as_str(), retry_in = ?backoff, "MCP adapter disconnected");
        let current = update(&inner, key, id, false, |slot| {
            slot.connected = false;
            slot.phase = AdapterPhase::Retrying;
            slot.live = None;
            slot.pid = None;
            slot.last_error = Some(error);
        });
        if !current {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(options.reconnect_backoff.max).max(options.reconnect_backoff.min);
    }
}

async fn run_session(
    inner: &Weak<Inner>,
    id: u64,
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
            Ok(Err(e)) => break End::Failed(format!("listing tools failed: {e}")),
            Err(_) => break End::Failed(format!("listing tools did not finish within {:?}", options.connect_timeout)),
        };
        let judged = candidates(config, tools);
        let live = Live { peer: peer.clone(), failure: Arc::clone(&failure) };
        let current = update(inner, key, id, true, |slot| {
            slot.connected = true;
            slot.phase = AdapterPhase::Connected;
            slot.last_error = None;
            slot.pid = pid;
            slot.live = Some(live);
            slot.candidates = judged;
        });
        if !current {
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
            status = wait_child(&mut child) => Err(End::Failed(format!("child process exited ({status})"))),
            r = &mut service_task, if !service_done => {
                service_done = true;
                let why = match r {
                    Ok(Ok(reason)) => format!("{reason:?}"),
                    Ok(Err(e)) | Err(e) => e.to_string(),
                };
                Err(End::Failed(format!("MCP session ended ({why})")))
            }
            message = failure.wait() => Err(End::Failed(message)),
            _ = tools_changed.notified() => Ok(()),
        };
        if let Err(end) = relist {
            break end;
        }
        tracing::debug!(adapter = key, "MCP tool list changed; listing again");
    };

    if let End::Failed(error) = &end {
        // Callers see the failure at once, not after the stop below.
        let error = bounded(error, MAX_ERROR_BYTES);
        update(inner, key, id, false, |slot| {
            slot.connected = false;
            slot.phase = AdapterPhase::Retrying;
            slot.live = None;
            slot.last_error = Some(error);
        });
    }
    stop(key, ct, service_task, service_done, child, options.stop_grace).await;
    end
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
    use rmcp::model::{Tool, ToolAnnotations};

    use super::*;
    use crate::mcp::Transport;
    use crate::tools::{AllowAll, ErrorCode, ToolCall};

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else { panic!("schema must be an object") };
        let mut t = Tool::new(name.to_owned(), format!("{name} tool"), Arc::new(schema));
        let mut a = ToolAnnotations::default();
        a.read_only_hint = Some(true);
        t.annotations = Some(a);
        t
    }

    #[tokio::test]
    async fn registration_errors_revoke_authorization() {
        let host = McpHost::new(HostOptions::default());
        let config = AdapterConfig {
            key: "McpAdapter/ns/x".into(),
            namespace: "x".into(),
            transport: Transport::Http { url: "http://127.0.0.1:1/mcp".into(), headers: vec![] },
            allow: [Permission::Read].into(),
            tools: None,
            call_timeout: Duration::from_secs(1),
            fingerprint: "f".into(),
        };
        let listed = vec![
            tool("good", serde_json::json!({"type": "object"})),
            tool("bad", serde_json::json!({"type": "object", "properties": {"n": {"type": "nope"}}})),
            tool("loose", serde_json::json!({"properties": {}})),
        ];
        {
            let mut state = host.inner.lock();
            let slot = Slot {
                id: 0,
                candidates: candidates(&config, listed),
                config: Arc::new(config),
                cancel: CancellationToken::new(),
                task: None,
                connected: false,
                phase: AdapterPhase::Retrying,
                last_error: Some("connection refused".into()),
                pid: None,
                live: None,
                tools: Vec::new(),
            };
            state.slots.insert("McpAdapter/ns/x".into(), slot);
            rebuild(&host.inner, &mut state);
        }
        let status = host.status().remove(0);
        let verdict = |n: &str| status.tools.iter().find(|t| t.remote_name == n).cloned().unwrap();
        assert!(verdict("good").authorized);
        assert!(!verdict("bad").authorized);
        assert!(verdict("bad").reason.unwrap().contains("does not compile"));
        assert!(!verdict("loose").authorized);
        assert!(verdict("loose").reason.unwrap().contains("\"type\": \"object\""));
        let registry = host.registry();
        assert_eq!(registry.len(), 1);

        // A registered tool of a disconnected adapter fails cleanly, naming the last error.
        let call = ToolCall { id: "c".into(), name: "x.good".into(), arguments: "{}".into() };
        let result = registry.execute(&call, &AllowAll).await;
        let error = result.error.unwrap();
        assert_eq!(error.code, ErrorCode::ToolError);
        assert!(error.message.contains("not connected") && error.message.contains("connection refused"));
    }
}
