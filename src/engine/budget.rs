//! The host-owned Run budget: model calls, tool calls, tool-result bytes,
//! retrieved-context bytes, the size of each model request, output tokens and
//! wall time. Pure accounting over values; the caller supplies the clock.
//!
//! Unlike a cumulative context counter, the context dimension bounds each request
//! on its own (a Run's history is re-sent on every call); total prompt and output
//! tokens are tracked from what the model server reports.

use std::fmt;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Approximate bytes per token used to estimate a request's size before sending it.
pub const BYTES_PER_TOKEN: u64 = 4;

/// A budget dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    /// Wall time of the Run.
    WallTime,
    /// Model requests.
    ModelCalls,
    /// Tool executions (retrieval and the plan included).
    ToolCalls,
    /// Serialized tool-result bytes.
    ToolResultBytes,
    /// Bytes of automatically retrieved runbook context.
    RetrievedContextBytes,
    /// Estimated tokens of one model request.
    ContextTokens,
    /// Output tokens over the Run.
    OutputTokens,
}

impl Dimension {
    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::WallTime => "wall_time",
            Dimension::ModelCalls => "model_calls",
            Dimension::ToolCalls => "tool_calls",
            Dimension::ToolResultBytes => "tool_result_bytes",
            Dimension::RetrievedContextBytes => "retrieved_context_bytes",
            Dimension::ContextTokens => "context_tokens",
            Dimension::OutputTokens => "output_tokens",
        }
    }
}

/// Why a Run stopped: the dimension and the numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exhausted {
    /// Which limit.
    pub dimension: Dimension,
    /// Amount needed or used.
    pub needed: u64,
    /// The limit.
    pub limit: u64,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "run budget exhausted: {} (needed {}, limit {})", self.dimension.as_str(), self.needed, self.limit)
    }
}

/// The limits of one Run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BudgetLimits {
    /// Wall time in milliseconds.
    pub max_duration_ms: u64,
    /// Model requests.
    pub max_model_calls: u32,
    /// Tool executions.
    pub max_tool_calls: u32,
    /// Serialized tool-result bytes.
    pub max_tool_result_bytes: u64,
    /// Retrieved runbook bytes.
    pub max_retrieved_context_bytes: u64,
    /// Estimated tokens of a single model request.
    pub max_context_tokens: u64,
    /// Output tokens over the Run.
    pub max_output_tokens: u64,
}

/// What a Run used.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct BudgetUsage {
    /// Elapsed milliseconds.
    pub duration_ms: u64,
    /// Model requests made.
    pub model_calls: u32,
    /// Tool executions.
    pub tool_calls: u32,
    /// Serialized tool-result bytes.
    pub tool_result_bytes: u64,
    /// Retrieved runbook bytes.
    pub retrieved_context_bytes: u64,
    /// Largest estimated request size in tokens.
    pub max_request_tokens: u64,
    /// Prompt tokens reported by the model server, summed.
    pub prompt_tokens: u64,
    /// Output tokens charged (reported, or the full reservation when not reported).
    pub output_tokens: u64,
    /// Completion tokens reported by the model server, summed (what `output_tokens`
    /// charged beyond this are reservations of calls whose usage was not reported).
    pub completion_tokens: u64,
}

/// Token usage a model server reported for one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
}

/// Limits, usage and the open reservation of one Run.
#[derive(Clone, Debug)]
pub struct Budget {
    limits: BudgetLimits,
    usage: BudgetUsage,
    started: Instant,
    reserved_output: u64,
}

impl Budget {
    /// A fresh budget started at `now`.
    pub fn new(limits: BudgetLimits, now: Instant) -> Self {
        Self { limits, usage: BudgetUsage::default(), started: now, reserved_output: 0 }
    }

    /// The limits.
    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// Usage so far (duration measured at `now`).
    pub fn usage(&self, now: Instant) -> BudgetUsage {
        BudgetUsage { duration_ms: self.elapsed_ms(now), ..self.usage.clone() }
    }

    /// Time left before the wall-time limit.
    pub fn time_left(&self, now: Instant) -> Duration {
        Duration::from_millis(self.limits.max_duration_ms.saturating_sub(self.elapsed_ms(now)))
    }

    /// Model calls left.
    pub fn model_calls_left(&self) -> u32 {
        self.limits.max_model_calls.saturating_sub(self.usage.model_calls)
    }

    /// Tool calls left.
    pub fn tool_calls_left(&self) -> u32 {
        self.limits.max_tool_calls.saturating_sub(self.usage.tool_calls)
    }

