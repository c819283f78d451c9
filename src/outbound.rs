//! The one factory for outbound HTTP clients (model server, notifications, MCP over
//! HTTP, VictoriaMetrics): timeouts, no redirects, a user agent, the process-wide
//! TLS provider.

use std::time::Duration;

/// User agent of every outbound request.
pub const USER_AGENT: &str = concat!("akritas/", env!("CARGO_PKG_VERSION"));

/// A client with a connect timeout and an overall request timeout; redirects are not
/// followed (a redirect could carry credentials to another host).
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(10).min(timeout))
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// A client for long-lived exchanges (MCP over streamable HTTP, whose event streams stay
/// open): a connect timeout but no overall timeout (callers bound each call), and a
/// redirect is an error naming its status, never followed: the request carries
/// credentials the redirect target must not see.
pub fn streaming_client(connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::custom(|attempt| {
            let refused = RedirectRefused(attempt.status());
            attempt.error(refused)
        }))
        .build()
}

/// A redirect answer that was not followed.
#[derive(Debug, thiserror::Error)]
#[error("the server answered {0}; redirects are not followed (configure the final URL)")]
pub struct RedirectRefused(pub reqwest::StatusCode);
