//! The smart-HTTP transport libgit2 uses for `http://` and `https://` remotes, built on
//! reqwest with the process's rustls setup (libgit2 is built without TLS or SSH).
//!
//! libgit2 calls the subtransport on the thread that runs the git operation, so the
//! per-call settings (credentials, limits) travel in a thread-local set by
//! [`with_call`] around each libgit2 call: credentials are never in a URL, in
//! libgit2's credential callbacks or in its configuration. Requests run on a small
//! dedicated runtime; the calling thread blocks on each one (callers are blocking
//! threads, never async tasks).
//!
//! A remote is a hostile peer: redirects are followed only to the same scheme, host
//! and port (at most [`MAX_REDIRECTS`]), every read has a deadline, and responses are
//! capped in size.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use base64::Engine as _;
use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, LOCATION};
use url::Url;

use super::Credentials;

/// Same-origin redirects followed on a ref advertisement.
pub const MAX_REDIRECTS: usize = 3;
/// Longest wait for a TCP (and TLS) connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Bounds on one exchange with a remote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest wait for response headers and for each piece of a body.
    pub read_timeout: Duration,
    /// Largest ref advertisement (`info/refs`).
    pub max_refs_bytes: u64,
    /// Largest pack or push report.
    pub max_pack_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { read_timeout: Duration::from_secs(60), max_refs_bytes: 8 << 20, max_pack_bytes: 512 << 20 }
    }
}

/// Why an exchange with a remote failed. URLs shown carry no credentials or query.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No connection or no answer.
    #[error("cannot reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    /// 401 without credentials.
    #[error("{url} answered HTTP 401: the git server requires credentials; set spec.source.git.auth")]
    AuthRequired { url: String },
    /// 401 or 403 with credentials.
    #[error(
        "{url} refused the credentials (HTTP {status}); check the username and token of spec.source.git.auth \
         and that the token may {access} this repository"
    )]
    AuthRejected { url: String, status: u16, access: &'static str },
    /// 404.
    #[error("{url} answered HTTP 404: no git repository there; check spec.source.git.url")]
    NotFound { url: String },
    /// Another unexpected status.
    #[error("{url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    /// A redirect to another scheme, host or port.
    #[error(
        "{url} redirected to {to}, another scheme, host or port; only same-origin redirects are followed \
         (set spec.source.git.url to the final URL)"
    )]
    CrossOriginRedirect { url: String, to: String },
    /// Too many same-origin redirects, or a redirect without a usable target.
    #[error("{url}: {detail}")]
    BadRedirect { url: String, detail: String },
    /// Not a smart HTTP git server.
    #[error("{url} is not a smart HTTP git server (content type {found:?}, expected {expected})")]
    NotSmartHttp { url: String, found: String, expected: String },
    /// The answer is larger than allowed.
    #[error("{url}: the answer exceeds {limit} bytes; refusing to read more")]
    TooLarge { url: String, limit: u64 },
    /// The server sent nothing for too long.
    #[error("{url}: no data for {waited}; the server stalled")]
    Stalled { url: String, waited: String },
    /// The body could not be read.
    #[error("reading from {url}: {detail}")]
    Read { url: String, detail: String },
    /// The HTTP transport could not start.
    #[error("the git HTTP transport is unavailable: {0}")]
    Runtime(String),
    /// Credentials that cannot be sent in an HTTP Basic header.
    #[error("the username or token of spec.source.git.auth contains a ':' (username) or control characters")]
    InvalidCredentials,
}

/// The per-call settings and the first transport failure of the call.
struct Call {
    auth: Option<HeaderValue>,
    limits: Limits,
    failure: Option<TransportError>,
    /// The server asked for credentials (401 with `WWW-Authenticate: Basic`) during this
    /// call: only from then on are they sent.
    challenged: bool,
}

thread_local! {
    static CALL: RefCell<Option<Call>> = const { RefCell::new(None) };
}

/// Clears the thread's call settings even when the git operation panics.
struct CallGuard;

impl Drop for CallGuard {
    fn drop(&mut self) {
        CALL.with(|call| call.borrow_mut().take());
    }
}

