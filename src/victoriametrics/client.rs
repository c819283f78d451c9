//! Bounded, read-only HTTP client for the VictoriaMetrics (Prometheus-compatible) query API.
//!
//! * Only the five read endpoints below are reachable; every request is a `POST` with an
//!   `application/x-www-form-urlencoded` body carrying the tool parameters. The base URL's own
//!   query string (e.g. `extra_label=env=prod`, `extra_filters[]=...`) is kept verbatim in the
//!   request URL, so VictoriaMetrics merges it with the form parameters on every request.
//! * Redirects are never followed; connect timeout ≤ 5 s; overall timeout per request.
//! * Response bodies are read incrementally and rejected once they exceed the configured limit.
//! * Credentials are never logged; successful bodies are never logged.

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, USER_AGENT};
use serde_json::Value;
use url::Url;

use crate::text;

/// User-Agent sent with every request.
pub const USER_AGENT_VALUE: &str = concat!("Akritas-VictoriaMetrics-MCP/", env!("CARGO_PKG_VERSION"));
/// Upper bound of the connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Maximum length of the error text taken from a VictoriaMetrics error response.
pub const MAX_ERROR_TEXT_CHARS: usize = 512;
/// Maximum length of the body preview in `--debug` logs of failed responses.
pub const MAX_DEBUG_BODY_PREVIEW_BYTES: usize = 2048;

/// Authentication sent to VictoriaMetrics.
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(String),
    Basic {
        username: String,
        password: String,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::Basic { .. } => f.write_str("Basic(<redacted>)"),
        }
    }
}

/// Validated client configuration.
#[derive(Debug, Clone)]
pub struct VmClientConfig {
    /// Read API root (the part before `/api/v1`), optionally with a query string.
    pub base_url: Url,
    pub auth: Auth,
    /// Extra headers (tenant headers etc.); values are marked sensitive.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Overall per-request timeout.
    pub timeout: Duration,
    /// Maximum accepted response body size in bytes.
    pub max_response_bytes: usize,
    /// Log method/path/status/duration of each request and an excerpt of failed bodies.
    pub debug: bool,
}

impl VmClientConfig {
    #[cfg(test)]
    fn new(base_url: Url) -> Self {
        Self {
            base_url,
            auth: Auth::None,
            headers: Vec::new(),
            timeout: Duration::from_secs(30),
            max_response_bytes: 4 * 1024 * 1024,
            debug: false,
        }
    }
}

/// Errors of the client. `Display` texts are meant to be shown to the caller (model/user)
/// and never contain credentials.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("cannot connect to VictoriaMetrics at {host}: {detail}")]
    Unreachable { host: String, detail: String },
    #[error(
        "VictoriaMetrics at {host} did not answer in time (connect timeout {connect:?}, request timeout {timeout:?})"
    )]
    Timeout { host: String, connect: Duration, timeout: Duration },
    #[error("request to VictoriaMetrics at {host} failed: {detail}")]
    Transport { host: String, detail: String },
    #[error(
        "VictoriaMetrics response exceeds the limit of {limit} bytes (--max-response-bytes); narrow the query \
         (more selective matchers, shorter range, larger step or a limit)"
    )]
    ResponseTooLarge { limit: usize },
    #[error(
        "VictoriaMetrics at {host} answered with a redirect (HTTP {status}); redirects are not followed, check --base-url"
    )]
    Redirect { host: String, status: u16 },
    #[error("VictoriaMetrics query failed: {error_type}: {error}")]
    QueryFailed { error_type: String, error: String },
    #[error("VictoriaMetrics returned HTTP {status}{detail}")]
    HttpStatus { status: String, detail: String },
    #[error("VictoriaMetrics returned invalid JSON (HTTP {status})")]
    InvalidJson { status: u16 },
}

/// The read endpoints the client may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Query,
    QueryRange,
    Series,
    Labels,
    LabelValues(String),
}

impl Endpoint {
    /// `label_values` endpoint; the label name must match `^[a-zA-Z_][a-zA-Z0-9_]*$`
    /// (which includes `__name__`), so it never needs escaping in the path.
    pub fn label_values(label: &str) -> Result<Self, VmError> {
        if is_valid_label_name(label) {
            Ok(Endpoint::LabelValues(label.to_owned()))
        } else {
            Err(VmError::InvalidArgument(format!(
                "label must match ^[a-zA-Z_][a-zA-Z0-9_]*$ (e.g. `job` or `__name__`), got {:?}",
                text::truncate_chars(label, 80, text::ELLIPSIS)
            )))
        }
    }

