//! CLI flags of `akritas mcp victoriametrics` and the entry point [`run`].

use std::{net::SocketAddr, sync::Arc, time::Duration};

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    ServiceExt as _,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use super::client::{Auth, VmClient, VmClientConfig, VmError, parse_base_url};
use super::server::VictoriaMetricsServer;

/// Default `--max-response-bytes` (4 MiB).
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// Smallest accepted `--max-response-bytes`.
pub const MIN_MAX_RESPONSE_BYTES: usize = 1024;
/// Largest accepted `--max-response-bytes` (6 MiB; the result is sent twice — structured and as
/// text — and must stay below rmcp's 16 MiB stdio line limit).
pub const MAX_MAX_RESPONSE_BYTES: usize = 6 * 1024 * 1024;
/// Largest accepted `--timeout`.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// A flag of `akritas mcp victoriametrics` that cannot be used, or a server that
/// could not start; each message names the flag or step to fix.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A flag names no environment variable.
    #[error("{flag} needs the name of an environment variable")]
    EnvNameMissing { flag: String },
    /// A flag's environment variable is unusable.
    #[error("{flag}: environment variable {name} is {problem}")]
    Env { flag: String, name: String, problem: &'static str },
    /// Bearer and Basic auth together.
    #[error("--bearer-token-env and --basic-auth-*-env are mutually exclusive")]
    AuthConflict,
    /// Only half of Basic auth.
    #[error("Basic auth needs both --basic-auth-user-env and --basic-auth-password-env")]
    BasicIncomplete,
    /// A Basic user name with a colon.
    #[error("--basic-auth-user-env: the user name must not contain ':'")]
    UserWithColon,
    /// `--header` without `=`.
    #[error("--header {0:?}: expected NAME=ENV_VAR")]
    HeaderSpec(String),
    /// `--header` with an invalid name.
    #[error("--header {0:?}: invalid header name")]
    HeaderName(String),
    /// `--header` naming a header the client sets itself.
    #[error("--header: the {0} header cannot be set this way")]
    HeaderReserved(String),
    /// `--header` whose value is not a valid header value.
    #[error("--header {name}: the value of {env} contains invalid characters (CR/LF?)")]
    HeaderValue { name: String, env: String },
    /// `--max-response-bytes` out of range.
    #[error("--max-response-bytes must be between {MIN_MAX_RESPONSE_BYTES} and {MAX_MAX_RESPONSE_BYTES}, got {0}")]
    MaxResponseBytes(usize),
    /// `--timeout` out of range.
    #[error("--timeout must be greater than 0 and at most {}s", MAX_TIMEOUT.as_secs())]
    Timeout,
    /// The client configuration (base URL, TLS).
    #[error(transparent)]
    Client(#[from] VmError),
    /// The MCP session over stdio.
    #[error("MCP over stdio failed: {0}")]
    Stdio(String),
    /// The HTTP listener.
    #[error("cannot serve MCP over HTTP at {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
}

/// `akritas mcp victoriametrics`: a read-only MCP server for VictoriaMetrics.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct VictoriaMetricsArgs {
    /// VictoriaMetrics read API root (the part before `/api/v1`), e.g. `http://vmselect:8481/select/0/prometheus`.
    /// Its query string (e.g. `?extra_label=env=prod`) is kept and sent with every request.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8428/prometheus")]
    pub base_url: String,

    /// Name of the environment variable holding a Bearer token.
    #[arg(long, value_name = "ENV", conflicts_with_all = ["basic_auth_user_env", "basic_auth_password_env"])]
    pub bearer_token_env: Option<String>,

    /// Name of the environment variable holding the Basic auth user name.
    #[arg(long, value_name = "ENV", alias = "username-env", requires = "basic_auth_password_env")]
    pub basic_auth_user_env: Option<String>,

    /// Name of the environment variable holding the Basic auth password.
    #[arg(long, value_name = "ENV", alias = "password-env", requires = "basic_auth_user_env")]
    pub basic_auth_password_env: Option<String>,

    /// Extra request header `NAME=ENV_VAR` (repeatable), value read from ENV_VAR at start,
    /// e.g. `--header AccountID=VM_ACCOUNT_ID` for tenant headers.
    #[arg(long = "header", value_name = "NAME=ENV_VAR")]
    pub headers: Vec<String>,

    /// Overall timeout of each VictoriaMetrics request (e.g. `30s`, `1500ms`, `2m`; bare number = seconds).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Maximum VictoriaMetrics response size in bytes (1024..=6291456).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_RESPONSE_BYTES)]
    pub max_response_bytes: usize,

    /// Serve MCP over streamable HTTP at `http://ADDR/mcp` instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Additional allowed `Host` header values for `--listen` (repeatable; loopback names are always allowed).
    #[arg(long = "allowed-host", value_name = "HOST", requires = "listen")]
    pub allowed_hosts: Vec<String>,

    /// Log method, path, status and duration of each VictoriaMetrics request (and a bounded excerpt of
    /// failed response bodies) to stderr. Never logs credentials or successful bodies.
    #[arg(long)]
    pub debug: bool,
}

/// Parses `30s`, `1500ms`, `2m`, `1h` or a bare number of seconds.
pub(crate) fn parse_duration(raw: &str) -> Result<Duration, String> {
    let s = raw.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| format!("invalid duration {raw:?} (expected e.g. 30s, 1500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit in {raw:?} (use ms, s, m or h)")),
    };
    if !secs.is_finite() || secs > MAX_TIMEOUT.as_secs_f64() {
        return Err(format!("duration {raw:?} exceeds the maximum of {}s", MAX_TIMEOUT.as_secs()));
    }
    let d = Duration::from_secs_f64(secs.max(0.0));
    if d.is_zero() {
        return Err(format!("duration {raw:?} must be greater than zero"));
    }
    Ok(d)
}

