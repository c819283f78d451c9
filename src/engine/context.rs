//! Model requests and the model's context window: each request is fitted before it is sent
//! ([`super::fit`]); a request the server refuses as too long for its context is fitted smaller
//! and sent once more; what was cut is recorded (event [`CONTEXT_FITTED`]: counts and bytes,
//! never content) and summed on the Run ([`ContextCuts`]). The change pipeline fits its
//! requests the same way.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::fit::{self, ContextCuts, Fitted};
use super::record::Recorder;
use crate::audit::{AuditError, NewEvent};
use crate::llm::{ChatRequest, ContextWindow, LlmClient, LlmError, Role, WindowSource};

/// Event kind of a fitted request.
pub const CONTEXT_FITTED: &str = "context_fitted";

/// One request, fitted.
pub struct Fitting {
    /// The client to send it with (carrying the shortened SYSTEM.md when that was cut).
    pub llm: LlmClient,
    /// What changed, when anything did (or the request answers an overflow).
    pub report: Option<FitReport>,
}

/// How a request was fitted.
#[derive(Clone, Debug)]
pub struct FitReport {
    /// The window it was fitted to.
    pub window: ContextWindow,
    /// What was cut.
    pub fitted: Fitted,
    /// For a retry after the server's context overflow: the window the error named, if any.
    pub overflow: Option<Option<u32>>,
}

/// Fits `request` to the model's context window (nothing when it is unknown). After `overflow`,
/// to a smaller window, which the client keeps for its later requests: the one the error names
/// when the failed request was larger than it, else three quarters of the failed request's
/// estimate (the server counts more tokens than the estimate did). `base_system`: the system
/// message before skills were appended to it.
pub async fn fit_request(
    llm: &LlmClient,
    request: &mut ChatRequest,
    base_system: &str,
    overflow: Option<&LlmError>,
) -> Fitting {
    let mut window = llm.context_window().await;
    let reported = overflow.map(LlmError::reported_context_tokens);
    if let Some(reported) = reported {
        let failed = fit::prompt_tokens(request, llm.system_instructions()) + u64::from(request.max_tokens);
        let failed = window.map_or(failed, |window| failed.min(u64::from(window.tokens)));
        let tokens = match reported {
            Some(server) if u64::from(server) < failed => server,
            _ => u32::try_from(failed * 3 / 4).unwrap_or(u32::MAX).max(1),
        };
        llm.learn_context_window(tokens);
        window = Some(ContextWindow { tokens, source: WindowSource::Overflow });
    }
    let unchanged = Fitting { llm: llm.clone(), report: None };
    let Some(window) = window else { return unchanged };
    let mut instructions = llm.system_instructions().map(str::to_owned);
    let fitted = fit::fit(request, &mut instructions, skills_offset(request, base_system), window.tokens);
    if !fitted.changed() && reported.is_none() {
        return unchanged;
    }
    tracing::debug!(
        window = window.tokens,
        prompt_tokens_before = fitted.prompt_tokens_before,
        prompt_tokens_after = fitted.prompt_tokens_after,
        retry = reported.is_some(),
        "model request fitted to the context window"
    );
    let llm = if fitted.cuts.instruction_bytes > 0 {
        llm.with_system_instructions(instructions.map(Arc::from))
    } else {
        llm.clone()
    };
    Fitting { llm, report: Some(FitReport { window, fitted, overflow: reported }) }
}

/// [`fit_request`] for a Run: what was cut is recorded and added to `totals`.
pub(super) async fn fit_for_run(
    llm: &LlmClient,
    record: &Recorder,
    totals: &mut ContextCuts,
    base_system: &str,
    request: &mut ChatRequest,
    overflow: Option<&LlmError>,
) -> Result<LlmClient, AuditError> {
    let fitting = fit_request(llm, request, base_system, overflow).await;
    if let Some(report) = &fitting.report {
        totals.add(&report.fitted, report.overflow.is_some());
        record.event(fitted_event(report)).await?;
    }
    Ok(fitting.llm)
}

/// The record of a fitted request: the window, the estimates before and after, what each
/// category lost (counts and bytes), and for a retry the window the server named.
pub fn fitted_event(report: &FitReport) -> NewEvent {
    let mut metadata: BTreeMap<String, Value> = match serde_json::to_value(report.fitted.cuts) {
        Ok(Value::Object(map)) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    let fitted = &report.fitted;
    metadata.extend([
        ("window".to_string(), json!(report.window.tokens)),
        ("window_source".to_string(), json!(report.window.source)),
        ("prompt_tokens_before".to_string(), json!(fitted.prompt_tokens_before)),
        ("prompt_tokens_after".to_string(), json!(fitted.prompt_tokens_after)),
        ("max_tokens_before".to_string(), json!(fitted.max_tokens_before)),
        ("max_tokens_after".to_string(), json!(fitted.max_tokens_after)),
    ]);
    if let Some(server_window) = report.overflow {
        metadata.insert("server_window".into(), json!(server_window));
    }
    let status = if report.overflow.is_some() { "retried" } else { "fitted" };
    NewEvent { kind: CONTEXT_FITTED.into(), status: Some(status.into()), metadata, ..Default::default() }
}

/// Where skill text starts in the request's system message: after `base_system`, when the
/// message is the Run's system message with skills appended.
fn skills_offset(request: &ChatRequest, base_system: &str) -> Option<usize> {
    let first = request.messages.first().filter(|m| m.role == Role::System)?.content.as_deref()?;
    (!base_system.is_empty() && first.len() > base_system.len() && first.starts_with(base_system))
        .then_some(base_system.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::fit::Cuts;
    use crate::llm::Message;

    #[test]
    fn the_event_carries_counts_and_sizes_never_content() {
        let report = FitReport {
            window: ContextWindow { tokens: 2048, source: WindowSource::Server },
            fitted: Fitted {
                window: 2048,
                prompt_tokens_before: 5000,
                prompt_tokens_after: 1500,
                max_tokens_before: 1024,
                max_tokens_after: 548,
                cuts: Cuts { runbook_documents: 4, runbook_bytes: 4000, tools: 2, ..Cuts::default() },
            },
            overflow: None,
        };
        let event = fitted_event(&report);
        assert_eq!((event.kind.as_str(), event.status.as_deref()), (CONTEXT_FITTED, Some("fitted")));
        assert_eq!(event.metadata["window"], 2048);
        assert_eq!(event.metadata["window_source"], "server");
        assert_eq!(event.metadata["runbook_documents"], 4);
        assert_eq!(event.metadata["prompt_tokens_after"], 1500);
        assert_eq!(event.metadata["max_tokens_after"], 548);
        assert!(!event.metadata.contains_key("server_window"));
        assert!(event.arguments.is_none() && event.result.is_none());
        let retry = fitted_event(&FitReport { overflow: Some(Some(3000)), ..report });
        assert_eq!((retry.status.as_deref(), &retry.metadata["server_window"]), (Some("retried"), &json!(3000)));
    }

    #[test]
    fn skill_text_starts_after_the_runs_base_system_message() {
        let request = |system: &str| ChatRequest::new(vec![Message::system(system), Message::user("q")]);
        assert_eq!(skills_offset(&request("base\n\nskills"), "base"), Some(4));
        assert_eq!(skills_offset(&request("base"), "base"), None, "no skills yet");
        assert_eq!(skills_offset(&request("You plan. base"), "base"), None, "another step's prompt");
        assert_eq!(skills_offset(&request("anything"), ""), None);
    }
}