/// Runs one libgit2 operation with these credentials and limits available to the
/// transport on this thread. On failure, the transport's own error (if it caused the
/// failure) is returned instead of libgit2's rendering of it. Blocking.
pub fn with_call<T>(
    credentials: Option<&Credentials>,
    limits: &Limits,
    operation: impl FnOnce() -> Result<T, git2::Error>,
) -> Result<T, Failure> {
    register().map_err(Failure::Transport)?;
    let auth = match credentials {
        None => None,
        Some(c) if c.username.contains(':') || c.username.chars().chain(c.token.chars()).any(char::is_control) => {
            return Err(Failure::Transport(TransportError::InvalidCredentials));
        }
        Some(c) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", c.username, c.token));
            let mut value = HeaderValue::from_str(&format!("Basic {encoded}"))
                .map_err(|_| Failure::Transport(TransportError::InvalidCredentials))?;
            value.set_sensitive(true);
            Some(value)
        }
    };
    CALL.with(|call| {
        *call.borrow_mut() = Some(Call { auth, limits: limits.clone(), failure: None, challenged: false });
    });
    let _guard = CallGuard;
    let outcome = operation();
    let failure = CALL.with(|call| call.borrow_mut().as_mut().and_then(|c| c.failure.take()));
    outcome.map_err(|error| match failure {
        Some(transport) => Failure::Transport(transport),
        None => Failure::Git(error),
    })
}

/// Why an operation run by [`with_call`] failed.
#[derive(Debug)]
pub enum Failure {
    /// The exchange with the remote.
    Transport(TransportError),
    /// libgit2 itself.
    Git(git2::Error),
}

/// Whether the server of this call has asked for credentials.
fn challenged() -> bool {
    CALL.with(|call| call.borrow().as_ref().is_some_and(|c| c.challenged))
}

fn mark_challenged() {
    CALL.with(|call| {
        if let Some(c) = call.borrow_mut().as_mut() {
            c.challenged = true;
        }
    });
}

fn settings() -> (Option<HeaderValue>, Limits) {
    CALL.with(|call| match call.borrow().as_ref() {
        Some(c) => (c.auth.clone(), c.limits.clone()),
        None => (None, Limits::default()),
    })
}

/// Records the failure for [`with_call`] and hands libgit2 its message.
fn fail(error: TransportError) -> io::Error {
    let message = error.to_string();
    CALL.with(|call| {
        if let Some(call) = call.borrow_mut().as_mut() {
            call.failure.get_or_insert(error);
        }
    });
    io::Error::other(message)
}

/// Registers the transport for both schemes, once. Without it libgit2 would fall
/// back to its own HTTP client (no TLS, no credentials), so a failure is an error
/// for every call.
fn register() -> Result<(), TransportError> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            for scheme in ["http", "https"] {
                // SAFETY: registration happens once, before this module creates any
                // transport; libgit2 copies the scheme and keeps the factory forever.
                unsafe {
                    git2::transport::register(scheme, |remote| {
                        Transport::smart(remote, true, HttpSubtransport { base: Arc::new(Mutex::new(None)) })
                    })
                }
                .map_err(|error| format!("cannot register the {scheme} transport: {}", error.message()))?;
            }
            Ok(())
        })
        .clone()
        .map_err(TransportError::Runtime)
}

struct Shared {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

fn shared() -> Result<&'static Shared, TransportError> {
    static SHARED: OnceLock<Result<Shared, String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("akritas-git-http")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            crate::install_crypto_provider();
            let client = reqwest::Client::builder()
                .user_agent(crate::outbound::USER_AGENT)
                .connect_timeout(CONNECT_TIMEOUT)
                .redirect(reqwest::redirect::Policy::none());
            // Under the egress policy: its resolver, and no proxy but `egress_proxy`.
            let client = crate::egress::guard(client).build().map_err(|e| e.to_string())?;
            Ok(Shared { runtime, client })
        })
        .as_ref()
        .map_err(|e| TransportError::Runtime(e.clone()))
}

/// The URL as shown in errors and logs: no credentials, no query.
pub fn display_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme() && a.host_str() == b.host_str() && a.port_or_known_default() == b.port_or_known_default()
}

fn service_name(service: Service) -> &'static str {
    match service {
        Service::UploadPackLs | Service::UploadPack => "git-upload-pack",
        Service::ReceivePackLs | Service::ReceivePack => "git-receive-pack",
    }
}

/// One remote connection: the effective base URL after a redirected advertisement.
struct HttpSubtransport {
    base: Arc<Mutex<Option<Url>>>,
}