fn read_env(flag: &str, name: &str) -> Result<String, ServeError> {
    if name.trim().is_empty() {
        return Err(ServeError::EnvNameMissing { flag: flag.to_owned() });
    }
    let problem = match std::env::var(name) {
        Ok(v) if !v.is_empty() => return Ok(v),
        Ok(_) => "empty",
        Err(std::env::VarError::NotPresent) => "not set",
        Err(std::env::VarError::NotUnicode(_)) => "not UTF-8",
    };
    Err(ServeError::Env { flag: flag.to_owned(), name: name.to_owned(), problem })
}

impl VictoriaMetricsArgs {
    /// Validates the flags, reads credentials/header values from the environment and builds the
    /// client configuration.
    pub fn client_config(&self) -> Result<VmClientConfig, ServeError> {
        let base_url = parse_base_url(&self.base_url)?;
        let auth = match (&self.bearer_token_env, &self.basic_auth_user_env, &self.basic_auth_password_env) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(ServeError::AuthConflict);
            }
            (Some(env), None, None) => Auth::Bearer(read_env("--bearer-token-env", env)?),
            (None, Some(user), Some(pass)) => Auth::Basic {
                username: read_env("--basic-auth-user-env", user)?,
                password: read_env("--basic-auth-password-env", pass)?,
            },
            (None, Some(_), None) | (None, None, Some(_)) => {
                return Err(ServeError::BasicIncomplete);
            }
            (None, None, None) => Auth::None,
        };
        if let Auth::Basic { username, .. } = &auth
            && username.contains(':')
        {
            return Err(ServeError::UserWithColon);
        }

        let mut headers = Vec::new();
        for spec in &self.headers {
            let Some((name, env)) = spec.split_once('=') else {
                return Err(ServeError::HeaderSpec(spec.clone()));
            };
            let name =
                HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| ServeError::HeaderName(spec.clone()))?;
            if matches!(
                name.as_str(),
                "authorization" | "host" | "content-length" | "content-type" | "transfer-encoding"
            ) {
                return Err(ServeError::HeaderReserved(name.to_string()));
            }
            let value = read_env(&format!("--header {name}"), env.trim())?;
            let value = HeaderValue::from_str(&value)
                .map_err(|_| ServeError::HeaderValue { name: name.to_string(), env: env.trim().to_owned() })?;
            headers.push((name, value));
        }

        if !(MIN_MAX_RESPONSE_BYTES..=MAX_MAX_RESPONSE_BYTES).contains(&self.max_response_bytes) {
            return Err(ServeError::MaxResponseBytes(self.max_response_bytes));
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            return Err(ServeError::Timeout);
        }

        Ok(VmClientConfig {
            base_url,
            auth,
            headers,
            timeout: self.timeout,
            max_response_bytes: self.max_response_bytes,
            debug: self.debug,
        })
    }
}

/// Installs a stderr-only tracing subscriber (no-op when one is already installed).
fn init_logging(debug: bool) {
    let filter = if debug {
        tracing_subscriber::EnvFilter::new("warn,akritas=debug")
    } else {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,akritas=info"))
    };
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(false).with_env_filter(filter).try_init();
}

/// Runs the server until stdin closes (stdio) or Ctrl-C/SIGTERM (HTTP).
pub async fn run(args: VictoriaMetricsArgs) -> Result<(), ServeError> {
    init_logging(args.debug);
    crate::install_crypto_provider();
    // Started by the host for an McpAdapter: its egress policy applies here too.
    if let Some(policy) =
        std::env::var(crate::egress::CHILD_ENV).ok().and_then(|v| crate::egress::Egress::from_child_env(&v))
    {
        crate::egress::Egress::install(policy);
    }
    let config = args.client_config()?;
    let client = Arc::new(VmClient::new(config)?);
    tracing::debug!(target: "akritas::victoriametrics", host = client.host(), "VictoriaMetrics MCP server starting");

    match args.listen {
        None => {
            let service = VictoriaMetricsServer::new(client)
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| ServeError::Stdio(format!("initialization: {e}")))?;
            service.waiting().await.map_err(|e| ServeError::Stdio(e.to_string()))?;
            Ok(())
        }
        Some(addr) => serve_http(addr, &args.allowed_hosts, client).await,
    }
}

async fn serve_http(addr: SocketAddr, extra_hosts: &[String], client: Arc<VmClient>) -> Result<(), ServeError> {
    let ct = CancellationToken::new();
    let mut allowed: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    allowed.extend(extra_hosts.iter().cloned());
    let config =
        StreamableHttpServerConfig::default().with_allowed_hosts(allowed).with_cancellation_token(ct.child_token());
    let service: StreamableHttpService<VictoriaMetricsServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(VictoriaMetricsServer::new(client.clone())), Default::default(), config);
    let router = axum::Router::new().nest_service("/mcp", service);
    let listen_error = |source| ServeError::Listen { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen_error)?;
    let local = listener.local_addr().map_err(listen_error)?;
    tracing::info!(target: "akritas::victoriametrics", "serving MCP over streamable HTTP at http://{local}/mcp");
    eprintln!("listening on http://{local}/mcp");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown_signal().await;
            ct.cancel();
        })
        .await
        .map_err(listen_error)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1500ms").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("abc").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("11m").is_err());
        assert!(parse_duration("99999999999999999999999999h").is_err());
        assert!(parse_duration("0.0000000000001s").is_err());
    }
}
