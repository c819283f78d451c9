//! Service configuration for `akritas serve`.
//!
//! One typed [`Settings`] value is resolved from four layers, highest first:
//! command-line flags ([`ServeFlags`]) > `AKRITAS_*` environment variables >
//! a strict, versioned JSON file (`--config` / `AKRITAS_CONFIG`) > built-in
//! defaults. Each setting `some_key` has the flag `--some-key`, the
//! environment variable `AKRITAS_SOME_KEY` and the file key `some_key`
//! (exception: the repeatable `--api-key NAME=ENV_VAR` flag for `api_keys`).
//!
//! Secrets are never values here, only the NAMES of the environment
//! variables that hold them. Relative paths (from any layer, including the
//! config file) are relative to the process working directory, not to the
//! config file.
//!
//! Text values (flags, environment): integers, floats, booleans
//! (`true`/`false`/`1`/`0`), durations (`30s`, `10m`), and lists. A list in
//! an environment variable is a JSON string array when the value starts with
//! `[`, otherwise comma-separated (items trimmed, empty items rejected, empty
//! value = empty list); a list flag is comma-separated, repeatable, and
//! replaces the lower layers' list entirely.

mod duration;
mod error;
mod file;
mod flag_field;
mod lists;
mod optional;
mod rules;
#[macro_use]
mod table;
mod types;
mod value;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_sections;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use flag_field::FlagField;
use value::SettingValue;

use crate::llm::structured::Protocol;

pub use error::{ConfigError, Source};
pub use file::{FILE_VERSION, MAX_FILE_BYTES};
pub use types::{ApiKeyRef, LogFormat, SandboxMode, Scope};

/// Environment variable naming the config file when `--config` is absent.
pub(crate) const CONFIG_ENV: &str = "AKRITAS_CONFIG";

/// Prefix of all setting environment variables.
pub(crate) const ENV_PREFIX: &str = "AKRITAS_";

/// The sections of the config file, in the order the reference lists them; each setting
/// belongs to one ([`section_of`]).
pub const SECTIONS: [&str; 9] =
    ["server", "model", "budget", "alerts", "storage", "operator", "mcp", "change", "kubernetes"];

/// Defaults that a lower layer's own settings also start from (its `Default`, for tests and
/// callers without a configuration): declared here once.
pub(crate) mod defaults {
    use std::time::Duration;

    /// `mcp_max_sessions`.
    pub(crate) const MCP_MAX_SESSIONS: u32 = 64;
    /// `mcp_max_sessions_per_key`.
    pub(crate) const MCP_MAX_SESSIONS_PER_KEY: u32 = 16;
    /// `mcp_session_idle_timeout`.
    pub(crate) const MCP_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    /// `header_read_timeout`.
    pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// `max_connections`.
    pub(crate) const MAX_CONNECTIONS: u32 = 1024;
    /// `alert_source_rate`.
    pub(crate) const ALERT_SOURCE_RATE: u32 = 60;
    /// `alert_pending_jobs`.
    pub(crate) const ALERT_PENDING_JOBS: u32 = 1000;
    /// `alert_pending_jobs_per_namespace`.
    pub(crate) const ALERT_PENDING_JOBS_PER_NAMESPACE: u32 = 100;
    /// `alert_deferred_jobs`.
    pub(crate) const ALERT_DEFERRED_JOBS: u32 = 100;
}

/// Port `serve` listens on by default.
pub(crate) const DEFAULT_PORT: u16 = 8090;
/// The base URL of a host `serve` started with its default address: what every client command
/// (`akritas change`, `akritas run export`) talks to unless told otherwise.
pub(crate) const DEFAULT_API_URL: &str = "http://127.0.0.1:8090";

/// The environment variable for setting `key`: `AKRITAS_` + upper snake case.
pub fn env_var_name(key: &str) -> String {
    format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())
}

/// Help line of a flag: its description, environment variable and default.
fn flag_help(description: &str, env: &str, default: &str) -> String {
    format!("{} [env: {env}] [default: {default}]", description.trim())
}

/// Help line of `--config`.
pub(crate) fn config_flag_help() -> String {
    flag_help("Strict JSON config file", CONFIG_ENV, "none")
}

