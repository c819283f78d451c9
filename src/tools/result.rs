use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A tool call as the model sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider call id, echoed in the result.
    pub id: String,
    /// Host tool name or its OpenAI alias.
    pub name: String,
    /// Raw JSON text of the arguments; empty means `{}`.
    pub arguments: String,
}

/// Why a tool call did not produce output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed id, name or arguments.
    InvalidCall,
    /// No registered tool has this name or alias.
    UnknownTool,
    /// The policy of this Run does not allow the tool.
    PermissionDenied,
    /// Arguments do not match the tool's input schema.
    InvalidArguments,
    /// The handler exceeded the tool's timeout.
    Timeout,
    /// The handler failed.
    ToolError,
    /// The handler's output exceeded the result limit.
    ResultTooLarge,
    /// The handler's output was empty or not JSON.
    InvalidResult,
}

impl ErrorCode {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidCall => "invalid_call",
            Self::UnknownTool => "unknown_tool",
            Self::PermissionDenied => "permission_denied",
            Self::InvalidArguments => "invalid_arguments",
            Self::Timeout => "timeout",
            Self::ToolError => "tool_error",
            Self::ResultTooLarge => "result_too_large",
            Self::InvalidResult => "invalid_result",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call's code and a message for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolError {
    pub code: ErrorCode,
    pub message: String,
}

/// Outcome of one tool call; exactly one of `output` and `error` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolResult {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// Wall time of the whole `execute`; not serialized.
    #[serde(skip)]
    pub duration: Duration,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(id: impl Into<String>, name: impl Into<String>, output: serde_json::Value) -> Self {
        Self { id: id.into(), name: name.into(), output: Some(output), error: None, duration: Duration::ZERO }
    }

    /// A failed result.
    pub fn err(id: impl Into<String>, name: impl Into<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            output: None,
            error: Some(ToolError { code, message: message.into() }),
            duration: Duration::ZERO,
        }
    }

    /// Whether the call produced output.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// `"ok"` or the error code.
    pub fn status(&self) -> &str {
        self.error.as_ref().map_or("ok", |e| e.code.as_str())
    }

    /// `{"id","name","output"?,"error"?}` as JSON text.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            serde_json::json!({
                "id": self.id,
                "name": self.name,
                "error": { "code": ErrorCode::InvalidResult, "message": format!("result not serializable: {e}") },
            })
            .to_string()
        })
    }
}
