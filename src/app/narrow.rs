//! The narrow settings each layer takes, built from the resolved service [`Settings`]: the
//! whole `Settings` stays in `app/` and `config/`, and the engine, the alert pipeline and the
//! MCP server see only their own struct.

use std::time::Duration;

use crate::alerts::intake::admission;
use crate::alerts::worker::WorkerSettings;
use crate::config::Settings;
use crate::engine::budget::BudgetLimits;
use crate::engine::request::EngineSettings;
use crate::notify::RetryPolicy;
use crate::schedules::SchedulerSettings;
use crate::tenancy::Tenancy;
use crate::web::mcp_server::McpLimits;

/// What every Run is allowed and how Runs share the host.
pub fn engine(settings: &Settings) -> EngineSettings {
    EngineSettings {
        limits: BudgetLimits {
            max_duration_ms: u64::try_from(settings.request_timeout.as_millis()).unwrap_or(u64::MAX),
            max_model_calls: settings.max_iterations,
            max_tool_calls: settings.max_tool_calls,
            max_tool_result_bytes: settings.max_tool_result_bytes,
            max_retrieved_context_bytes: settings.max_retrieved_context_bytes,
            max_context_tokens: settings.max_context_tokens,
            max_output_tokens: settings.max_model_tokens,
        },
        default_max_tokens: settings.max_tokens,
        max_tokens_limit: settings.max_tokens_limit,
        temperature: settings.temperature,
        response_language: settings.response_language.clone(),
        max_concurrent_runs: settings.max_concurrent_runs as usize,
        alert_reserved_runs: settings.alert_reserved_runs as usize,
        max_runs_per_namespace: settings.max_runs_per_namespace as usize,
        queue_timeout: settings.run_queue_timeout,
        search_top_k: settings.search_top_k as usize,
        keep_input_namespaces: settings.audit_input_namespaces.iter().cloned().collect(),
    }
}

/// How the investigation worker runs jobs and sends what they found.
pub fn worker(settings: &Settings) -> WorkerSettings {
    WorkerSettings {
        concurrency: settings.alert_workers.max(1) as usize,
        max_attempts: settings.alert_job_attempts.max(1),
        backoff: settings.alert_job_backoff,
        public_url: settings.public_url.clone(),
        delivery: RetryPolicy {
            attempts: settings.notification_attempts.max(1),
            base_delay: Duration::from_millis(500),
            timeout: settings.notification_timeout,
        },
        tenancy: Tenancy::new(settings.shared_namespaces.iter().cloned()),
    }
}

/// The scheduler's settings: its Runs take the slots chat Runs may take (not those kept for
/// alerts), at most `max_runs_per_namespace` per namespace; notifications as the worker's.
pub fn schedules(settings: &Settings) -> SchedulerSettings {
    let worker = worker(settings);
    let slots = settings.max_concurrent_runs.saturating_sub(settings.alert_reserved_runs).max(1);
    SchedulerSettings {
        daily_tokens: settings.schedule_daily_tokens,
        concurrency: slots as usize,
        per_namespace: settings.max_runs_per_namespace.max(1) as usize,
        public_url: worker.public_url,
        delivery: worker.delivery,
        tenancy: worker.tenancy,
    }
}

/// How many new investigations each AlertSource starts, and how many wait.
pub fn admission(settings: &Settings) -> admission::Limits {
    admission::Limits {
        source_rate_per_minute: settings.alert_source_rate.max(1),
        max_pending_jobs: settings.alert_pending_jobs.max(1) as usize,
        max_pending_per_namespace: settings.alert_pending_jobs_per_namespace.max(1) as usize,
        max_deferred_per_source: settings.alert_deferred_jobs.max(1) as usize,
    }
}

/// The bounds and host allowlist of `/mcp`.
pub fn mcp(settings: &Settings) -> McpLimits {
    let mut allowed_hosts = settings.mcp_allowed_hosts.clone();
    // `public_url` is normalised: scheme://authority[/path].
    if let Some(authority) =
        settings.public_url.as_deref().and_then(|url| url.split("://").nth(1)).and_then(|rest| rest.split('/').next())
    {
        allowed_hosts.push(authority.to_string());
    }
    McpLimits {
        max_sessions: settings.mcp_max_sessions as usize,
        max_sessions_per_key: settings.mcp_max_sessions_per_key as usize,
        idle_timeout: settings.mcp_session_idle_timeout,
        allowed_hosts,
        shutdown: tokio_util::sync::CancellationToken::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer's own `Default` is what the default configuration gives it.
    #[test]
    fn the_layers_defaults_are_the_configurations() {
        let settings = Settings::default();
        assert_eq!(admission(&settings), admission::Limits::default());
        let (ours, theirs) = (mcp(&settings), McpLimits::default());
        assert_eq!(
            (ours.max_sessions, ours.max_sessions_per_key, ours.idle_timeout, ours.allowed_hosts),
            (theirs.max_sessions, theirs.max_sessions_per_key, theirs.idle_timeout, theirs.allowed_hosts)
        );
    }
}
