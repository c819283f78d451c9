//! The MCP host: one supervisor task per adapter keeps a session alive, lists and judges its tools,
//! and publishes the authorized ones as a tool [`Registry`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::CallToolRequestParams;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::adapter::{AdapterConfig, Candidate, render_result};
use super::error::McpError;
use super::supervise::{Event, Live, Reporter, supervise};
use super::types::{AdapterPhase, AdapterStatus, DiscoveredTool, HostOptions, MAX_ERROR_BYTES};
use crate::text::{ELLIPSIS, truncate_bytes};
use crate::tools::{Registry, RegistryBuilder, ToolFuture, ToolHandler, ToolLimits};

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
    /// Authorized tools by the Kubernetes namespace of the McpAdapter that
    /// declared them: a Run sees only its own and the shared namespaces' tools.
    registries: BTreeMap<String, Registry>,
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
        let (version, _) = watch::channel(0);
        let state = State { slots: BTreeMap::new(), registries: BTreeMap::new() };
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
        let reporter = SlotReporter { inner: Arc::downgrade(&self.inner), key: config.key.clone(), id };
        let task = tokio::spawn(supervise(
            reporter,
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

    /// The authorized tools of the adapters that have listed tools, by the
    /// namespace of their McpAdapter.
    pub fn registries(&self) -> BTreeMap<String, Registry> {
        self.inner.lock().registries.clone()
    }

    /// Every authorized tool of every namespace in one registry (a name taken by
    /// an earlier namespace is left out), for single-tenant callers and probes.
    pub fn registry(&self) -> Registry {
        let registries = self.registries();
        let limits = ToolLimits { max_result_bytes: self.inner.options.max_result_bytes, ..ToolLimits::default() };
        registries
            .values()
            .fold(RegistryBuilder::new(limits).build(), |all, registry| all.merge(registry).unwrap_or(all))
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
    let mut builders: BTreeMap<String, RegistryBuilder> = BTreeMap::new();
    let weak = Arc::downgrade(inner);
    for slot in state.slots.values_mut() {
        let builder =
            builders.entry(owner(&slot.config.key).to_string()).or_insert_with(|| RegistryBuilder::new(limits));
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
                    tool.reason = Some(truncate_bytes(&e.to_string(), MAX_ERROR_BYTES, ELLIPSIS));
                }
            }
            tools.push(tool);
        }
        slot.tools = tools;
    }
    state.registries = builders.into_iter().map(|(namespace, builder)| (namespace, builder.build())).collect();
}

/// The Kubernetes namespace of an adapter from its key (`McpAdapter/<namespace>/<name>`);
/// a key of another shape (a probe) belongs to the default namespace.
fn owner(key: &str) -> &str {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(_), Some(namespace), Some(_), None) => namespace,
        _ => crate::tenancy::DEFAULT_NAMESPACE,
    }
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
            _ => Err(McpError::ArgumentsNotObject),
        };
        let key = key.clone();
        Box::pin(async move {
            let live = live.map_err(|e| e.to_string())?;
            let params = params.map_err(|e| e.to_string())?;
            match tokio::time::timeout(call_timeout, live.peer.call_tool(params)).await {
                Err(_) => Err(McpError::CallTimeout { key, timeout: call_timeout }.to_string()),
                Ok(Err(source)) => {
                    let broken = matches!(source, ServiceError::TransportSend(_) | ServiceError::TransportClosed);
                    let message = truncate_bytes(
                        &McpError::Call { key, source: Box::new(source) }.to_string(),
                        MAX_ERROR_BYTES,
                        ELLIPSIS,
                    );
                    if broken {
                        live.failure.report(message.clone());
                    }
                    Err(message)
                }
                // A result the server marks `isError` is a failed call: recorded and shown as
                // failed and never citable as evidence; the model still reads its (redacted) text.
                Ok(Ok(result)) if result.is_error == Some(true) => {
                    Err(format!("the tool reported an error: {}", render_result(&result, max_result_bytes)))
                }
                Ok(Ok(result)) => Ok(render_result(&result, max_result_bytes)),
            }
        })
    })
}

fn current_session(inner: &Weak<Inner>, key: &str, host_name: &str) -> Result<Live, McpError> {
    let inner = inner.upgrade().ok_or(McpError::HostStopped)?;
    let state = inner.lock();
    let slot = state.slots.get(key).ok_or_else(|| McpError::NotConfigured(key.to_owned()))?;
    if !slot.tools.iter().any(|t| t.authorized && t.name == host_name) {
        return Err(McpError::Revoked { tool: host_name.to_owned(), key: key.to_owned() });
    }
    slot.live.clone().ok_or_else(|| McpError::NotConnected { key: key.to_owned(), last_error: slot.last_error.clone() })
}

/// A supervisor's handle on its slot: events apply only while the slot is still this one.
struct SlotReporter {
    inner: Weak<Inner>,
    key: String,
    /// The slot's id at start; a restarted adapter has a new one.
    id: u64,
}

