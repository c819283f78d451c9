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