    /// Path relative to the API root.
    pub fn relative_path(&self) -> String {
        match self {
            Endpoint::Query => "api/v1/query".to_owned(),
            Endpoint::QueryRange => "api/v1/query_range".to_owned(),
            Endpoint::Series => "api/v1/series".to_owned(),
            Endpoint::Labels => "api/v1/labels".to_owned(),
            Endpoint::LabelValues(label) => format!("api/v1/label/{label}/values"),
        }
    }

    /// Whether the parameters go in a `POST` form (long queries and many matchers fit), or, for
    /// label values, in the `GET` query string: Prometheus serves that path for `GET` only
    /// (405 to a `POST`), VictoriaMetrics for both.
    pub fn posts_form(&self) -> bool {
        !matches!(self, Endpoint::LabelValues(_))
    }
}

/// `^[a-zA-Z_][a-zA-Z0-9_]*$`
pub fn is_valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' => chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
        _ => false,
    }
}

/// Validates a `--base-url`: http(s), a host, no userinfo, no fragment.
pub fn parse_base_url(raw: &str) -> Result<Url, VmError> {
    let url = Url::parse(raw.trim()).map_err(|e| VmError::Config(format!("--base-url is not a valid URL: {e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(VmError::Config(format!("--base-url must use http or https, got {:?}", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(VmError::Config("--base-url must contain a host".to_owned()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(VmError::Config(
            "--base-url must not contain credentials; use --bearer-token-env or --basic-auth-user-env/--basic-auth-password-env"
                .to_owned(),
        ));
    }
    if url.fragment().is_some() {
        return Err(VmError::Config("--base-url must not contain a fragment".to_owned()));
    }
    Ok(url)
}

/// Read-only VictoriaMetrics client.
#[derive(Debug, Clone)]
pub struct VmClient {
    http: reqwest::Client,
    config: VmClientConfig,
    host: String,
}