    fn elapsed_ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.started).as_millis()).unwrap_or(u64::MAX)
    }

    /// Fails when the wall time is spent.
    pub fn check_time(&self, now: Instant) -> Result<(), Exhausted> {
        let elapsed = self.elapsed_ms(now);
        if elapsed >= self.limits.max_duration_ms {
            return Err(Exhausted {
                dimension: Dimension::WallTime,
                needed: elapsed,
                limit: self.limits.max_duration_ms,
            });
        }
        Ok(())
    }

    /// The exhaustion to report when an operation outlived the wall-time limit.
    pub fn wall_time_exhausted(&self) -> Exhausted {
        self.exhausted(Dimension::WallTime, self.limits.max_duration_ms)
    }

    /// Estimated tokens of a request of `bytes` serialized bytes.
    pub fn estimate_tokens(bytes: usize) -> u64 {
        (bytes as u64).div_ceil(BYTES_PER_TOKEN)
    }

    /// Charges a model request before it is sent. Returns the output-token allowance
    /// to send (the requested amount, reduced to what is left).
    pub fn begin_model_call(
        &mut self,
        request_bytes: usize,
        requested_output: u32,
        now: Instant,
    ) -> Result<u32, Exhausted> {
        self.check_time(now)?;
        if self.usage.model_calls >= self.limits.max_model_calls {
            return Err(self.exhausted(Dimension::ModelCalls, u64::from(self.usage.model_calls) + 1));
        }
        let tokens = Self::estimate_tokens(request_bytes);
        if tokens > self.limits.max_context_tokens {
            return Err(self.exhausted(Dimension::ContextTokens, tokens));
        }
        let left = self.limits.max_output_tokens.saturating_sub(self.usage.output_tokens);
        if left == 0 {
            return Err(self.exhausted(Dimension::OutputTokens, self.usage.output_tokens + 1));
        }
        let allowed = u64::from(requested_output).min(left);
        self.usage.model_calls += 1;
        self.usage.max_request_tokens = self.usage.max_request_tokens.max(tokens);
        self.reserved_output = allowed;
        Ok(u32::try_from(allowed).unwrap_or(u32::MAX))
    }

    /// Settles the reservation with what the server reported (the whole reservation
    /// when it reported nothing).
    pub fn finish_model_call(&mut self, reported: Option<ReportedUsage>) -> Result<(), Exhausted> {
        let reserved = std::mem::take(&mut self.reserved_output);
        let (prompt, output) = match reported {
            Some(usage) => (usage.prompt_tokens, usage.completion_tokens),
            None => (0, reserved),
        };
        self.usage.prompt_tokens += prompt;
        self.usage.completion_tokens += reported.map_or(0, |usage| usage.completion_tokens);
        self.usage.output_tokens += output;
        if output > reserved || self.usage.output_tokens > self.limits.max_output_tokens {
            return Err(self.exhausted(Dimension::OutputTokens, self.usage.output_tokens));
        }
        Ok(())
    }

    /// Charges one tool execution before it runs.
    pub fn begin_tool_call(&mut self, now: Instant) -> Result<(), Exhausted> {
        self.check_time(now)?;
        if self.usage.tool_calls >= self.limits.max_tool_calls {
            return Err(self.exhausted(Dimension::ToolCalls, u64::from(self.usage.tool_calls) + 1));
        }
        self.usage.tool_calls += 1;
        Ok(())
    }

    /// Charges a tool result's serialized size.
    pub fn record_tool_result(&mut self, bytes: usize) -> Result<(), Exhausted> {
        self.usage.tool_result_bytes += bytes as u64;
        if self.usage.tool_result_bytes > self.limits.max_tool_result_bytes {
            return Err(self.exhausted(Dimension::ToolResultBytes, self.usage.tool_result_bytes));
        }
        Ok(())
    }

    /// Charges automatically retrieved context.
    pub fn record_retrieved(&mut self, bytes: usize) -> Result<(), Exhausted> {
        self.usage.retrieved_context_bytes += bytes as u64;
        if self.usage.retrieved_context_bytes > self.limits.max_retrieved_context_bytes {
            return Err(self.exhausted(Dimension::RetrievedContextBytes, self.usage.retrieved_context_bytes));
        }
        Ok(())
    }

    fn exhausted(&self, dimension: Dimension, needed: u64) -> Exhausted {
        let limit = match dimension {
            Dimension::WallTime => self.limits.max_duration_ms,
            Dimension::ModelCalls => u64::from(self.limits.max_model_calls),
            Dimension::ToolCalls => u64::from(self.limits.max_tool_calls),
            Dimension::ToolResultBytes => self.limits.max_tool_result_bytes,
            Dimension::RetrievedContextBytes => self.limits.max_retrieved_context_bytes,
            Dimension::ContextTokens => self.limits.max_context_tokens,
            Dimension::OutputTokens => self.limits.max_output_tokens,
        };
        Exhausted { dimension, needed, limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> BudgetLimits {
        BudgetLimits {
            max_duration_ms: 1000,
            max_model_calls: 3,
            max_tool_calls: 2,
            max_tool_result_bytes: 100,
            max_retrieved_context_bytes: 40,
            max_context_tokens: 100,
            max_output_tokens: 10,
        }
    }

    #[test]
    fn output_tokens_are_reserved_then_settled() {
        let now = Instant::now();
        let mut budget = Budget::new(limits(), now);
        assert_eq!(budget.begin_model_call(40, 8, now), Ok(8));
        budget.finish_model_call(Some(ReportedUsage { prompt_tokens: 10, completion_tokens: 4 })).unwrap();
        // 6 left: the allowance shrinks to what remains.
        assert_eq!(budget.begin_model_call(40, 8, now), Ok(6));
        // No usage reported: the whole reservation is charged.
        budget.finish_model_call(None).unwrap();
        let error = budget.begin_model_call(40, 8, now).unwrap_err();
        assert_eq!(error.dimension, Dimension::OutputTokens);
        assert_eq!(budget.usage(now).output_tokens, 10);
        assert_eq!(budget.usage(now).prompt_tokens, 10);
        assert_eq!(budget.usage(now).completion_tokens, 4, "only what the server reported");
    }

    #[test]
    fn reporting_more_than_reserved_exhausts() {
        let now = Instant::now();
        let mut budget = Budget::new(limits(), now);
        budget.begin_model_call(10, 2, now).unwrap();
        let error =
            budget.finish_model_call(Some(ReportedUsage { prompt_tokens: 1, completion_tokens: 3 })).unwrap_err();
        assert_eq!(error.dimension, Dimension::OutputTokens);
    }

    #[test]
    fn model_calls_are_capped() {
        let now = Instant::now();
        let mut budget = Budget::new(BudgetLimits { max_output_tokens: 1000, ..limits() }, now);
        for _ in 0..3 {
            budget.begin_model_call(10, 1, now).unwrap();
            budget.finish_model_call(None).unwrap();
        }
        let error = budget.begin_model_call(10, 1, now).unwrap_err();
        assert_eq!(error, Exhausted { dimension: Dimension::ModelCalls, needed: 4, limit: 3 });
        assert_eq!(error.to_string(), "run budget exhausted: model_calls (needed 4, limit 3)");
    }

    #[test]
    fn each_request_is_bounded_on_its_own() {
        let now = Instant::now();
        let mut budget = Budget::new(BudgetLimits { max_output_tokens: 1000, ..limits() }, now);
        // 400 bytes = 100 tokens: allowed, twice (no cumulative re-counting).
        budget.begin_model_call(400, 1, now).unwrap();
        budget.finish_model_call(None).unwrap();
        budget.begin_model_call(400, 1, now).unwrap();
        budget.finish_model_call(None).unwrap();
        let error = budget.begin_model_call(401, 1, now).unwrap_err();
        assert_eq!(error.dimension, Dimension::ContextTokens);
        assert_eq!(budget.usage(now).max_request_tokens, 100);
    }

    #[test]
    fn tool_calls_result_bytes_and_retrieval_are_capped() {
        let now = Instant::now();
        let mut budget = Budget::new(limits(), now);
        budget.begin_tool_call(now).unwrap();
        budget.begin_tool_call(now).unwrap();
        assert_eq!(budget.tool_calls_left(), 0);
        assert_eq!(budget.begin_tool_call(now).unwrap_err().dimension, Dimension::ToolCalls);
        budget.record_tool_result(100).unwrap();
        assert_eq!(budget.record_tool_result(1).unwrap_err().dimension, Dimension::ToolResultBytes);
        budget.record_retrieved(40).unwrap();
        assert_eq!(budget.record_retrieved(1).unwrap_err().dimension, Dimension::RetrievedContextBytes);
    }

    #[test]
    fn wall_time_is_enforced() {
        let now = Instant::now();
        let mut budget = Budget::new(limits(), now);
        let later = now + Duration::from_millis(1000);
        assert_eq!(budget.begin_tool_call(later).unwrap_err().dimension, Dimension::WallTime);
        assert_eq!(budget.begin_model_call(1, 1, later).unwrap_err().dimension, Dimension::WallTime);
        assert_eq!(budget.time_left(now + Duration::from_millis(400)), Duration::from_millis(600));
    }
}
