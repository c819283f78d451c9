//! Facts about this process and its signals: the pod's namespace, what `/health`
//! reports about the host, and shutdown on SIGTERM/SIGINT.

use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::engine::instructions::SystemInstructions;
use crate::web::HostInfo;

/// The namespace of this pod (the Lease and, by default, Runs and Incidents live there).
pub fn pod_namespace(settings: &Settings) -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .or_else(|| settings.namespace.clone())
        .unwrap_or_else(|| "default".into())
}

pub fn host_info(settings: &Settings, instructions: &SystemInstructions, mode: &'static str) -> HostInfo {
    HostInfo {
        database: None,
        mode,
        model: settings.model.clone(),
        response_language: settings.response_language.clone(),
        instructions_sha256: instructions.sha256(),
        max_body_bytes: usize::try_from(settings.max_body_bytes).unwrap_or(usize::MAX),
        body_timeout: settings.body_timeout,
        mcp: crate::app::narrow::mcp(settings),
        validator_sandbox: crate::change::sandbox::Sandbox::new(
            settings.validator_sandbox,
            &settings.validator_read_paths,
            &settings.data_dir,
        )
        .describe(),
        edge: edge(settings),
        webhook_namespace: settings
            .webhook_namespace
            .clone()
            .unwrap_or_else(|| crate::app::assemble::home_namespace(settings)),
    }
}

/// The names every route answers to: `allowed_hosts`, `mcp_allowed_hosts` and the
/// `public_url`'s authority (addresses and `localhost` always).
fn edge(settings: &Settings) -> crate::web::edge::Edge {
    let mcp = crate::app::narrow::mcp(settings);
    let allowed_hosts =
        settings.allowed_hosts.iter().chain(&mcp.allowed_hosts).map(|h| h.to_ascii_lowercase()).collect();
    let public_authority = settings
        .public_url
        .as_deref()
        .and_then(|url| url.split("://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .map(str::to_ascii_lowercase);
    crate::web::edge::Edge { allowed_hosts, public_authority }
}

/// Cancels `cancel` on SIGTERM or SIGINT.
pub async fn shutdown_on_signal(cancel: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = cancel.cancelled() => return,
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received; shutting down"),
        _ = terminate => tracing::info!("SIGTERM received; shutting down"),
    }
    cancel.cancel();
}
