//! The runbook retrieval port (implemented by the knowledge bases) and how a
//! retrieval appears in a Run: automatic for the latest user message, as if the
//! model had called the read-only `knowledge.search` tool, and behind that tool.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::llm::Message;
use crate::tenancy::Scope;
use crate::tools::{ErrorCode, ToolError, ToolResult};

/// Host name of the runbook search tool.
pub const SEARCH_TOOL: &str = "knowledge.search";
/// Call id of the automatic retrieval at the start of a Run.
pub const PREFETCH_CALL_ID: &str = "call_akritas_rag_prefetch";

/// Runbook retrieval (implemented by the knowledge bases): automatic for the
/// latest user message, and behind the read-only `knowledge.search` tool.
/// A Run searches only the knowledge bases its scope sees.
pub trait Retriever: Send + Sync {
    /// Whether anything can be searched now by a Run of `scope`.
    fn is_available(&self, scope: &Scope) -> bool;
    /// Searches the knowledge bases `scope` sees for `query`; the output is what
    /// the model sees.
    fn search(&self, scope: &Scope, query: &str, top_k: usize)
    -> BoxFuture<'static, Result<Retrieved, RetrievalError>>;
}

/// What a retrieval found.
#[derive(Clone, Debug)]
pub struct Retrieved {
    /// Tool output shown to the model.
    pub output: Value,
    /// `(document id, title)` of each hit, for the audit.
    pub documents: Vec<(String, String)>,
    /// Version (content hash) of every knowledge base searched, by name.
    pub versions: BTreeMap<String, String>,
}

/// Why a search failed. The text is what the model sees as the tool error, so it
/// says what failed, never a credential.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RetrievalError(Box<dyn std::error::Error + Send + Sync>);

impl RetrievalError {
    /// Wraps the implementation's error (or its text).
    pub fn new(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self(error.into())
    }
}

/// The automatic retrieval as the Run records it.
#[derive(Clone, Debug, PartialEq)]
pub struct Prefetch {
    /// The result, as if `knowledge.search` had been called.
    pub result: ToolResult,
    /// `(document id, title)` of each hit.
    pub documents: Vec<(String, String)>,
    /// `name@version` of every knowledge base searched, comma-separated.
    pub versions: String,
}

impl Prefetch {
    /// A search outcome as a tool result; a failed search is a failed call, not
    /// the end of the Run.
    pub fn new(found: Result<Retrieved, RetrievalError>, duration: Duration) -> Self {
        let result = |output, error| ToolResult {
            id: PREFETCH_CALL_ID.into(),
            name: SEARCH_TOOL.into(),
            output,
            error,
            duration,
        };
        match found {
            Ok(found) => Prefetch {
                result: result(Some(found.output), None),
                documents: found.documents,
                versions: versions_text(&found.versions),
            },
            Err(error) => Prefetch {
                result: result(None, Some(ToolError { code: ErrorCode::ToolError, message: error.to_string() })),
                documents: Vec::new(),
                versions: String::new(),
            },
        }
    }

    /// The arguments of a search of `query`, as the conversation shows them.
    pub fn arguments(query: &str) -> Value {
        json!({ "query": query })
    }

    /// The arguments the audit records for a search of `query`: the query is the
    /// user's message, so only its SHA-256 and its length in characters.
    pub fn recorded_arguments(query: &str) -> Value {
        let sha256 = hex::encode(Sha256::digest(query.as_bytes()));
        json!({ "query_sha256": sha256, "query_chars": query.chars().count() })
    }

    /// The assistant call and the tool answer that put the retrieval into the
    /// conversation, as if the model had searched.
    pub fn messages(&self, arguments: &Value) -> [Message; 2] {
        [
            Message::assistant_tool_calls(vec![crate::llm::ToolCall::function(
                PREFETCH_CALL_ID,
                SEARCH_TOOL,
                arguments.to_string(),
            )]),
            Message::tool(PREFETCH_CALL_ID.to_string(), self.result.to_json_string()),
        ]
    }
}

/// `name@version,…` in name order.
fn versions_text(versions: &BTreeMap<String, String>) -> String {
    versions.iter().map(|(name, sha)| format!("{name}@{sha}")).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found() -> Retrieved {
        Retrieved {
            output: json!({"results": [{"document": "pg.md"}]}),
            documents: vec![("pg.md".into(), "PostgreSQL".into())],
            versions: BTreeMap::from([("b".to_string(), "222".to_string()), ("a".to_string(), "111".to_string())]),
        }
    }

    #[test]
    fn a_found_search_becomes_a_successful_prefetch_call() {
        let prefetch = Prefetch::new(Ok(found()), Duration::from_millis(3));
        assert_eq!(prefetch.result.id, PREFETCH_CALL_ID);
        assert_eq!(prefetch.result.name, SEARCH_TOOL);
        assert_eq!(prefetch.result.output, Some(json!({"results": [{"document": "pg.md"}]})));
        assert!(prefetch.result.is_ok());
        assert_eq!(prefetch.documents, [("pg.md".to_string(), "PostgreSQL".to_string())]);
        assert_eq!(prefetch.versions, "a@111,b@222", "knowledge bases in name order");
    }

    #[test]
    fn the_recorded_search_keeps_the_query_hash_and_length_only() {
        let recorded = Prefetch::recorded_arguments("disk fülл");
        assert_eq!(
            recorded,
            json!({"query_sha256": hex::encode(Sha256::digest("disk fülл".as_bytes())), "query_chars": 9})
        );
        assert!(!recorded.to_string().contains("disk"));
    }

    #[test]
    fn a_failed_search_is_a_failed_call_with_the_reason() {
        let prefetch = Prefetch::new(Err(RetrievalError::new("index unavailable")), Duration::ZERO);
        let error = prefetch.result.error.as_ref().expect("an error");
        assert_eq!(error.code, ErrorCode::ToolError);
        assert_eq!(error.message, "index unavailable");
        assert_eq!(prefetch.result.output, None);
        assert!(prefetch.documents.is_empty() && prefetch.versions.is_empty());
    }

    #[test]
    fn the_prefetch_enters_the_conversation_as_a_search_call_and_its_answer() {
        let prefetch = Prefetch::new(Ok(found()), Duration::ZERO);
        let arguments = Prefetch::arguments("disk full");
        let expected_call = crate::llm::ToolCall::function(PREFETCH_CALL_ID, SEARCH_TOOL, r#"{"query":"disk full"}"#);
        assert_eq!(
            prefetch.messages(&arguments),
            [
                Message::assistant_tool_calls(vec![expected_call]),
                Message::tool(PREFETCH_CALL_ID, prefetch.result.to_json_string()),
            ]
        );
    }
}