settings_table! {
    /// Address to listen on
    address: SocketAddr = SocketAddr::from((Ipv4Addr::LOCALHOST, DEFAULT_PORT));
        flag "address" [Option<String>] value_name "ADDR";
        expect "a socket address such as 127.0.0.1:8090";
        check value::ok; section "server";
    /// Externally visible base URL of this service, absolute http(s), no query or fragment
    public_url: Option<String> = None;
        flag "public-url" [Option<String>] value_name "URL";
        expect "an absolute http(s) URL such as https://akritas.example.com";
        check value::check_public_url; section "server";
    /// Upstream OpenAI-compatible API base URL, ending in /v1
    base_url: String = "http://127.0.0.1:8080/v1".to_string();
        flag "base-url" [Option<String>] value_name "URL";
        expect "an absolute http(s) URL ending in /v1 such as http://127.0.0.1:8080/v1";
        check value::check_base_url; section "model";
    /// Model name sent upstream; empty = the requested model
    upstream_model: Option<String> = None;
        flag "upstream-model" [Option<String>] value_name "NAME";
        expect "a model name of at most 256 characters without control characters";
        check value::check_upstream_model; section "model";
    /// How structured answers (plans, results, proposals) are asked for: auto (probe the server, fall back from forced tool calls to a JSON schema as it shows), tool_call, json_schema, json_object or text
    model_protocol: Protocol = Protocol::Auto;
        flag "model-protocol" [Option<String>] value_name "MODE";
        expect "auto, tool_call, json_schema, json_object or text";
        check value::ok; section "model";
    /// Model name this service exposes
    model: String = "akritas".to_string();
        flag "model" [Option<String>] value_name "NAME";
        expect "1-128 characters matching ^[A-Za-z0-9][A-Za-z0-9._:/-]*$";
        check value::check_model; section "model";
    /// Name of the environment variable holding the upstream API key
    upstream_api_key_env: String = "OPENAI_API_KEY".to_string();
        flag "upstream-api-key-env" [Option<String>] value_name "ENV_VAR";
        expect "an environment variable name such as OPENAI_API_KEY";
        check value::check_env_name; section "model";
    /// Client API keys as NAME=ENV_VAR[:SCOPE+SCOPE][@NAMESPACE] (repeatable or comma-separated; secret read from ENV_VAR; scopes metrics, read, chat, admin, default admin)
    api_keys: Vec<ApiKeyRef> = vec![ApiKeyRef::admin("default", "AKRITAS_API_KEY")];
        flag "api-key" [Vec<String>] value_name "NAME=ENV_VAR[:SCOPES][@NAMESPACE]" delimiter ',';
        expect "at most 32 NAME=ENV_VAR[:SCOPE+SCOPE][@NAMESPACE] entries with unique names";
        check value::check_api_keys; section "server";
    /// Serve without client authentication
    allow_unauthenticated: bool = false;
        flag "allow-unauthenticated" [bool];
        expect "true or false (or 1 or 0)";
        check value::ok; section "server";
    /// System instructions file
    system_instructions: PathBuf = PathBuf::from("instructions/SYSTEM.md");
        flag "system-instructions" [Option<String>] value_name "PATH";
        expect "a non-empty path";
        check value::non_empty_path; section "model";
    /// Response language as a BCP 47 tag
    response_language: String = "en".to_string();
        flag "response-language" [Option<String>] value_name "TAG";
        expect "a BCP 47 language tag such as en, en-US or zh-Hant-TW";
        check value::check_language; section "model";
    /// Directory of resource manifests, standalone mode (repeatable or comma-separated)
    resources: Vec<PathBuf> = Vec::new();
        flag "resources" [Vec<String>] value_name "DIR" delimiter ',';
        expect "at most 64 non-empty directory paths";
        check lists::check_resources; section "operator";
    /// Operator mode: read resources from the Kubernetes API
    kubernetes: bool = false;
        flag "kubernetes" [bool];
        expect "true or false (or 1 or 0)";
        check value::ok; section "operator";
    /// Namespace watched in operator mode; empty = every namespace Akritas may read
    namespace: Option<String> = None;
        flag "namespace" [Option<String>] value_name "NAME";
        expect "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)";
        check lists::check_namespace; section "operator";
    /// Operator mode: namespaces watched (repeatable or comma-separated), with `namespace`; none = every namespace Akritas may read
    namespaces: Vec<String> = Vec::new();
        flag "namespaces" [Vec<String>] value_name "NAME" delimiter ',';
        expect "at most 64 Kubernetes namespace names";
        check lists::check_namespaces; section "operator";
    /// Namespaces whose tools, skills, knowledge and receivers every namespace uses (repeatable or comma-separated)
    shared_namespaces: Vec<String> = Vec::new();
        flag "shared-namespaces" [Vec<String>] value_name "NAME" delimiter ',';
        expect "at most 64 Kubernetes namespace names";
        check lists::check_namespaces; section "operator";
    /// Built-in read-only Kubernetes tools (`kubernetes.*`): in operator mode, and standalone when a kubeconfig is found
    kubernetes_tools: bool = true;
        flag "kubernetes-tools" [Option<String>] value_name "BOOL";
        expect "true or false (or 1 or 0)";
        check value::ok; section "kubernetes";
    /// Standalone mode: kubeconfig file the Kubernetes tools read the cluster with (its current context); unset: $KUBECONFIG, else ~/.kube/config
    kubeconfig: Option<String> = None;
        flag "kubeconfig" [Option<String>] value_name "PATH";
        expect "a path to a kubeconfig file";
        check lists::check_optional_path; section "kubernetes";
    /// Namespaces whose Runs the Kubernetes tools let read every namespace they reach and Nodes (with the home namespace and `shared_namespaces`); other Runs read their own namespace only
    kubernetes_cluster_namespaces: Vec<String> = Vec::new();
        flag "kubernetes-cluster-namespaces" [Vec<String>] value_name "NAME" delimiter ',';
        expect "at most 64 Kubernetes namespace names";
        check lists::check_namespaces; section "kubernetes";
    /// Commands an McpAdapter may start over stdio: absolute paths, or `akritas` for this binary (which may only run `akritas mcp ...`)
    stdio_commands: Vec<String> = vec!["akritas".to_string()];
        flag "stdio-commands" [Vec<String>] value_name "COMMAND" delimiter ',';
        expect "at most 64 entries, each `akritas` or an absolute path";
        check lists::check_stdio_commands; section "mcp";
    /// Variables an McpAdapter's stdio `env` may set in its child; a trailing `*` matches a prefix; `NAMESPACE/NAME` allows it to that namespace only, a plain name to the home and shared namespaces; `LD_*`/`DYLD_*` never
    stdio_env: Vec<String> = Vec::new();
        flag "stdio-env" [Vec<String>] value_name "[NAMESPACE/]NAME" delimiter ',';
        expect "at most 64 environment variable names, each optionally ending in `*` and optionally after `NAMESPACE/`";
        check lists::check_env_patterns; section "mcp";
    /// Programs a ValidatorProfile may run (argv[0]): names looked up on the service's PATH, or absolute paths; nothing else runs, not even for its --version
    validator_commands: Vec<String> = vec!["yamllint".to_string()];
        flag "validator-commands" [Vec<String>] value_name "COMMAND" delimiter ',';
        expect "at most 64 entries, each a program name or an absolute path";
        check lists::check_validator_commands; section "change";
    /// Environment variables a ValidatorProfile's env may pass to its program; a trailing `*` matches a prefix; `NAMESPACE/NAME` allows it to that namespace only, a plain name to the home and shared namespaces; the service's own keys never match
    validator_env: Vec<String> = Vec::new();
        flag "validator-env" [Vec<String>] value_name "[NAMESPACE/]NAME" delimiter ',';
        expect "at most 64 environment variable names, each optionally ending in `*` and optionally after `NAMESPACE/`";
        check lists::check_env_patterns; section "change";
    /// How validators are confined: auto (namespaces where the kernel and runtime allow them, else landlock), namespaces (their own user, mount, PID and network namespaces plus landlock; else they do not run), landlock (Landlock and a seccomp filter; without them they do not run) or off (process limits only)
    validator_sandbox: SandboxMode = SandboxMode::Auto;
        flag "validator-sandbox" [Option<String>] value_name "MODE";
        expect "auto, namespaces, landlock or off";
        check value::ok; section "change";
    /// Directories validators may read and execute besides /usr, /bin, /sbin, /lib*, /etc and /opt (never /etc/akritas, the configuration file, or the data, resource, workspace and knowledge directories, which are carved out of them)
    validator_read_paths: Vec<PathBuf> = Vec::new();
        flag "validator-read-paths" [Vec<String>] value_name "DIR" delimiter ',';
        expect "at most 64 absolute directory paths";
        check lists::check_roots; section "change";
    /// Run validators on a kernel whose Landlock ABI is below 6 (before Linux 6.12), which cannot keep a validator from signalling the host's processes; /health and ValidatorProfile status then say what is lost
    validator_sandbox_allow_weak_landlock: bool = false;
        flag "validator-sandbox-allow-weak-landlock" [Option<String>] value_name "BOOL";
        expect "true or false (or 1 or 0)";
        check value::ok; section "change";
    /// Use at most this Landlock ABI, whatever the kernel offers (to see what an older kernel would give)
    validator_sandbox_landlock_abi_max: Option<u32> = None;
        flag "validator-sandbox-landlock-abi-max" [Option<String>] value_name "N";
        range optional 1 ..= 64; section "change";
    /// Environment variables resources may read with {env: NAME}; a trailing `*` matches a prefix; `NAMESPACE/NAME` allows it to that namespace only, a plain name to the home and shared namespaces; the service's own keys never match
    resource_env: Vec<String> = vec!["AKRITAS_*".to_string()];
        flag "resource-env" [Vec<String>] value_name "[NAMESPACE/]NAME" delimiter ',';
        expect "at most 64 environment variable names, each optionally ending in `*` and optionally after `NAMESPACE/`";
        check lists::check_env_patterns; section "operator";
    /// Directories a KnowledgeBase directory may be under (standalone mode also allows the resource directories)
    knowledge_roots: Vec<PathBuf> = Vec::new();
        flag "knowledge-roots" [Vec<String>] value_name "DIR" delimiter ',';
        expect "at most 64 absolute directory paths";
        check lists::check_roots; section "operator";
    /// Directories a path Workspace may be under (standalone mode also allows the resource directories); never the data directory
    workspace_roots: Vec<PathBuf> = Vec::new();
        flag "workspace-roots" [Vec<String>] value_name "DIR" delimiter ',';
        expect "at most 64 absolute directory paths";
        check lists::check_roots; section "operator";
    /// Directory of SKILL.md skills (`<dir>/<name>/SKILL.md`); empty disables
    skills_dir: Option<String> = Some("skills".to_string());
        flag "skills-dir" [Option<String>] value_name "DIR";
        expect "a directory path, or empty to disable";
        check value::ok; section "operator";
    /// Data directory
    data_dir: PathBuf = PathBuf::from("data");
        flag "data-dir" [Option<String>] value_name "DIR";
        expect "a non-empty path";
        check value::non_empty_path; section "storage";
    /// Where the audit, alerts, change approvals and bot sessions are kept: `embedded` (journals in the data directory, one replica) or `postgres` (a PostgreSQL database several replicas share)
    storage_backend: String = "embedded".to_string();
        flag "storage-backend" [Option<String>] value_name "BACKEND";
        expect "`embedded` or `postgres`";
        check value::check_storage_backend; section "storage";
    /// Name of the environment variable holding the PostgreSQL connection string (storage_backend: postgres); the string itself is never a setting
    database_url_env: String = "AKRITAS_DATABASE_URL".to_string();
        flag "database-url-env" [Option<String>] value_name "ENV_VAR";
        expect "an environment variable name such as AKRITAS_DATABASE_URL";
        check value::check_env_name; section "storage";
    /// PEM certificates that sign the database server's certificate, for `sslmode=require` (the system's roots are trusted too)
    database_ca_file: Option<String> = None;
        flag "database-ca-file" [Option<String>] value_name "PATH";
        expect "a path to PEM certificates";
        check lists::check_optional_path; section "storage";
    /// Connections each replica keeps to the database at most
    database_max_connections: u32 = 16;
        flag "database-max-connections" [Option<String>] value_name "N";
        range u32 2 ..= 256; section "storage";
    /// On the database, how long a replica's heartbeat counts: a Run or an investigation job of a replica silent this long is taken over by another
    job_claim_timeout: Duration = Duration::from_secs(30);
        flag "job-claim-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "1h", such as "30s"; section "storage";
    /// On the database, how often `/health` asks it whether it answers (one query per interval however often `/health` is called)
    database_health_interval: Duration = Duration::from_secs(5);
        flag "database-health-interval" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "1h", such as "5s"; section "storage";
    /// Number of search results to retrieve
    search_top_k: u32 = 5;
        flag "search-top-k" [Option<String>] value_name "N";
        range u32 1 ..= 50; section "budget";
    /// Characters kept per search result
    result_runes: u32 = 800;
        flag "result-runes" [Option<String>] value_name "N";
        range u32 1 ..= 100000; section "budget";
    /// Default completion token budget
    max_tokens: u32 = 1024;
        flag "max-tokens" [Option<String>] value_name "N";
        range u32 1 ..= MAX; section "budget";
    /// Largest completion token budget a request may ask for, >= max-tokens
    max_tokens_limit: u32 = 4096;
        flag "max-tokens-limit" [Option<String>] value_name "N";
        range u32 1 ..= MAX; section "budget";
    /// Tool calls per run
    max_tool_calls: u32 = 8;
        flag "max-tool-calls" [Option<String>] value_name "N";
        range u32 0 ..= 1000; section "budget";
    /// Model iterations per run
    max_iterations: u32 = 12;
        flag "max-iterations" [Option<String>] value_name "N";
        range u32 1 ..= 1000; section "budget";
    /// Bytes of tool results per Run, all its tool calls together (the Run stops when they pass it)
    max_tool_result_bytes: u64 = 2_097_152;
        flag "max-tool-result-bytes" [Option<String>] value_name "BYTES";
        range bytes 1 ..= MAX; section "budget";
    /// Retrieved context per request in bytes, <= max-tool-result-bytes
    max_retrieved_context_bytes: u64 = 131_072;
        flag "max-retrieved-context-bytes" [Option<String>] value_name "BYTES";
        range bytes 1 ..= MAX; section "budget";
    /// Context tokens per request
    max_context_tokens: u64 = 40_000;
        flag "max-context-tokens" [Option<String>] value_name "N";
        range u64 1 ..= MAX; section "budget";
    /// Output tokens per Run, all its model calls together (the Run stops when they are spent); not the context window, see --model-context-tokens
    max_model_tokens: u64 = 16_384;
        flag "max-model-tokens" [Option<String>] value_name "N";
        range u64 1 ..= MAX; section "model";
    /// Context window of the upstream model in tokens: requests are fitted to it; used when the server names none, an upper bound when it does; empty = discovered from the server, or unknown
    model_context_tokens: Option<u32> = None;
        flag "model-context-tokens" [Option<String>] value_name "N";
        range optional 512 ..= 10000000; section "model";
    /// Sampling temperature, 0.0-2.0
    temperature: f64 = 0.2;
        flag "temperature" [Option<String>] value_name "T";
        expect "a number from 0.0 to 2.0";
        check value::check_temperature; section "model";
    /// Timeout of one request
    request_timeout: Duration = Duration::from_secs(600);
        flag "request-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "24h", such as "10m"; section "model";
    /// Concurrent runs
    max_concurrent_runs: u32 = 4;
        flag "max-concurrent-runs" [Option<String>] value_name "N";
        range u32 1 ..= 256; section "budget";
    /// Run slots of max_concurrent_runs kept for alert investigations (at most max_concurrent_runs - 1 take effect; chat, facade, MCP and bot Runs never hold them)
    alert_reserved_runs: u32 = 1;
        flag "alert-reserved-runs" [Option<String>] value_name "N";
        range u32 0 ..= 255; section "budget";
    /// Chat, facade, MCP and bot Runs of one namespace at once (further ones wait like a full host)
    max_runs_per_namespace: u32 = 2;
        flag "max-runs-per-namespace" [Option<String>] value_name "N";
        range u32 1 ..= 256; section "budget";
    /// Tokens the scheduled Runs (RunSchedules) of one namespace may reserve per UTC day: each tick reserves its Run's whole budget (max_iterations x max_context_tokens + max_model_tokens), and a tick past it is skipped (status reason CostCapReached, metric akritas_schedule_ticks_skipped_total)
    schedule_daily_tokens: u64 = 50_000_000;
        flag "schedule-daily-tokens" [Option<String>] value_name "TOKENS";
        range u64 1 ..= 1000000000000; section "budget";
    /// Wait for a free run slot; 0s fails at once when saturated
    run_queue_timeout: Duration = Duration::from_secs(30);
        flag "run-queue-timeout" [Option<String>] value_name "DURATION";
        range duration "0s" ..= "10m", such as "30s"; section "budget";
    /// Largest request body in bytes
    max_body_bytes: u64 = 1_048_576;
        flag "max-body-bytes" [Option<String>] value_name "BYTES";
        range bytes 1024 ..= 67108864; section "server";
    /// Longest pause while a request body arrives before the request is refused with 408
    body_timeout: Duration = Duration::from_secs(30);
        flag "body-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "10m", such as "30s"; section "server";
    /// Longest time a client may take to send a request's headers, and longest an idle keep-alive connection is kept; the connection is then closed
    header_read_timeout: Duration = defaults::HEADER_READ_TIMEOUT;
        flag "header-read-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "10m", such as "10s"; section "server";
    /// Client connections open at once; a further one replaces the oldest with no request in flight, or waits while every one serves a request (at most half the open-file limit takes effect)
    max_connections: u32 = defaults::MAX_CONNECTIONS;
        flag "max-connections" [Option<String>] value_name "N";
        range u32 1 ..= 1000000; section "server";
    /// Namespace whose resources the one-segment webhook URLs name (/api/v1/alerts/NAME/webhook, /api/v1/alertmanager/webhook, the bot webhooks); empty = the home namespace (the pod's in operator mode, `default` standalone)
    webhook_namespace: Option<String> = None;
        flag "webhook-namespace" [Option<String>] value_name "NAME";
        expect "a Kubernetes namespace name (lower-case letters, digits and '-', at most 63 characters)";
        check lists::check_namespace; section "server";
    /// Concurrent MCP sessions at `/mcp` (a new session beyond it gets 503)
    mcp_max_sessions: u32 = defaults::MCP_MAX_SESSIONS;
        flag "mcp-max-sessions" [Option<String>] value_name "N";
        range u32 1 ..= 4096; section "mcp";
    /// MCP sessions one API key may hold open at `/mcp` at once (a further initialize gets 429)
    mcp_max_sessions_per_key: u32 = defaults::MCP_MAX_SESSIONS_PER_KEY;
        flag "mcp-max-sessions-per-key" [Option<String>] value_name "N";
        range u32 1 ..= 4096; section "mcp";
    /// Idle time after which an MCP session at `/mcp` is closed
    mcp_session_idle_timeout: Duration = defaults::MCP_SESSION_IDLE_TIMEOUT;
        flag "mcp-session-idle-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "24h", such as "5m"; section "mcp";
    /// Host names every route accepts in the Host header besides IP addresses, localhost and the public URL's host (DNS-rebinding protection): the names clients use, such as the Service's
    allowed_hosts: Vec<String> = Vec::new();
        flag "allowed-hosts" [Vec<String>] value_name "HOST[:PORT]" delimiter ',';
        expect "at most 64 host names or host:port values";
        check lists::check_hosts; section "server";
    /// Host names `/mcp` accepts in the Host header besides loopback and the public URL's host (DNS-rebinding protection)
    mcp_allowed_hosts: Vec<String> = Vec::new();
        flag "mcp-allowed-hosts" [Vec<String>] value_name "HOST[:PORT]" delimiter ',';
        expect "at most 64 host names or host:port values";
        check lists::check_hosts; section "mcp";
    /// Networks (CIDR or address) and host names that URLs declared by resources may reach although they are link-local, unspecified, multicast or (operator mode) loopback or this pod's own; standalone mode reaches loopback without an entry
    egress_allow: Vec<String> = Vec::new();
        flag "egress-allow" [Vec<String>] value_name "CIDR|HOST" delimiter ',';
        expect "at most 256 entries, each a network such as 10.0.0.0/8, an address or a host name";
        check lists::check_egress; section "server";
    /// HTTP proxy (http://host:port) that URLs declared by resources go through; each destination is resolved and judged by the egress policy before the proxy is handed it (a name that does not resolve here is refused unless egress_allow names it). Empty: they are reached directly, whatever HTTP_PROXY, HTTPS_PROXY or ALL_PROXY say (the model server still follows those)
    egress_proxy: Option<String> = None;
        flag "egress-proxy" [Option<String>] value_name "URL";
        expect "an http:// proxy URL such as http://proxy.internal:3128, without credentials, path or query";
        check lists::check_egress_proxy; section "server";
    /// Networks (CIDR or address) and host names to which credentials declared by resources (webhook bearers, bot tokens, MCP headers from secrets, git tokens) may travel over plain http; loopback always may, every other host needs https
    cleartext_credential_hosts: Vec<String> = Vec::new();
        flag "cleartext-credential-hosts" [Vec<String>] value_name "CIDR|HOST" delimiter ',';
        expect "at most 256 entries, each a network such as 10.0.0.0/8, an address or a host name";
        check lists::check_egress; section "server";
    /// Grace period for shutdown
    shutdown_timeout: Duration = Duration::from_secs(30);
        flag "shutdown-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "10m", such as "30s"; section "server";
    /// Alert investigations running at once
    alert_workers: u32 = 2;
        flag "alert-workers" [Option<String>] value_name "N";
        range u32 1 ..= 64; section "alerts";
    /// Attempts per alert investigation before the job fails
    alert_job_attempts: u32 = 3;
        flag "alert-job-attempts" [Option<String>] value_name "N";
        range u32 1 ..= 20; section "alerts";
    /// Wait before the first retry of a failed investigation, doubled per attempt up to 16x
    alert_job_backoff: Duration = Duration::from_secs(30);
        flag "alert-job-backoff" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "1h", such as "30s"; section "alerts";
    /// New alert investigations one AlertSource may start per minute
    alert_source_rate: u32 = defaults::ALERT_SOURCE_RATE;
        flag "alert-source-rate" [Option<String>] value_name "N";
        range u32 1 ..= 100000; section "alerts";
    /// Alert investigations waiting for a worker host-wide; more new ones are deferred
    alert_pending_jobs: u32 = defaults::ALERT_PENDING_JOBS;
        flag "alert-pending-jobs" [Option<String>] value_name "N";
        range u32 1 ..= 100000; section "alerts";
    /// Alert investigations of one namespace waiting for a worker; more new ones of that namespace are deferred, so one namespace's storm never fills the host's pending room
    alert_pending_jobs_per_namespace: u32 = defaults::ALERT_PENDING_JOBS_PER_NAMESPACE;
        flag "alert-pending-jobs-per-namespace" [Option<String>] value_name "N";
        range u32 1 ..= 100000; section "alerts";
    /// Deferred alert investigations per AlertSource; past it a storm shares one storm investigation
    alert_deferred_jobs: u32 = defaults::ALERT_DEFERRED_JOBS;
        flag "alert-deferred-jobs" [Option<String>] value_name "N";
        range u32 1 ..= 10000; section "alerts";
    /// A journal segment is sealed and a new one started past this size
    journal_segment_bytes: u64 = 64 << 20;
        flag "journal-segment-bytes" [Option<String>] value_name "BYTES";
        range bytes 65536 ..= 4294967296; section "storage";
    /// A journal segment is sealed once its first record is this old
    journal_segment_age: Duration = Duration::from_secs(86_400);
        flag "journal-segment-age" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "30d", such as "24h"; section "storage";
    /// Journal records between two snapshots of the state derived from a journal
    snapshot_records: u64 = 20_000;
        flag "snapshot-records" [Option<String>] value_name "N";
        range u64 100 ..= 10000000; section "storage";
    /// A change preview's approval expires this long after it was issued
    change_approval_ttl: Duration = Duration::from_secs(30 * 60);
        flag "change-approval-ttl" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "7d", such as "30m"; section "change";
    /// Change previews executing at once (each holds no Run slot)
    change_max_concurrent_previews: u32 = 2;
        flag "change-max-concurrent-previews" [Option<String>] value_name "N";
        range u32 1 ..= 64; section "change";
    /// Change previews of one namespace at once (further ones wait like a full host)
    change_max_previews_per_namespace: u32 = 1;
        flag "change-max-previews-per-namespace" [Option<String>] value_name "N";
        range u32 1 ..= 64; section "change";
    /// Changes of one namespace waiting for approval at once, 64 host-wide (a further preview of that namespace gets 429)
    change_max_pending_per_namespace: u32 = 16;
        flag "change-max-pending-per-namespace" [Option<String>] value_name "N";
        range u32 1 ..= 64; section "change";
    /// Audit journal segments older than this are deleted (with the Runs in them); 0s keeps everything
    audit_retention: Duration = Duration::from_secs(365 * 86_400);
        flag "audit-retention" [Option<String>] value_name "DURATION";
        range duration "0s" ..= "10y", such as "365d"; section "storage";
    /// Name of the environment variable holding the audit key (at least 32 bytes): every audit record is then sealed with HMAC-SHA256 so a rewritten journal fails `akritas audit verify --key-env`
    audit_key_env: Option<String> = None;
        flag "audit-key-env" [Option<String>] value_name "ENV_VAR";
        expect "an environment variable name such as AKRITAS_AUDIT_KEY";
        check lists::check_optional_env_name; section "storage";
    /// Namespaces whose Runs keep their input in the audit journal (the conversation and context facts, secrets redacted, at most 64 KiB), so a Run exports ready to replay without its question; default none: only the input's hash
    audit_input_namespaces: Vec<String> = Vec::new();
        flag "audit-input-namespaces" [Vec<String>] value_name "NAME" delimiter ',';
        expect "at most 64 Kubernetes namespace names";
        check lists::check_namespaces; section "storage";
    /// A file outside the data directory where the audit journal's head (seq, hash, seal) is written at least every 30 s, so a journal cut behind it fails `akritas audit verify --anchor`
    audit_anchor_file: Option<String> = None;
        flag "audit-anchor-file" [Option<String>] value_name "PATH";
        expect "a path outside the data directory";
        check lists::check_optional_path; section "storage";
    /// Alert journal segments older than this are deleted unless an open incident or a waiting job needs them; 0s keeps everything
    alert_retention: Duration = Duration::from_secs(90 * 86_400);
        flag "alert-retention" [Option<String>] value_name "DURATION";
        range duration "0s" ..= "10y", such as "90d"; section "alerts";
    /// An alert repeated within this window of its first delivery is a duplicate
    dedup_window: Duration = Duration::from_secs(86_400);
        flag "dedup-window" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "30d", such as "24h"; section "alerts";
    /// Most deduplication keys remembered (the oldest are forgotten first)
    dedup_max_keys: u32 = 100_000;
        flag "dedup-max-keys" [Option<String>] value_name "N";
        range u32 1000 ..= 10000000; section "alerts";
    /// Resolved incidents kept in memory for listings (the oldest are forgotten first; their journal records stay)
    resolved_incidents_kept: u32 = 10_000;
        flag "resolved-incidents-kept" [Option<String>] value_name "N";
        range u32 100 ..= 10000000; section "alerts";
    /// Timeout of one notification attempt
    notification_timeout: Duration = Duration::from_secs(10);
        flag "notification-timeout" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "1m", such as "10s"; section "alerts";
    /// Attempts per notification delivery (connection errors, timeouts, 429 and 5xx are retried)
    notification_attempts: u32 = 3;
        flag "notification-attempts" [Option<String>] value_name "N";
        range u32 1 ..= 10; section "alerts";
    /// Operator mode: finished Run and resolved Incident objects are deleted after this
    record_retention: Duration = Duration::from_secs(7 * 86_400);
        flag "record-retention" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "365d", such as "7d"; section "storage";
    /// Operator mode: a leader that has not renewed its Lease for this long is replaced
    lease_duration: Duration = Duration::from_secs(15);
        flag "lease-duration" [Option<String>] value_name "DURATION";
        range duration ">0" ..= "5m", such as "15s"; section "operator";
    /// Log format: text or json
    log_format: LogFormat = LogFormat::Text;
        flag "log-format" [Option<String>] value_name "FORMAT";
        expect "text or json";
        check value::ok; section "server";
}