impl SmartSubtransport for HttpSubtransport {
    fn action(&self, url: &str, service: Service) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let remote = Url::parse(url).map_err(|e| git2::Error::from_str(&format!("invalid remote URL: {e}")))?;
        let (auth, limits) = settings();
        Ok(Box::new(HttpStream {
            remote,
            service,
            base: self.base.clone(),
            auth,
            limits,
            body: Vec::new(),
            response: None,
            pending: Vec::new(),
            offset: 0,
            received: 0,
            shown: String::new(),
            sent: false,
        }))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

/// One request: written body (for a POST), then the response read piece by piece.
struct HttpStream {
    remote: Url,
    service: Service,
    base: Arc<Mutex<Option<Url>>>,
    auth: Option<HeaderValue>,
    limits: Limits,
    body: Vec<u8>,
    response: Option<reqwest::Response>,
    pending: Vec<u8>,
    offset: usize,
    received: u64,
    shown: String,
    sent: bool,
}

impl HttpStream {
    fn is_advertisement(&self) -> bool {
        matches!(self.service, Service::UploadPackLs | Service::ReceivePackLs)
    }

    fn limit(&self) -> u64 {
        if self.is_advertisement() { self.limits.max_refs_bytes } else { self.limits.max_pack_bytes }
    }

    fn base(&self) -> Url {
        self.base.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| self.remote.clone())
    }

    fn target(&self, base: &Url) -> Result<Url, TransportError> {
        let svc = service_name(self.service);
        let root = base.as_str().trim_end_matches('/');
        let text =
            if self.is_advertisement() { format!("{root}/info/refs?service={svc}") } else { format!("{root}/{svc}") };
        Url::parse(&text).map_err(|e| TransportError::BadRedirect { url: display_url(base), detail: e.to_string() })
    }