impl VmClient {
    pub fn new(config: VmClientConfig) -> Result<Self, VmError> {
        crate::install_crypto_provider();
        if config.timeout.is_zero() {
            return Err(VmError::Config("--timeout must be greater than zero".to_owned()));
        }
        if config.max_response_bytes == 0 {
            return Err(VmError::Config("--max-response-bytes must be greater than zero".to_owned()));
        }
        let host = match (config.base_url.host_str(), config.base_url.port_or_known_default()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => return Err(VmError::Config("--base-url must contain a host".to_owned())),
        };

        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
        for (name, value) in &config.headers {
            let mut value = value.clone();
            value.set_sensitive(true);
            headers.append(name.clone(), value);
        }
        match &config.auth {
            Auth::None => {}
            Auth::Bearer(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| VmError::Config("the bearer token contains invalid characters".to_owned()))?;
                value.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, value);
            }
            Auth::Basic { username, password } => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
                let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
                    .map_err(|_| VmError::Config("the basic auth credentials contain invalid characters".to_owned()))?;
                value.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, value);
            }
        }

        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.timeout.min(CONNECT_TIMEOUT))
            .timeout(config.timeout);
        // Started by the host for an McpAdapter: the URL is a resource's, under its policy.
        if crate::egress::Egress::installed() {
            builder = crate::egress::guard(builder);
        }
        let http = builder
            .build()
            .map_err(|e| VmError::Config(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        Ok(Self { http, config, host })
    }

    /// `host:port` of VictoriaMetrics (used in error messages).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Full request URL for an endpoint (base path + endpoint path, base query string preserved).
    pub fn endpoint_url(&self, endpoint: &Endpoint) -> Url {
        let mut url = self.config.base_url.clone();
        let base_path = url.path().trim_end_matches('/').to_owned();
        url.set_path(&format!("{base_path}/{}", endpoint.relative_path()));
        url
    }

    /// Calls an endpoint with form parameters and returns the raw VictoriaMetrics JSON
    /// (`{"status":"success","data":...}`).
    pub async fn call(&self, endpoint: &Endpoint, params: &[(String, String)]) -> Result<Value, VmError> {
        let url = self.endpoint_url(endpoint);
        let path = url.path().to_owned();
        let method = if endpoint.posts_form() { "POST" } else { "GET" };
        let started = Instant::now();
        let result = self.send(url, params, endpoint.posts_form()).await;
        let elapsed_ms = started.elapsed().as_millis();
        match &result {
            Ok(outcome) if self.config.debug => {
                tracing::debug!(
                    target: "akritas::victoriametrics",
                    method,
                    path = %path,
                    status = outcome.status,
                    duration_ms = elapsed_ms as u64,
                    "victoriametrics request succeeded"
                );
            }
            Err((err, failure)) if self.config.debug => {
                tracing::debug!(
                    target: "akritas::victoriametrics",
                    method,
                    path = %path,
                    status = failure.status,
                    duration_ms = elapsed_ms as u64,
                    reason = failure.reason,
                    content_type = %failure.content_type,
                    body_preview = %failure.body_preview,
                    error = %err,
                    "victoriametrics request failed"
                );
            }
            _ => {}
        }
        result.map(|o| o.value).map_err(|(e, _)| e)
    }

    async fn send(&self, mut url: Url, params: &[(String, String)], form: bool) -> Result<Success, (VmError, Failure)> {
        let request = if form {
            self.http.post(url).header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(encode_form(params))
        } else {
            // After the base URL's own query string (`extra_label`, …).
            url.query_pairs_mut().extend_pairs(params.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            self.http.get(url)
        };
        let response = request.send().await.map_err(|e| (self.classify(&e), Failure::new(0, "request_error")))?;

        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| text::truncate_chars(v, 256, text::ELLIPSIS))
            .unwrap_or_default();
        let failure = |reason: &'static str, body: &[u8]| Failure {
            status: status.as_u16(),
            reason,
            content_type: content_type.clone(),
            body_preview: body_preview(body),
        };

        if status.is_redirection() {
            return Err((
                VmError::Redirect { host: self.host.clone(), status: status.as_u16() },
                failure("redirect", &[]),
            ));
        }

        let body = match self.read_body(response).await {
            Ok(body) => body,
            Err(BodyError::TooLarge(partial)) => {
                return Err((
                    VmError::ResponseTooLarge { limit: self.config.max_response_bytes },
                    failure("response_too_large", &partial),
                ));
            }
            Err(BodyError::Read(e)) => return Err((self.classify(&e), failure("read_error", &[]))),
        };

        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let Some(value) = parsed else {
            let err = if status.is_success() {
                VmError::InvalidJson { status: status.as_u16() }
            } else {
                VmError::HttpStatus { status: status_text(status), detail: text_excerpt(&body) }
            };
            return Err((err, failure("invalid_json", &body)));
        };

        let vm_status = value.get("status").and_then(Value::as_str);
        if status.is_success() && vm_status == Some("success") && value.is_object() {
            return Ok(Success { status: status.as_u16(), value });
        }
        if vm_status == Some("error") || value.get("error").is_some() {
            let error_type = value
                .get("errorType")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| status_text(status));
            let error = value.get("error").and_then(Value::as_str).unwrap_or("unknown error");
            return Err((
                VmError::QueryFailed {
                    error_type: sanitize_chars(&error_type, 64),
                    error: sanitize_chars(error, MAX_ERROR_TEXT_CHARS),
                },
                failure("query_failed", &body),
            ));
        }
        let err = if status.is_success() {
            VmError::QueryFailed {
                error_type: "unexpected_response".to_owned(),
                error: "the response has no `\"status\":\"success\"`".to_owned(),
            }
        } else {
            VmError::HttpStatus { status: status_text(status), detail: text_excerpt(&body) }
        };
        Err((err, failure("query_failed", &body)))
    }

    async fn read_body(&self, mut response: reqwest::Response) -> Result<Vec<u8>, BodyError> {
        let limit = self.config.max_response_bytes;
        if let Some(len) = response.content_length()
            && len > limit as u64
        {
            return Err(BodyError::TooLarge(Vec::new()));
        }
        let initial = response.content_length().map_or(8 * 1024, |l| l as usize).min(limit);
        let mut body = Vec::with_capacity(initial);
        while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
            if body.len().saturating_add(chunk.len()) > limit {
                body.truncate(MAX_DEBUG_BODY_PREVIEW_BYTES);
                return Err(BodyError::TooLarge(body));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn classify(&self, e: &reqwest::Error) -> VmError {
        if e.is_timeout() {
            VmError::Timeout {
                host: self.host.clone(),
                connect: self.config.timeout.min(CONNECT_TIMEOUT),
                timeout: self.config.timeout,
            }
        } else if e.is_connect() {
            VmError::Unreachable { host: self.host.clone(), detail: error_chain(e) }
        } else {
            VmError::Transport { host: self.host.clone(), detail: error_chain(e) }
        }
    }
}

struct Success {
    status: u16,
    value: Value,
}

struct Failure {
    status: u16,
    reason: &'static str,
    content_type: String,
    body_preview: String,
}

impl Failure {
    fn new(status: u16, reason: &'static str) -> Self {
        Self { status, reason, content_type: String::new(), body_preview: String::new() }
    }
}

enum BodyError {
    TooLarge(Vec<u8>),
    Read(reqwest::Error),
}

/// `application/x-www-form-urlencoded` encoding of the parameters (repeated keys allowed).
pub fn encode_form(params: &[(String, String)]) -> String {
    let mut serializer = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        serializer.append_pair(k, v);
    }
    serializer.finish()
}

