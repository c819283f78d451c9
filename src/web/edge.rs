//! The web edge, before any route: a `Host` this Akritas answers to (DNS rebinding), and
//! a same-origin `Origin` on browser-sent requests that change something (CSRF).
//!
//! A `Host` is accepted when it is an IP address (a rebinding page's requests carry its
//! own name, never an address), `localhost`, the `public_url`'s host, or in
//! `allowed_hosts` (or `mcp_allowed_hosts`); a request without one (HTTP/1.0 probes) is
//! not from a browser. An unsafe method (anything but GET, HEAD, OPTIONS) with an
//! `Origin` must come from the same origin: the request's own `Host`, or the
//! `public_url`.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The names this Akritas answers to besides addresses and `localhost`.
#[derive(Clone, Debug, Default)]
pub struct Edge {
    /// `allowed_hosts`, `mcp_allowed_hosts` and the `public_url`'s authority, lower case:
    /// `host` (any port) or `host:port`.
    pub allowed_hosts: Vec<String>,
    /// The `public_url`'s authority (`host[:port]`), lower case.
    pub public_authority: Option<String>,
}

/// The host part of an authority (`name:port`, `[v6]:port`), lower case.
fn host_of(authority: &str) -> String {
    let authority = authority.trim().to_ascii_lowercase();
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => host.to_string(),
        _ => authority,
    }
}

impl Edge {
    /// Whether a request with this `Host` may reach the routes.
    pub fn host_allowed(&self, authority: &str) -> bool {
        let host = host_of(authority);
        let authority = authority.trim().to_ascii_lowercase();
        host.parse::<IpAddr>().is_ok()
            || host == "localhost"
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| *allowed == authority || (!allowed.contains(':') && *allowed == host))
    }

    /// Whether an `Origin` is the request's own (its `Host`) or the public URL's.
    pub fn same_origin(&self, origin: &str, authority: Option<&str>) -> bool {
        let Some(origin) = origin.trim().to_ascii_lowercase().split("://").nth(1).map(str::to_string) else {
            return false;
        };
        let origin = origin.trim_end_matches('/');
        authority.is_some_and(|a| a.trim().eq_ignore_ascii_case(origin))
            || self.public_authority.as_deref() == Some(origin)
    }
}

/// Refuses a request whose `Host` is not this Akritas's (403 `host_not_allowed`), or an
/// unsafe request from another origin (403 `cross_origin`).
pub async fn guard(State(edge): State<std::sync::Arc<Edge>>, request: Request, next: Next) -> Response {
    let authority = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    if let Some(authority) = &authority
        && !edge.host_allowed(authority)
    {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "host_not_allowed",
            format!(
                "Host {authority:?} is not a name of this Akritas (DNS-rebinding protection); if clients reach it by that name, add it to allowed_hosts or set public_url"
            ),
        )
        .into_response();
    }
    let safe = matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !safe && let Some(origin) = request.headers().get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default().to_string();
        if !edge.same_origin(&origin, authority.as_deref()) {
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "a {} from origin {origin:?} is refused: only pages of this Akritas may send it (CSRF protection); API clients send no Origin",
                    request.method()
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> Edge {
        Edge {
            allowed_hosts: vec!["akritas.ops.svc".into(), "akritas.example.com:8443".into()],
            public_authority: Some("akritas.example.com:8443".into()),
        }
    }

    #[test]
    fn addresses_localhost_and_allowed_names_pass_a_rebinding_name_does_not() {
        let edge = edge();
        for host in
            ["127.0.0.1:8090", "[::1]:8090", "10.2.3.4:8090", "localhost:8090", "LOCALHOST", "akritas.ops.svc:8090"]
        {
            assert!(edge.host_allowed(host), "{host}");
        }
        assert!(edge.host_allowed("akritas.example.com:8443"));
        for host in ["evil.example:8090", "akritas.example.com:9999", "127.0.0.1.evil.example", "localhost.evil:80"] {
            assert!(!edge.host_allowed(host), "{host}");
        }
    }

    #[test]
    fn an_origin_must_be_the_requests_own_or_the_public_urls() {
        let edge = edge();
        assert!(edge.same_origin("http://127.0.0.1:8090", Some("127.0.0.1:8090")));
        assert!(edge.same_origin("https://akritas.example.com:8443", Some("10.0.0.1:8090")));
        assert!(!edge.same_origin("http://evil.example", Some("127.0.0.1:8090")));
        assert!(!edge.same_origin("null", Some("127.0.0.1:8090")));
        assert!(!edge.same_origin("http://127.0.0.1:8091", Some("127.0.0.1:8090")));
    }
}
