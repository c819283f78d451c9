//! Facts about this process and its signals: the pod's namespace, what `/health`
//! reports about the host, its open-file limit and the listener's bounds, and shutdown on
//! SIGTERM/SIGINT.

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

/// Where validators run: the `validator_sandbox` mode with the system directories and
/// `validator_read_paths` readable, never Akritas's own directories (data, resources,
/// configuration file, workspace and knowledge roots).
pub fn validator_sandbox(settings: &Settings) -> crate::change::sandbox::Sandbox {
    let hidden = std::iter::once(&settings.data_dir)
        .chain(&settings.resources)
        .chain(&settings.config_file)
        .chain(&settings.workspace_roots)
        .chain(&settings.knowledge_roots)
        .cloned()
        .collect();
    crate::change::sandbox::Sandbox::with(crate::change::sandbox::Options {
        mode: settings.validator_sandbox,
        read_paths: settings.validator_read_paths.clone(),
        hidden,
        allow_weak_landlock: settings.validator_sandbox_allow_weak_landlock,
        abi_limit: settings.validator_sandbox_landlock_abi_max,
    })
}

/// The namespace API keys without one act in: the pod's namespace in operator
/// mode, `default` standalone (where manifests without a namespace live).
pub fn home_namespace(settings: &Settings) -> String {
    if settings.kubernetes { pod_namespace(settings) } else { crate::tenancy::DEFAULT_NAMESPACE.to_string() }
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
        validator_sandbox: validator_sandbox(settings).describe(),
        edge: edge(settings),
        webhook_namespace: settings.webhook_namespace.clone().unwrap_or_else(|| home_namespace(settings)),
    }
}

/// Raises the soft open-file limit (`RLIMIT_NOFILE`) to the hard one, so that client
/// connections, journals, database connections and MCP servers do not run out of file
/// descriptors at a distribution's default of 1024; logs the limits and returns the soft
/// limit now in force (unchanged when it cannot be raised).
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limit into the struct it is given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "could not read the open-file limit");
        return 1024;
    }
    let before = limit.rlim_cur;
    // Linux refuses a soft limit over fs.nr_open (1048576 by default), even when the hard
    // limit is unlimited.
    let target = if limit.rlim_max == libc::RLIM_INFINITY { 1 << 20 } else { limit.rlim_max };
    if before >= target {
        tracing::info!(open_files = before, hard_limit = limit.rlim_max, "open-file limit");
        return before;
    }
    let raised = libc::rlimit { rlim_cur: target, rlim_max: limit.rlim_max };
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the hard one
    // needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            open_files = before,
            hard_limit = limit.rlim_max,
            "could not raise the open-file limit"
        );
        return before;
    }
    tracing::info!(open_files = target, raised_from = before, hard_limit = limit.rlim_max, "open-file limit raised");
    target
}

/// How the listener bounds its clients: `header_read_timeout`, and `max_connections` up to
/// half of `open_files` (the other half stays for journals, the database, MCP servers and
/// outbound calls).
pub fn listen_limits(settings: &Settings, open_files: u64) -> crate::web::listen::Limits {
    let room = usize::try_from(open_files / 2).unwrap_or(usize::MAX).max(1);
    let wanted = settings.max_connections as usize;
    if wanted > room {
        tracing::warn!(
            max_connections = wanted,
            open_files,
            taking = room,
            "max_connections is over half the open-file limit; serving at most half of it (raise the hard limit, e.g. \
             `ulimit -Hn` or the container runtime's nofile)"
        );
    }
    crate::web::listen::Limits {
        header_read_timeout: settings.header_read_timeout,
        max_connections: wanted.min(room),
        grace: settings.shutdown_timeout,
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