fn status_text(status: reqwest::StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

/// A short, single-line excerpt of an error body for the caller (`": <text>"` or empty).
fn text_excerpt(body: &[u8]) -> String {
    let text = sanitize_chars(String::from_utf8_lossy(body).trim(), 256);
    if text.is_empty() { String::new() } else { format!(": {text}") }
}

/// Bounded preview of a failed body for debug logs.
fn body_preview(body: &[u8]) -> String {
    let end = body.len().min(MAX_DEBUG_BODY_PREVIEW_BYTES);
    let mut preview: String =
        String::from_utf8_lossy(&body[..end]).chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if body.len() > MAX_DEBUG_BODY_PREVIEW_BYTES {
        preview.push_str(text::ELLIPSIS);
    }
    preview
}

/// Replaces control characters and truncates to `max` characters (`...` included).
fn sanitize_chars(s: &str, max: usize) -> String {
    let cleaned: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    text::truncate_chars(&cleaned, max, text::ELLIPSIS)
}

/// Error message with its sources, e.g. `error sending request: client error (Connect): tcp connect
/// error: Connection refused (os error 111)`; URLs are not included.
fn error_chain(e: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    if parts.is_empty() { "request failed".to_owned() } else { parts.join(": ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names() {
        assert!(is_valid_label_name("__name__"));
        assert!(is_valid_label_name("job"));
        assert!(is_valid_label_name("_a1"));
        assert!(!is_valid_label_name(""));
        assert!(!is_valid_label_name("1a"));
        assert!(!is_valid_label_name("a-b"));
        assert!(!is_valid_label_name("a/../b"));
    }

    #[test]
    fn endpoint_url_keeps_base_path_and_query() {
        let url = parse_base_url("http://vmselect:8481/select/42/prometheus/?extra_label=env=prod").unwrap();
        let client = VmClient::new(VmClientConfig::new(url)).unwrap();
        let u = client.endpoint_url(&Endpoint::label_values("job").unwrap());
        assert_eq!(
            u.as_str(),
            "http://vmselect:8481/select/42/prometheus/api/v1/label/job/values?extra_label=env=prod"
        );
        assert_eq!(client.host(), "vmselect:8481");
    }

    #[test]
    fn base_url_validation() {
        assert!(parse_base_url("ftp://x").is_err());
        assert!(parse_base_url("http://u:p@x").is_err());
        assert!(parse_base_url("http://x/#f").is_err());
        assert!(parse_base_url("not a url").is_err());
        assert!(parse_base_url("https://vm.example/prometheus").is_ok());
    }

    #[test]
    fn form_encoding_repeats_keys() {
        let p = vec![("match[]".to_owned(), "up{a=\"b\"}".to_owned()), ("match[]".to_owned(), "x".to_owned())];
        assert_eq!(encode_form(&p), "match%5B%5D=up%7Ba%3D%22b%22%7D&match%5B%5D=x");
    }

    #[test]
    fn auth_debug_redacts() {
        assert_eq!(format!("{:?}", Auth::Bearer("secret".into())), "Bearer(<redacted>)");
    }
}