/// Resolves [`Settings`] from `flags`, the environment (`env`, e.g.
/// `|k| std::env::var(k).ok()`), the config file named by `flags.config` or
/// `AKRITAS_CONFIG`, and the defaults.
pub fn load(flags: &ServeFlags, env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    let config = match (&flags.config, env(CONFIG_ENV)) {
        (Some(p), _) if p.as_os_str().is_empty() => {
            return Err(ConfigError::InvalidFlag {
                flag: "--config".to_string(),
                value: String::new(),
                problem: "expected a path to a JSON config file".to_string(),
            });
        }
        (Some(p), _) => Some(p.clone()),
        (None, Some(v)) if v.is_empty() => {
            return Err(ConfigError::InvalidEnv {
                var: CONFIG_ENV.to_string(),
                value: v,
                problem: "expected a path to a JSON config file; unset it to use none".to_string(),
            });
        }
        (None, Some(v)) => Some(PathBuf::from(v)),
        (None, None) => None,
    };
    if let Some(path) = &config {
        let read = file::read(path)?;
        apply_file(&mut s, path, &read.entries)?;
        s.deprecated = read.deprecated;
    }
    s.config_file = config;
    apply_env(&mut s, env)?;
    apply_flags(&mut s, flags)?;
    s.check_consistency()?;
    Ok(s)
}

/// The settings a config file's text gives over the defaults, without the environment
/// or flags (`label` names the file in errors): what a deployment's own config file
/// means, such as the Helm chart's `config:` values.
pub fn from_file_text(label: &Path, text: &str) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    let read = file::parse(label, text)?;
    apply_file(&mut s, label, &read.entries)?;
    s.deprecated = read.deprecated;
    s.config_file = Some(label.to_path_buf());
    s.check_consistency()?;
    Ok(s)
}
