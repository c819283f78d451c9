//! How far a Run got through the structured protocol: whether the host accepted a
//! plan (and so executed its checks), and whether a structured result reached the
//! host's validation. Evals count a Run as protocol-complete from this, apart from
//! whether its answer was right.

use serde::Serialize;

use crate::engine::plan::PLAN_TOOL;
use crate::engine::request::{Activity, FailedRun, RunError, RunOutcome, StructureError};
use crate::investigation::InvestigationError;

/// How the plan step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStep {
    /// The host accepted the plan and executed its checks.
    Accepted,
    /// A plan was submitted and refused (not JSON, not the plan's shape, or a check
    /// the Run may not make).
    Rejected,
    /// No plan was submitted (prose or other calls instead), or the Run stopped first.
    Missing,
}

/// How the result step of an investigation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultStep {
    /// The host accepted the result.
    Accepted,
    /// The result parsed and the host refused it for its content (unverified
    /// evidence, a status its evidence does not back, …).
    Rejected,
    /// No result could be parsed: no single submission, not JSON, or not the result's shape.
    Unparsed,
    /// The Run stopped before the result step (budget, model server, no answer).
    NotReached,
}

/// The structured steps of one Run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Protocol {
    /// The plan.
    pub plan: PlanStep,
    /// Why the host refused the last plan, as the audit records it (no text the model wrote).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan_refused: Option<String>,
    /// The result, when the Run was asked for one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultStep>,
}

impl Protocol {
    /// The Run ended with a plan the host executed and, when a result was asked
    /// for, one that reached the host's validation (accepted or refused for its
    /// content), rather than failing because nothing could be parsed.
    pub fn complete(&self) -> bool {
        self.plan == PlanStep::Accepted && !matches!(self.result, Some(ResultStep::Unparsed | ResultStep::NotReached))
    }
}

/// The protocol steps of a finished Run; `investigate` says whether it was asked for a result.
pub fn protocol(run: &Result<RunOutcome, FailedRun>, investigate: bool) -> Protocol {
    let (activity, result) = match run {
        Ok(outcome) => {
            let result = if outcome.investigation.is_some() { ResultStep::Accepted } else { ResultStep::NotReached };
            (&outcome.activity, result)
        }
        Err(failed) => (&failed.activity, result_of_error(&failed.error)),
    };
    let (plan, plan_refused) = plan_of(activity);
    Protocol { plan, plan_refused, result: investigate.then_some(result) }
}

/// The last plan call among the Run's calls (a refused plan may be repaired once): `ok` when
/// the host accepted it; else why it was refused.
fn plan_of(activity: &[Activity]) -> (PlanStep, Option<String>) {
    match activity.iter().rev().find(|a| a.name == PLAN_TOOL) {
        Some(call) if call.result.is_ok() => (PlanStep::Accepted, None),
        Some(call) => (PlanStep::Rejected, call.result.error.as_ref().map(|error| error.message.clone())),
        None => (PlanStep::Missing, None),
    }
}

