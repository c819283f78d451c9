//! Why a request to a receiver or a chat provider failed, in words an operator can act on:
//! a class from a fixed set (a bounded `/metrics` label) and a sentence that names the host and
//! port. Never the URL's path or query (a Telegram bot token is in its path), never user info,
//! and a response body only as its first bytes, on one line, redacted.

use std::error::Error as _;
use std::fmt;

/// Longest part of a response body a cause quotes, in bytes.
const MAX_BODY_BYTES: usize = 160;

/// A failure's class and its sentence.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Cause {
    /// `connection_refused`, `dns`, `tls`, `timeout`, `connect`, `http_4xx`, `http_5xx` or
    /// `rejected`.
    pub class: &'static str,
    /// What happened, with `host:port`.
    pub detail: String,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

/// `host:port` of `url` (the scheme's port when none is written); `?` when it has no host.
pub fn endpoint(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(url) => match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            _ => "?".into(),
        },
        Err(_) => "?".into(),
    }
}

impl Cause {
    /// A request that got no response: refused, unresolvable, a failed TLS handshake, a
    /// timeout or another connection error, read from the error's sources (the `reqwest` error's
    /// own text names the whole URL, so it is not used).
    pub fn transport(error: &reqwest::Error, endpoint: &str) -> Self {
        if error.is_timeout() {
            return Self::timeout(endpoint);
        }
        let mut deepest = None;
        let mut source = error.source();
        while let Some(inner) = source {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Self::new("tls", format!("TLS handshake with {endpoint} failed: {tls}"));
            }
            if let Some(io) = inner.downcast_ref::<std::io::Error>() {
                match io.kind() {
                    std::io::ErrorKind::ConnectionRefused => {
                        return Self::new("connection_refused", format!("connection refused by {endpoint}"));
                    }
                    std::io::ErrorKind::TimedOut => return Self::timeout(endpoint),
                    _ => {}
                }
                if let Some(tls) = io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) {
                    return Self::new("tls", format!("TLS handshake with {endpoint} failed: {tls}"));
                }
            }
            let text = inner.to_string();
            if text.contains("dns error") || text.contains("failed to lookup address") {
                let host = endpoint.rsplit_once(':').map_or(endpoint, |(host, _)| host);
                return Self::new("dns", format!("DNS: no address found for {host}"));
            }
            deepest = Some(text);
            source = inner.source();
        }
        let why = deepest.map(|text| format!(": {}", one_line(&text))).unwrap_or_default();
        Self::new("connect", format!("cannot connect to {endpoint}{why}"))
    }

    /// No answer in time.
    pub fn timeout(endpoint: &str) -> Self {
        Self::new("timeout", format!("no answer from {endpoint} in time (notification_timeout)"))
    }

    /// An HTTP error status, with the first bytes of the body (or the provider's description).
    pub fn status(status: u16, endpoint: &str, body: &str) -> Self {
        let class = if status >= 500 { "http_5xx" } else { "http_4xx" };
        let body = one_line(body);
        let said = if body.is_empty() { String::new() } else { format!(": {body}") };
        Self::new(class, format!("HTTP {status} from {endpoint}{said}"))
    }

    /// A 2xx answer the provider marked as refused (Telegram's `ok: false`).
    pub fn rejected(endpoint: &str, description: &str) -> Self {
        Self::new("rejected", format!("{endpoint} refused the message: {}", one_line(description)))
    }

    fn new(class: &'static str, detail: String) -> Self {
        Self { class, detail: crate::redact::redact(&detail) }
    }
}

/// `text` on one line, control characters as spaces, cut to [`MAX_BODY_BYTES`].
fn one_line(text: &str) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let flat = flat.split_whitespace().collect::<Vec<_>>().join(" ");
    crate::text::truncate_bytes(&flat, MAX_BODY_BYTES, crate::text::ELLIPSIS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_host_and_port_never_the_path_query_or_user() {
        assert_eq!(endpoint("https://api.telegram.org/bot123:SECRET/sendMessage"), "api.telegram.org:443");
        assert_eq!(endpoint("http://user:pw@hooks.example:8080/x?token=T"), "hooks.example:8080");
        assert_eq!(endpoint("not a url"), "?");
    }

    #[test]
    fn a_status_quotes_the_first_bytes_of_the_body_on_one_line() {
        let cause = Cause::status(503, "h:80", &format!("down\r\nfor {}", "x".repeat(400)));
        assert_eq!(cause.class, "http_5xx");
        assert!(cause.detail.starts_with("HTTP 503 from h:80: down for xxx"), "{cause}");
        assert!(cause.detail.len() < 200, "{cause}");
        assert_eq!(Cause::status(404, "h:80", "").detail, "HTTP 404 from h:80");
    }

    #[tokio::test]
    async fn a_closed_port_is_connection_refused_and_an_unknown_name_is_dns() {
        crate::install_crypto_provider();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{port}/hook/SECRET");
        let error = client.post(&url).send().await.unwrap_err();
        let cause = Cause::transport(&error, &endpoint(&url));
        assert_eq!(cause.class, "connection_refused", "{cause}");
        assert_eq!(cause.detail, format!("connection refused by 127.0.0.1:{port}"));

        let url = "http://no-such-host.invalid/hook";
        let error = client.post(url).send().await.unwrap_err();
        let cause = Cause::transport(&error, &endpoint(url));
        assert_eq!((cause.class, cause.detail.as_str()), ("dns", "DNS: no address found for no-such-host.invalid"));
    }
}
