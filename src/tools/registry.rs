use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ErrorCode, ToolCall, ToolName, ToolPolicy, ToolResult, openai_alias};
use crate::resources::mcp_adapter::Permission;
use crate::text::{ELLIPSIS, truncate_bytes};

/// Timeout of a [`ToolSpec`] built with [`ToolSpec::new`].
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(10);
/// Maximum tool description length in chars.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

const MAX_CALL_ID_LEN: usize = 128;
/// Bound on a name or id echoed back or logged when it was not accepted.
const MAX_ECHO_BYTES: usize = 256;
const MAX_VALIDATION_MESSAGE_BYTES: usize = 1024;
const MAX_VALIDATION_ERRORS: usize = 3;
const MAX_TOOL_ERROR_BYTES: usize = 4096;

/// Future returned by a tool handler: `Ok(JSON text)` or `Err(message)`.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// Runs a tool with schema-validated arguments.
pub trait ToolHandler: Send + Sync {
    /// Start the call; arguments are always a JSON object that matched the input schema.
    fn call(&self, arguments: Value) -> ToolFuture;
}

impl<F> ToolHandler for F
where
    F: Fn(Value) -> ToolFuture + Send + Sync,
{
    fn call(&self, arguments: Value) -> ToolFuture {
        self(arguments)
    }
}

/// Registration-time description of a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: ToolName,
    /// Non-empty, at most [`MAX_DESCRIPTION_CHARS`] chars.
    pub description: String,
    pub permission: Permission,
    /// JSON Schema with `"type": "object"`; compiled at registration.
    pub input_schema: Value,
    /// Non-zero; [`DEFAULT_TOOL_TIMEOUT`] by default.
    pub timeout: Duration,
}

impl ToolSpec {
    /// A spec with the default timeout.
    pub fn new(name: ToolName, description: impl Into<String>, permission: Permission, input_schema: Value) -> Self {
        Self { name, description: description.into(), permission, input_schema, timeout: DEFAULT_TOOL_TIMEOUT }
    }

    /// The same spec with another timeout.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Size limits applied by [`Registry::execute`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Maximum raw argument text in bytes (default 64 KiB).
    pub max_argument_bytes: usize,
    /// Maximum handler output text in bytes (default 256 KiB).
    pub max_result_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self { max_argument_bytes: 64 * 1024, max_result_bytes: 256 * 1024 }
    }
}

/// Why a tool could not be registered or registries could not be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid tool name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("tool {name}: description must not be empty")]
    EmptyDescription { name: ToolName },
    #[error("tool {name}: description has {chars} chars, the limit is {MAX_DESCRIPTION_CHARS}")]
    DescriptionTooLong { name: ToolName, chars: usize },
    #[error("tool {name}: input schema must be a JSON object with \"type\": \"object\"")]
    SchemaNotObject { name: ToolName },
    #[error("tool {name}: input schema does not compile: {reason}")]
    InvalidSchema { name: ToolName, reason: String },
    #[error("tool {name}: timeout must be greater than zero")]
    ZeroTimeout { name: ToolName },
    #[error("tool {name} is already registered")]
    Duplicate { name: ToolName },
    #[error("tool {name}: OpenAI alias {alias} collides with tool {other}")]
    AliasCollision { name: ToolName, alias: String, other: ToolName },
}

/// A registered tool; shared between registries derived from one another.
struct Entry {
    spec: ToolSpec,
    alias: String,
    validator: jsonschema::Validator,
    handler: Arc<dyn ToolHandler>,
}

/// Immutable set of tools. Cheap to clone; derived registries share handlers.
#[derive(Clone)]
pub struct Registry {
    entries: BTreeMap<ToolName, Arc<Entry>>,
    aliases: BTreeMap<String, ToolName>,
    limits: ToolLimits,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("tools", &self.entries.keys().collect::<Vec<_>>()).finish()
    }
}

/// Collects tools into a [`Registry`].
#[derive(Debug)]
pub struct RegistryBuilder {
    inner: Registry,
}

impl RegistryBuilder {
    /// An empty builder.
    pub fn new(limits: ToolLimits) -> Self {
        Self { inner: Registry::empty(limits) }
    }

    /// Validate `spec`, compile its schema and add the tool.
    pub fn register(&mut self, spec: ToolSpec, handler: Arc<dyn ToolHandler>) -> Result<(), RegistryError> {
        let entry = compile(spec, handler)?;
        self.inner.insert(Arc::new(entry))
    }

    /// Finish building.
    pub fn build(self) -> Registry {
        self.inner
    }
}

