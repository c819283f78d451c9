//! The one factory for outbound HTTP clients (model server, notifications, MCP over
//! HTTP, VictoriaMetrics): timeouts, no redirects, a user agent, the process-wide
//! TLS provider. Clients for URLs a resource declares connect under the egress policy
//! ([`crate::egress::guard`]: its resolver, and never a proxy of `HTTP(S)_PROXY`, only
//! `egress_proxy`); the operator's own endpoints (the model server) do not, and follow
//! the proxy variables.

use std::time::Duration;

/// User agent of every outbound request.
pub const USER_AGENT: &str = concat!("akritas/", env!("CARGO_PKG_VERSION"));

/// A client with a connect timeout and an overall request timeout; redirects are not
/// followed (a redirect could carry credentials to another host).
pub fn client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    builder(timeout).build()
}

/// [`client`] for the URLs resources declare: every destination and resolved address goes
/// through the process's egress policy when the connection is made.
pub fn resource_client(timeout: Duration) -> reqwest::Result<reqwest::Client> {
    crate::egress::guard(builder(timeout)).build()
}

fn builder(timeout: Duration) -> reqwest::ClientBuilder {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(Duration::from_secs(10).min(timeout))
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
}

/// A client for long-lived exchanges (MCP over streamable HTTP, whose event streams stay
/// open): a connect timeout but no overall timeout (callers bound each call), and a
/// redirect is an error naming its status, never followed: the request carries
/// credentials the redirect target must not see. Only resources declare such servers, so
/// the egress policy applies.
pub fn streaming_client(connect_timeout: Duration) -> reqwest::Result<reqwest::Client> {
    crate::install_crypto_provider();
    let builder = reqwest::Client::builder().user_agent(USER_AGENT).connect_timeout(connect_timeout).redirect(
        reqwest::redirect::Policy::custom(|attempt| {
            let refused = RedirectRefused(attempt.status());
            attempt.error(refused)
        }),
    );
    crate::egress::guard(builder).build()
}

/// A redirect answer that was not followed.
#[derive(Debug, thiserror::Error)]
#[error("the server answered {0}; redirects are not followed (configure the final URL)")]
pub struct RedirectRefused(pub reqwest::StatusCode);