impl Reporter for SlotReporter {
    fn report(&self, event: Event) -> bool {
        let Some(inner) = self.inner.upgrade() else { return false };
        {
            let mut state = inner.lock();
            let rebuild_registry = match state.slots.get_mut(&self.key) {
                Some(slot) if slot.id == self.id => slot.apply(event),
                _ => return false,
            };
            if rebuild_registry {
                rebuild(&inner, &mut state);
            }
        }
        inner.bump();
        true
    }
}

impl Slot {
    /// Applies a supervisor's event; true when the registry must be rebuilt.
    fn apply(&mut self, event: Event) -> bool {
        match event {
            Event::Connecting => {
                self.phase = AdapterPhase::Connecting;
                false
            }
            Event::Listed { pid, live, candidates } => {
                self.connected = true;
                self.phase = AdapterPhase::Connected;
                self.last_error = None;
                self.pid = pid;
                self.live = Some(live);
                self.candidates = candidates;
                true
            }
            Event::SessionLost { error } => {
                self.disconnect(error);
                false
            }
            Event::Retrying { error } => {
                self.disconnect(error);
                self.pid = None;
                false
            }
        }
    }

    fn disconnect(&mut self, error: String) {
        self.connected = false;
        self.phase = AdapterPhase::Retrying;
        self.live = None;
        self.last_error = Some(error);
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{Tool, ToolAnnotations};

    use super::*;
    use crate::mcp::adapter::{Transport, candidates};
    use crate::resources::mcp_adapter::Permission;
    use crate::tools::{AllowAll, ErrorCode, ToolCall};

    const KEY: &str = "McpAdapter/ns/x";

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else { panic!("schema must be an object") };
        let mut t = Tool::new(name.to_owned(), format!("{name} tool"), Arc::new(schema));
        let mut a = ToolAnnotations::default();
        a.read_only_hint = Some(true);
        t.annotations = Some(a);
        t
    }

    fn config() -> AdapterConfig {
        AdapterConfig {
            key: KEY.into(),
            namespace: "x".into(),
            transport: Transport::Http { url: "http://127.0.0.1:1/mcp".into(), headers: vec![] },
            allow: [Permission::Read].into(),
            tools: None,
            call_timeout: Duration::from_secs(1),
            fingerprint: "f".into(),
        }
    }

    /// A slot without a supervisor, as after a failed connection.
    fn slot(id: u64, listed: Vec<Tool>) -> Slot {
        let config = config();
        Slot {
            id,
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
        }
    }

    #[tokio::test]
    async fn registration_errors_revoke_authorization() {
        let host = McpHost::new(HostOptions::default());
        let listed = vec![
            tool("good", serde_json::json!({"type": "object"})),
            tool("bad", serde_json::json!({"type": "object", "properties": {"n": {"type": "nope"}}})),
            tool("loose", serde_json::json!({"properties": {}})),
        ];
        {
            let mut state = host.inner.lock();
            state.slots.insert(KEY.into(), slot(0, listed));
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
        assert_eq!(error.message, "MCP adapter McpAdapter/ns/x is not connected (last error: connection refused)");
    }

    #[test]
    fn supervisor_events_move_the_slot_between_phases() {
        let mut slot = slot(0, Vec::new());
        slot.pid = Some(42);
        assert!(!slot.apply(Event::Connecting));
        assert_eq!((slot.phase, slot.last_error.as_deref()), (AdapterPhase::Connecting, Some("connection refused")));
        // A lost session keeps the pid while its child is being stopped.
        slot.connected = true;
        assert!(!slot.apply(Event::SessionLost { error: "child process exited".into() }));
        assert_eq!((slot.connected, slot.phase, slot.pid), (false, AdapterPhase::Retrying, Some(42)));
        assert_eq!(slot.last_error.as_deref(), Some("child process exited"));
        assert!(!slot.apply(Event::Retrying { error: "cannot start".into() }));
        assert_eq!(
            (slot.phase, slot.pid, slot.last_error.as_deref()),
            (AdapterPhase::Retrying, None, Some("cannot start"))
        );
    }

    #[test]
    fn events_of_a_replaced_or_orphaned_supervisor_are_refused() {
        let host = McpHost::new(HostOptions::default());
        host.inner.lock().slots.insert(KEY.into(), slot(7, Vec::new()));
        let versions = host.subscribe();
        let reporter = |id| SlotReporter { inner: Arc::downgrade(&host.inner), key: KEY.into(), id };
        assert!(!reporter(6).report(Event::Connecting), "an earlier slot's supervisor");
        assert_eq!(host.status()[0].phase, AdapterPhase::Retrying);
        assert!(!versions.has_changed().unwrap());
        assert!(reporter(7).report(Event::Connecting));
        assert_eq!(host.status()[0].phase, AdapterPhase::Connecting);
        assert!(versions.has_changed().unwrap());
        let orphan = reporter(7);
        drop(host);
        assert!(!orphan.report(Event::Connecting), "the host is gone");
    }
}