fn compile(spec: ToolSpec, handler: Arc<dyn ToolHandler>) -> Result<Entry, RegistryError> {
    let name = &spec.name;
    if spec.description.trim().is_empty() {
        return Err(RegistryError::EmptyDescription { name: name.clone() });
    }
    let chars = spec.description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(RegistryError::DescriptionTooLong { name: name.clone(), chars });
    }
    if spec.input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(RegistryError::SchemaNotObject { name: name.clone() });
    }
    if spec.timeout.is_zero() {
        return Err(RegistryError::ZeroTimeout { name: name.clone() });
    }
    // Offline: `$ref`s to anything outside the schema (network or file) fail here instead of being fetched.
    let validator = jsonschema::options().offline().build(&spec.input_schema).map_err(|e| {
        RegistryError::InvalidSchema { name: name.clone(), reason: truncate_bytes(&e.to_string(), 1024, ELLIPSIS) }
    })?;
    let alias = openai_alias(name);
    Ok(Entry { spec, alias, validator, handler })
}

impl Registry {
    fn empty(limits: ToolLimits) -> Self {
        Self { entries: BTreeMap::new(), aliases: BTreeMap::new(), limits }
    }

    /// Add an entry, rejecting duplicate names and any overlap between names and aliases.
    fn insert(&mut self, entry: Arc<Entry>) -> Result<(), RegistryError> {
        let name = &entry.spec.name;
        if self.entries.contains_key(name) {
            return Err(RegistryError::Duplicate { name: name.clone() });
        }
        check_alias_free(&self.entries, &self.aliases, name, &entry.alias)?;
        self.aliases.insert(entry.alias.clone(), name.clone());
        self.entries.insert(name.clone(), entry);
        Ok(())
    }

    fn derived(&self, keep: impl Fn(&Entry) -> bool) -> Registry {
        let mut out = Registry::empty(self.limits);
        for entry in self.entries.values().filter(|e| keep(e)) {
            out.aliases.insert(entry.alias.clone(), entry.spec.name.clone());
            out.entries.insert(entry.spec.name.clone(), Arc::clone(entry));
        }
        out
    }

    /// Specs of all tools, sorted by name.
    pub fn definitions(&self) -> Vec<&ToolSpec> {
        self.entries.values().map(|e| &e.spec).collect()
    }

    /// Spec of the tool with this exact host name.
    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.entries.get(name).map(|e| &e.spec)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Limits applied by [`Registry::execute`].
    pub fn limits(&self) -> ToolLimits {
        self.limits
    }

    /// A registry with only the tools `policy` allows.
    pub fn filter(&self, policy: &dyn ToolPolicy) -> Registry {
        self.derived(|e| policy.allows(&e.spec))
    }

    /// A registry without the named tools (unknown names are ignored).
    pub fn without(&self, names: &[&str]) -> Registry {
        self.derived(|e| !names.contains(&e.spec.name.as_str()))
    }

    /// Union of two registries (keeping `self`'s limits); a name or alias present in both is an error.
    pub fn merge(&self, other: &Registry) -> Result<Registry, RegistryError> {
        let mut out = self.clone();
        for entry in other.entries.values() {
            out.insert(Arc::clone(entry))?;
        }
        Ok(out)
    }

    /// OpenAI function name of a tool (see [`openai_alias`]).
    pub fn alias(&self, name: &ToolName) -> String {
        self.entries.get(name).map_or_else(|| openai_alias(name), |e| e.alias.clone())
    }

    /// The alias of a registered tool given by host name.
    pub fn alias_of(&self, name: &str) -> Option<String> {
        self.entries.get(name).map(|e| e.alias.clone())
    }

    /// Whether `name` is a registered tool (by host name) and `arguments` satisfy its
    /// input schema; used to validate a plan before any check runs.
    pub fn check_arguments(&self, name: &str, arguments: &Value) -> Result<(), ArgumentsError> {
        let entry = self.entries.get(name).ok_or_else(|| ArgumentsError::UnknownTool(name.to_owned()))?;
        validate(&entry.validator, arguments)
    }

    /// The registered tool whose alias is exactly `function_name`.
    pub fn resolve_alias(&self, function_name: &str) -> Option<&ToolName> {
        self.aliases.get(function_name)
    }

    /// OpenAI `tools` array, sorted by name.
    pub fn openai_definitions(&self) -> Vec<Value> {
        self.entries
            .values()
            .map(|e| {
                serde_json::json!({
                    "type": "function",
                    "function": {
                        "name": e.alias,
                        "description": format!("{} (Akritas tool: {})", e.spec.description, e.spec.name),
                        "parameters": e.spec.input_schema,
                    }
                })
            })
            .collect()
    }