    fn send(&mut self) -> Result<(), TransportError> {
        let shared = shared()?;
        let svc = service_name(self.service);
        let mut url = self.target(&self.base())?;
        self.shown = display_url(&url);
        let mut redirects = 0;
        loop {
            // Credentials go only once the server asked for them (Basic on challenge).
            let send_auth = self.auth.as_ref().filter(|_| challenged()).cloned();
            let mut request = if self.is_advertisement() {
                shared.client.get(url.clone()).header(ACCEPT, "*/*")
            } else {
                // Kept for a retry with credentials until the server has asked for them.
                let body = if send_auth.is_none() && self.auth.is_some() {
                    self.body.clone()
                } else {
                    std::mem::take(&mut self.body)
                };
                shared
                    .client
                    .post(url.clone())
                    .header(CONTENT_TYPE, format!("application/x-{svc}-request"))
                    .header(ACCEPT, format!("application/x-{svc}-result"))
                    .body(body)
            };
            if let Some(auth) = &send_auth {
                request = request.header(AUTHORIZATION, auth.clone());
            }
            let timeout = self.limits.read_timeout;
            let sent = shared.runtime.block_on(async move { tokio::time::timeout(timeout, request.send()).await });
            let response = match sent {
                Err(_) => {
                    return Err(TransportError::Stalled {
                        url: self.shown.clone(),
                        waited: humantime::format_duration(timeout).to_string(),
                    });
                }
                Ok(Err(error)) => {
                    return Err(TransportError::Unreachable { url: self.shown.clone(), detail: error_chain(&error) });
                }
                Ok(Ok(response)) => response,
            };
            let status = response.status();
            let basic_challenge = response
                .headers()
                .get_all(reqwest::header::WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.trim_start().get(..5).is_some_and(|scheme| scheme.eq_ignore_ascii_case("basic")));
            if status.as_u16() == 401 && self.auth.is_some() && send_auth.is_none() && basic_challenge {
                mark_challenged();
                continue;
            }
            if status.is_redirection() {
                let next = self.redirect_target(&url, &response)?;
                if !self.is_advertisement() {
                    return Err(TransportError::BadRedirect {
                        url: self.shown.clone(),
                        detail: format!("HTTP {} on a POST; redirects are followed only on info/refs", status.as_u16()),
                    });
                }
                if !same_origin(&self.remote, &next) {
                    return Err(TransportError::CrossOriginRedirect {
                        url: self.shown.clone(),
                        to: display_url(&next),
                    });
                }
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(TransportError::BadRedirect {
                        url: self.shown.clone(),
                        detail: format!("more than {MAX_REDIRECTS} redirects"),
                    });
                }
                url = next;
                self.shown = display_url(&url);
                continue;
            }
            self.check_status(status.as_u16())?;
            let expected = if self.is_advertisement() {
                format!("application/x-{svc}-advertisement")
            } else {
                format!("application/x-{svc}-result")
            };
            let found = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            if found.split(';').next().map(str::trim) != Some(expected.as_str()) {
                return Err(TransportError::NotSmartHttp { url: self.shown.clone(), found, expected });
            }
            if response.content_length().is_some_and(|length| length > self.limit()) {
                return Err(TransportError::TooLarge { url: self.shown.clone(), limit: self.limit() });
            }
            if redirects > 0 {
                // Later requests of this connection go where the advertisement came from.
                let mut base = url.clone();
                base.set_query(None);
                let path = base.path().trim_end_matches("/info/refs").to_string();
                base.set_path(&path);
                *self.base.lock().unwrap_or_else(|p| p.into_inner()) = Some(base);
            }
            self.response = Some(response);
            return Ok(());
        }
    }

    fn redirect_target(&self, url: &Url, response: &reqwest::Response) -> Result<Url, TransportError> {
        let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok()).ok_or_else(|| {
            TransportError::BadRedirect {
                url: self.shown.clone(),
                detail: format!("HTTP {} without a Location header", response.status().as_u16()),
            }
        })?;
        url.join(location).map_err(|e| TransportError::BadRedirect {
            url: self.shown.clone(),
            detail: format!("redirect to an invalid location: {e}"),
        })
    }

    fn check_status(&self, status: u16) -> Result<(), TransportError> {
        let url = self.shown.clone();
        let access = match self.service {
            Service::ReceivePackLs | Service::ReceivePack => "push to",
            _ => "read",
        };
        match status {
            200 => Ok(()),
            401 if self.auth.is_none() || !challenged() => Err(TransportError::AuthRequired { url }),
            401 | 403 => Err(TransportError::AuthRejected { url, status, access }),
            404 => Err(TransportError::NotFound { url }),
            _ => Err(TransportError::Status { url, status }),
        }
    }

    fn next_piece(&mut self) -> Result<bool, TransportError> {
        let shared = shared()?;
        let timeout = self.limits.read_timeout;
        let Some(response) = self.response.as_mut() else { return Ok(false) };
        let piece = match shared.runtime.block_on(async { tokio::time::timeout(timeout, response.chunk()).await }) {
            Err(_) => {
                return Err(TransportError::Stalled {
                    url: self.shown.clone(),
                    waited: humantime::format_duration(timeout).to_string(),
                });
            }
            Ok(Err(error)) => {
                return Err(TransportError::Read { url: self.shown.clone(), detail: error_chain(&error) });
            }
            Ok(Ok(None)) => return Ok(false),
            Ok(Ok(Some(piece))) => piece,
        };
        self.received += piece.len() as u64;
        if self.received > self.limit() {
            self.response = None;
            return Err(TransportError::TooLarge { url: self.shown.clone(), limit: self.limit() });
        }
        self.pending = piece.to_vec();
        self.offset = 0;
        Ok(true)
    }
}

impl Read for HttpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.sent {
            self.sent = true;
            self.send().map_err(fail)?;
        }
        while self.offset >= self.pending.len() {
            if !self.next_piece().map_err(fail)? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.pending.len() - self.offset);
        buf[..n].copy_from_slice(&self.pending[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

impl Write for HttpStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.body.len() as u64 + data.len() as u64 > self.limits.max_pack_bytes {
            let url = display_url(&self.remote);
            return Err(fail(TransportError::TooLarge { url, limit: self.limits.max_pack_bytes }));
        }
        self.body.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An error and its causes, one line (reqwest's own message hides the cause).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_url_drops_credentials_and_query() {
        let url = Url::parse("https://user:secret@git.example/a/b.git/info/refs?service=x").unwrap();
        assert_eq!(display_url(&url), "https://git.example/a/b.git/info/refs");
    }

    #[test]
    fn same_origin_needs_scheme_host_and_port() {
        let base = Url::parse("https://git.example/a").unwrap();
        assert!(same_origin(&base, &Url::parse("https://git.example:443/b").unwrap()));
        assert!(!same_origin(&base, &Url::parse("http://git.example/a").unwrap()));
        assert!(!same_origin(&base, &Url::parse("https://other.example/a").unwrap()));
        assert!(!same_origin(&base, &Url::parse("https://git.example:8443/a").unwrap()));
    }
}