fn result_of_error(error: &RunError) -> ResultStep {
    let RunError::Structure { error, .. } = error else { return ResultStep::NotReached };
    match error {
        StructureError::NotOneSubmission { .. }
        | StructureError::Invalid(InvestigationError::Json(_) | InvestigationError::Schema(_)) => ResultStep::Unparsed,
        StructureError::Invalid(_) => ResultStep::Rejected,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::engine::budget::{BudgetLimits, BudgetUsage};
    use crate::llm::LlmError;
    use crate::tools::{ErrorCode, ToolError, ToolResult};

    fn call(name: &str, error: Option<ErrorCode>) -> Activity {
        let error = error.map(|code| ToolError { code, message: "refused".into() });
        Activity {
            name: name.into(),
            id: "call-1".into(),
            status: "ok".into(),
            duration_ms: 0,
            arguments: json!({}),
            result: ToolResult {
                id: "call-1".into(),
                name: name.into(),
                output: error.is_none().then(|| json!({})),
                error,
                duration: Duration::ZERO,
            },
        }
    }

    fn outcome(activity: Vec<Activity>, investigation: bool) -> RunOutcome {
        let result = json!({"finding_status": "inconclusive", "actionability": "requires_human",
                            "confidence": "low", "summary": "s", "evidence": [], "production_writes": 0});
        RunOutcome {
            run_id: None,
            model: "m".into(),
            answer: "a".into(),
            skills: Vec::new(),
            activity,
            gaps: Vec::new(),
            plan_error: None,
            limits: BudgetLimits {
                max_duration_ms: 1,
                max_model_calls: 1,
                max_tool_calls: 1,
                max_tool_result_bytes: 1,
                max_retrieved_context_bytes: 1,
                max_context_tokens: 1,
                max_output_tokens: 1,
            },
            usage: BudgetUsage::default(),
            catalog_version: 1,
            investigation: investigation.then(|| serde_json::from_value(result).unwrap()),
            model_protocol: Some("json_schema".into()),
            model_protocol_fallbacks: Vec::new(),
            context_cuts: Default::default(),
        }
    }

    fn failed(activity: Vec<Activity>, error: RunError) -> FailedRun {
        FailedRun { error, usage: None, activity, model: None, model_protocol: None }
    }

    fn structure(error: StructureError) -> RunError {
        RunError::Structure { run_id: None, error }
    }

    fn invalid(arguments: &str) -> StructureError {
        StructureError::Invalid(crate::investigation::validate(arguments, &Default::default()).unwrap_err())
    }

    #[test]
    fn a_plan_counts_only_when_the_host_accepted_it() {
        let plan = |error| vec![call(PLAN_TOOL, error), call("inventory.host", None)];
        let accepted = protocol(&Ok(outcome(plan(None), false)), false);
        assert_eq!(accepted, Protocol { plan: PlanStep::Accepted, plan_refused: None, result: None });
        assert!(accepted.complete(), "a chat needs no result");
        let rejected = protocol(&Ok(outcome(plan(Some(ErrorCode::InvalidArguments)), false)), false);
        assert_eq!((rejected.plan, rejected.complete()), (PlanStep::Rejected, false));
        assert_eq!(rejected.plan_refused.as_deref(), Some("refused"), "the refusal says why");
        let none = protocol(&Ok(outcome(vec![call("inventory.host", None)], false)), false);
        assert_eq!((none.plan, none.complete()), (PlanStep::Missing, false));
    }

    #[test]
    fn a_result_refused_for_its_content_completes_the_protocol_and_an_unparsed_one_does_not() {
        let plan = || vec![call(PLAN_TOOL, None)];
        let ended = |error: RunError, investigate| protocol(&Err(failed(plan(), error)), investigate);
        let accepted = protocol(&Ok(outcome(plan(), true)), true);
        assert_eq!((accepted.result, accepted.complete()), (Some(ResultStep::Accepted), true));

        let unverified = r#"{"finding_status": "confirmed", "actionability": "requires_human", "confidence": "high",
                             "summary": "s", "evidence": ["tool-call:call-9 \"x\""], "production_writes": 0}"#;
        let content = ended(structure(invalid(unverified)), true);
        assert_eq!((content.result, content.complete()), (Some(ResultStep::Rejected), true));

        for error in [
            StructureError::NotOneSubmission { calls: 0, submitted: 0 },
            invalid("I think the pod is out of memory."),
            invalid(r#"{"summary": "no status"}"#),
        ] {
            let unparsed = ended(structure(error), true);
            assert_eq!((unparsed.result, unparsed.complete()), (Some(ResultStep::Unparsed), false));
        }

        let refused = LlmError::Http { status: 400, excerpt: "model does not support tools".into() };
        let stopped = ended(RunError::Upstream { run_id: None, error: refused }, true);
        assert_eq!((stopped.result, stopped.complete()), (Some(ResultStep::NotReached), false));
        assert_eq!(ended(structure(invalid(unverified)), false).result, None);
    }
}