    fn resolve(&self, name: &str) -> Option<&Arc<Entry>> {
        self.entries.get(name).or_else(|| self.aliases.get(name).and_then(|n| self.entries.get(n)))
    }

    /// Check and run one call. Never panics or fails: every problem becomes a [`ToolResult`] error.
    pub async fn execute(&self, call: &ToolCall, policy: &dyn ToolPolicy) -> ToolResult {
        let started = Instant::now();
        let call_id = truncate_bytes(&call.id, MAX_ECHO_BYTES, ELLIPSIS);
        let entry = self.resolve(&call.name);
        let tool =
            entry.map_or_else(|| truncate_bytes(&call.name, MAX_ECHO_BYTES, ELLIPSIS), |e| e.spec.name.to_string());
        tracing::info!(tool = tool.as_str(), call_id = call_id.as_str(), "tool call started");

        let mut result = match self.run(call, entry, policy).await {
            Ok(output) => ToolResult::ok(call_id.as_str(), tool.as_str(), output),
            Err((code, message)) => ToolResult::err(call_id.as_str(), tool.as_str(), code, message),
        };
        result.duration = started.elapsed();
        // Metrics name only tools of the registry: a model-chosen unknown name is `unknown`.
        let known = entry.map_or("unknown", |e| e.spec.name.as_str());
        crate::telemetry::count(
            "akritas_tool_calls_total",
            "Tool calls by tool and outcome (ok or the error code).",
            &[("tool", known), ("outcome", result.status())],
            1.0,
        );
        crate::telemetry::observe(
            "akritas_tool_call_seconds",
            "Latency of one tool call, by tool.",
            &[("tool", known)],
            result.duration,
        );
        let duration_ms = u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            tool = tool.as_str(),
            call_id = call_id.as_str(),
            status = result.status(),
            duration_ms,
            "tool call finished"
        );
        result
    }

    async fn run(
        &self,
        call: &ToolCall,
        entry: Option<&Arc<Entry>>,
        policy: &dyn ToolPolicy,
    ) -> Result<Value, (ErrorCode, String)> {
        // 1. Call shape.
        let arguments = self.parse_call(call).map_err(|e| (ErrorCode::InvalidCall, e.to_string()))?;
        // 2. Resolution.
        let Some(entry) = entry else {
            return Err((
                ErrorCode::UnknownTool,
                format!("unknown tool {:?}", truncate_bytes(&call.name, MAX_ECHO_BYTES, ELLIPSIS)),
            ));
        };
        let spec = &entry.spec;
        // 3. Policy.
        if !policy.allows(spec) {
            return Err((ErrorCode::PermissionDenied, format!("tool {} is not authorized for this Run", spec.name)));
        }
        // 4. Schema.
        validate(&entry.validator, &arguments).map_err(|e| (ErrorCode::InvalidArguments, e.to_string()))?;
        // 5. Handler, on its own task so a panic or a timeout cannot take the caller down.
        let task = AbortOnDrop(tokio::spawn(entry.handler.call(arguments)));
        let text = match tokio::time::timeout(spec.timeout, task).await {
            Err(_) => {
                return Err((
                    ErrorCode::Timeout,
                    format!("tool {} did not finish within {:?}", spec.name, spec.timeout),
                ));
            }
            Ok(Err(join)) => {
                let what = if join.is_panic() { "panicked" } else { "was cancelled" };
                return Err((ErrorCode::ToolError, format!("tool {} {what}", spec.name)));
            }
            Ok(Ok(Err(message))) => {
                return Err((ErrorCode::ToolError, truncate_bytes(&message, MAX_TOOL_ERROR_BYTES, ELLIPSIS)));
            }
            Ok(Ok(Ok(text))) => text,
        };
        // 6. Result.
        if text.len() > self.limits.max_result_bytes {
            return Err((
                ErrorCode::ResultTooLarge,
                format!("tool output is {} bytes, the limit is {}", text.len(), self.limits.max_result_bytes),
            ));
        }
        if text.trim().is_empty() {
            return Err((ErrorCode::InvalidResult, "tool returned an empty result".to_owned()));
        }
        serde_json::from_str(&text).map_err(|e| (ErrorCode::InvalidResult, format!("tool returned invalid JSON: {e}")))
    }

    fn parse_call(&self, call: &ToolCall) -> Result<Value, CallError> {
        let id_ok = !call.id.is_empty()
            && call.id.len() <= MAX_CALL_ID_LEN
            && call.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !id_ok {
            return Err(CallError::BadId);
        }
        if call.name.is_empty() {
            return Err(CallError::EmptyName);
        }
        if call.arguments.len() > self.limits.max_argument_bytes {
            return Err(CallError::TooLarge { bytes: call.arguments.len(), limit: self.limits.max_argument_bytes });
        }
        if call.arguments.trim().is_empty() {
            return Ok(Value::Object(serde_json::Map::new()));
        }
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(v @ Value::Object(_)) => Ok(v),
            Ok(_) => Err(CallError::NotAnObject),
            Err(e) => Err(CallError::InvalidJson(e)),
        }
    }
}

/// Why a tool call cannot be executed as sent (answered to the model as `invalid_call`).
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call id is empty, too long or has other characters.
    #[error("call id must be 1-{MAX_CALL_ID_LEN} characters of [A-Za-z0-9_.-]")]
    BadId,
    /// No tool name.
    #[error("tool name must not be empty")]
    EmptyName,
    /// Arguments over the byte limit.
    #[error("arguments are {bytes} bytes, the limit is {limit}")]
    TooLarge { bytes: usize, limit: usize },
    /// Arguments that are JSON but not an object.
    #[error("arguments must be a JSON object")]
    NotAnObject,
    /// Arguments that are not JSON.
    #[error("arguments are not valid JSON: {0}")]
    InvalidJson(serde_json::Error),
}

/// Why arguments cannot go to a tool.
#[derive(Debug, thiserror::Error)]
pub enum ArgumentsError {
    /// No registered tool has this name.
    #[error("{0:?} is not an available execution tool")]
    UnknownTool(String),
    /// The arguments break the tool's input schema: the first few violations with
    /// their instance paths, bounded in size.
    #[error("{0}")]
    Schema(String),
}

/// First few schema violations with their instance paths, bounded in size.
fn validate(validator: &jsonschema::Validator, arguments: &Value) -> Result<(), ArgumentsError> {
    let mut errors = validator.iter_errors(arguments).peekable();
    if errors.peek().is_none() {
        return Ok(());
    }
    let mut message = String::from("arguments do not match the input schema: ");
    for (count, error) in errors.enumerate() {
        if count == MAX_VALIDATION_ERRORS {
            message.push_str("; ...");
            break;
        }
        if count > 0 {
            message.push_str("; ");
        }
        let path = error.instance_path().as_str();
        let path = if path.is_empty() { "/" } else { path };
        message.push_str(&format!("at {path}: {}", truncate_bytes(&error.to_string(), 300, ELLIPSIS)));
    }
    Err(ArgumentsError::Schema(truncate_bytes(&message, MAX_VALIDATION_MESSAGE_BYTES, ELLIPSIS)))
}

/// Rejects `alias` if it is another tool's alias or host name, or if `name` is another tool's alias.
fn check_alias_free(
    entries: &BTreeMap<ToolName, Arc<Entry>>,
    aliases: &BTreeMap<String, ToolName>,
    name: &ToolName,
    alias: &str,
) -> Result<(), RegistryError> {
    let clash = aliases
        .get(alias)
        .or_else(|| entries.get_key_value(alias).map(|(k, _)| k))
        .or_else(|| aliases.get(name.as_str()));
    match clash {
        Some(other) => {
            Err(RegistryError::AliasCollision { name: name.clone(), alias: alias.to_owned(), other: other.clone() })
        }
        None => Ok(()),
    }
}

/// Aborts the spawned handler when the caller stops waiting (timeout or cancellation).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_collision_is_detected() {
        let a: ToolName = "a".parse().unwrap();
        let b: ToolName = "b".parse().unwrap();
        let mut aliases = BTreeMap::new();
        aliases.insert("akritas_x_00000000".to_owned(), a.clone());
        let entries = BTreeMap::new();
        let err = check_alias_free(&entries, &aliases, &b, "akritas_x_00000000");
        assert_eq!(
            err,
            Err(RegistryError::AliasCollision { name: b.clone(), alias: "akritas_x_00000000".into(), other: a })
        );
        assert_eq!(check_alias_free(&entries, &aliases, &b, "akritas_y_00000000"), Ok(()));
        // A host name equal to an existing alias is also a collision.
        let n: ToolName = "akritas_x_00000000".parse().unwrap();
        assert!(check_alias_free(&entries, &aliases, &n, "akritas_other").is_err());
    }
}
