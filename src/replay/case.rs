//! The case: one Run as a document a replay (and a person) can read: the input, the
//! catalog it ran with (skills with hashes, tool schemas), every tool call with its
//! recorded result, and what came out. Exported from the audit or written by hand,
//! as JSON or YAML.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::conversation::{self, Speaker, Turn};
use crate::engine::record::input_sha256;
use crate::investigation::{Actionability, FindingStatus, InvestigationResult};
use crate::tools::ToolError;

/// Version of the case format this build reads and writes (it also reads an exported
/// version 1, see [`Case::parse`]).
pub const CASE_VERSION: u32 = 2;
/// Largest case document.
pub const MAX_CASE_BYTES: usize = 8 * 1024 * 1024;
/// Most recorded calls in a case.
pub const MAX_CALLS: usize = 512;
/// Most tools in a case.
pub const MAX_TOOLS: usize = 512;
/// Most skills in a case.
pub const MAX_SKILLS: usize = 128;

/// A replayable Run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Format version (2).
    pub version: u32,
    /// A name for reports (an export uses the Run id).
    pub name: String,
    /// One line saying what the case is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The split an eval reports it in (`train`, `held_out`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<Split>,
    /// Where the case came from (absent in a hand-written case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// What the Run was asked.
    pub input: Input,
    /// Skills of the catalog the Run could use.
    #[serde(default)]
    pub skills: Vec<CaseSkill>,
    /// Tools of the catalog (a replay offers a Run only those marked `read_only`).
    #[serde(default)]
    pub tools: Vec<CaseTool>,
    /// Every tool call the Run made through its tools, in order, with its result.
    #[serde(default)]
    pub calls: Vec<RecordedCall>,
    /// What a replay is expected to reproduce.
    #[serde(default)]
    pub expected: Expected,
}

/// The Run a case was exported from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// Run id.
    pub run_id: String,
    /// Namespace of the Run.
    pub namespace: String,
    /// What started it (`chat`, `alert:<provider>`, …).
    pub source: String,
    /// Upstream model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Catalog version the Run pinned.
    pub catalog_version: u64,
    /// Catalog version when exported (skills and tools are read from it).
    pub exported_catalog_version: u64,
    /// RFC 3339 start.
    pub started_at: String,
    /// SHA-256 of the SYSTEM.md the Run's model requests carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_sha256: Option<String>,
}

/// The input of a Run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The conversation; empty in an export (the audit keeps no prompt) until the
    /// question is supplied.
    #[serde(default)]
    pub messages: Vec<CaseMessage>,
    /// Facts for skill selection (`service: postgresql`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
    /// SHA-256 the Run recorded of its messages and context; supplied input must match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The messages and context are the input the audit kept with secrets redacted
    /// (`audit_input_namespaces`), so they no longer hash to `sha256`: they replay as they
    /// are, and the original supplied with `--question` replaces them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// Whether the Run ended with a structured investigation result (alert Runs).
    #[serde(default)]
    pub investigate: bool,
    /// The time the case's Run judges dates against (RFC 3339, `2026-12-01T12:00:00Z`): when
    /// its tools return dates (a certificate's `notAfter`) that a skill compares with `now`.
    /// Default: the `origin.started_at` of an exported case, else the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

/// One message of the input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text, handed to the replayed Run as is.
    pub content: String,
}

/// A skill of the case's catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseSkill {
    /// Skill name.
    pub name: String,
    /// SHA-256 of the content.
    pub sha256: String,
    /// One-line description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Facts that select it.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub selectors: Vec<String>,
    /// The guidance; absent when it changed since the Run (only the hash is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A tool of the case's catalog.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseTool {
    /// Host tool name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
    /// Whether the tool only reads; any other tool is never offered to a replayed Run.
    #[serde(default)]
    pub read_only: bool,
}

/// Longest split name.
pub const MAX_SPLIT_CHARS: usize = 32;

/// The split of a case: 1 to 32 lower-case letters, digits, `_` or `-`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Split(String);

impl Split {
    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Split {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-';
        if name.is_empty() || name.chars().count() > MAX_SPLIT_CHARS || !name.chars().all(allowed) {
            return Err(format!(
                "split {:?} must be 1 to {MAX_SPLIT_CHARS} lower-case letters, digits, `_` or `-` (e.g. train, held_out)",
                crate::text::truncate_chars(&name, 40, crate::text::ELLIPSIS)
            ));
        }
        Ok(Self(name))
    }
}

impl From<Split> for String {
    fn from(split: Split) -> String {
        split.0
    }
}

/// One recorded tool call: arguments and the result the tool gave.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// Host tool name.
    pub tool: String,
    /// Arguments as the host passed them (`null`: the host refused the call before the tool ran).
    #[serde(default)]
    pub arguments: Value,
    /// The tool's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Or its error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

/// What a replay is compared with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expected {
    /// `succeeded` or `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Stable failure code of a failed Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Skills the Run selected, with the version (hash) that ran.
    #[serde(default)]
    pub skills: Vec<SkillVersion>,
    /// The structured result of an alert investigation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub investigation: Option<InvestigationResult>,
    /// Eval checks (`akritas eval`): tool calls that must happen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_tools: Vec<RequiredTool>,
    /// Eval checks: tools that must not be called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forbidden_tools: Vec<String>,
    /// Eval checks: the result's finding status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_status: Option<FindingStatus>,
    /// Eval checks: the result's actionability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actionability: Option<Actionability>,
    /// Eval checks: values that must appear as evidence quotes or in the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_facts: Vec<String>,
    /// Eval checks: most tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// Eval checks: most model tokens (prompt and output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_tokens: Option<u64>,
}

/// A tool call an eval requires: the name, and optionally arguments the call must include.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequiredTool {
    /// Host tool name.
    pub tool: String,
    /// Argument subset the call must carry (absent: any arguments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Map<String, Value>>,
}

/// A skill and the version of it that ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillVersion {
    /// Skill name.
    pub name: String,
    /// SHA-256 of the content.
    pub sha256: String,
}

/// Sources of Runs the change pipeline made: a replay would answer them as a chat.
pub(super) const CHANGE_SOURCES: [&str; 2] = ["change_preview", "change_apply"];

/// What is wrong with a case; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// Exported from a Run the change pipeline made (by a version that still exported them).
    #[error(
        "the case was exported from a {0} Run, which a replay cannot reproduce (it replays chats and \
         investigations); prepare the change again with `akritas change simulate`"
    )]
    ChangeRun(String),
    /// Too large.
    #[error("the case is {0} bytes; at most {MAX_CASE_BYTES} are allowed")]
    TooLarge(usize),
    /// Not JSON or YAML of the case format.
    #[error("the case does not parse: {0}")]
    Parse(String),
    /// Another format version.
    #[error("case version {0} is not supported; this build reads version {CASE_VERSION}")]
    Version(u32),
    /// A hand-written version 1 case, which does not say which tools only read.
    #[error(
        "case version 1 does not say which tools are read-only: set `read_only: true` on each read-only tool and `version: 2`"
    )]
    UnmarkedTools,
    /// Over a count bound.
    #[error("the case has {count} {what}; at most {limit} are allowed")]
    TooMany {
        /// `calls`, `tools` or `skills`: the list over its bound.
        what: &'static str,
        /// How many.
        count: usize,
        /// The bound.
        limit: usize,
    },
    /// A message role that is not `system`, `user` or `assistant`.
    #[error("input.messages[{0}].role must be system, user or assistant")]
    Role(usize),
    /// `input.at` is not a time.
    #[error("input.at {0:?} is not an RFC 3339 time (e.g. 2026-12-01T12:00:00Z)")]
    At(String),
    /// No question to replay.
    #[error(
        "input.messages is empty: the audit keeps only a hash of a Run's input; supply the question \
         (`akritas run export ID --question TEXT`) or write input.messages"
    )]
    NoInput,
    /// The conversation breaks a rule.
    #[error("input.messages: {0}")]
    Conversation(#[from] conversation::ConversationError),
    /// The supplied input is not what the Run was asked.
    #[error(
        "the input does not match the Run's recorded input hash {recorded} (got {got}); check the question and context"
    )]
    InputMismatch {
        /// Recorded hash.
        recorded: String,
        /// Hash of the supplied input.
        got: String,
    },
}

/// The text of a case file, bounded by [`MAX_CASE_BYTES`]; errors name the file.
pub fn read_text(path: &std::path::Path) -> Result<String, String> {
    let limit = MAX_CASE_BYTES as u64;
    let size = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?.len();
    if size > limit {
        return Err(format!("{} is {size} bytes; a case has at most {limit}", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

impl Case {
    /// Reads a case from JSON or YAML text and checks its bounds; an exported version 1
    /// case (it has an `origin`) reads as version 2 with every tool read-only.
    pub fn parse(text: &str) -> Result<Case, CaseError> {
        if text.len() > MAX_CASE_BYTES {
            return Err(CaseError::TooLarge(text.len()));
        }
        let mut case: Case = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| CaseError::Parse(e.to_string()))?
        } else {
            serde_saphyr::from_str(text).map_err(|e| CaseError::Parse(e.to_string()))?
        };
        // A version 1 export lists the catalog of a Run, which holds read-only tools only.
        if case.version == 1 && case.origin.is_some() {
            case.version = CASE_VERSION;
            case.tools.iter_mut().for_each(|tool| tool.read_only = true);
        }
        case.check()?;
        Ok(case)
    }

    /// Checks the version and the bounds.
    pub fn check(&self) -> Result<(), CaseError> {
        match self.version {
            CASE_VERSION => {}
            1 => return Err(CaseError::UnmarkedTools),
            other => return Err(CaseError::Version(other)),
        }
        if let Some(origin) = self.origin.as_ref().filter(|o| CHANGE_SOURCES.contains(&o.source.as_str())) {
            return Err(CaseError::ChangeRun(origin.source.clone()));
        }
        for (what, count, limit) in [
            ("calls", self.calls.len(), MAX_CALLS),
            ("tools", self.tools.len(), MAX_TOOLS),
            ("skills", self.skills.len(), MAX_SKILLS),
        ] {
            if count > limit {
                return Err(CaseError::TooMany { what, count, limit });
            }
        }
        if let Some(at) = &self.input.at
            && at.parse::<jiff::Timestamp>().is_err()
        {
            return Err(CaseError::At(crate::text::truncate_chars(at, 40, crate::text::ELLIPSIS)));
        }
        self.turns().map(|_| ())
    }

    /// The time the case's Run judges dates against: `input.at`, else the exported Run's
    /// start, else `None` (the clock).
    pub fn at(&self) -> Option<jiff::Timestamp> {
        let at = self.input.at.as_deref().or(self.origin.as_ref().map(|o| o.started_at.as_str()))?;
        at.parse().ok()
    }

    /// The input as a conversation the engine accepts (empty when none was supplied).
    pub fn turns(&self) -> Result<Vec<Turn>, CaseError> {
        self.input
            .messages
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let role = match m.role.as_str() {
                    "system" => Speaker::System,
                    "user" => Speaker::User,
                    "assistant" => Speaker::Assistant,
                    _ => return Err(CaseError::Role(i)),
                };
                Ok(Turn { role, content: m.content.clone() })
            })
            .collect()
    }

    /// Supplies the question of an exported case (a single user message and the
    /// context facts), checked against the hash the Run recorded.
    pub fn supply_input(&mut self, question: &str, context: BTreeMap<String, String>) -> Result<(), CaseError> {
        self.supply_turns(vec![Turn { role: Speaker::User, content: question.to_string() }], context)
    }

    /// [`Case::supply_input`] for a whole conversation (an alert Run's input rebuilt
    /// from the alert store).
    pub fn supply_turns(&mut self, turns: Vec<Turn>, context: BTreeMap<String, String>) -> Result<(), CaseError> {
        conversation::validate(&turns)?;
        let got = input_sha256(&turns, &context);
        if let Some(recorded) = &self.input.sha256
            && *recorded != got
        {
            return Err(CaseError::InputMismatch { recorded: recorded.clone(), got });
        }
        self.input.messages =
            turns.into_iter().map(|t| CaseMessage { role: t.role.as_str().to_string(), content: t.content }).collect();
        self.input.context = context;
        self.input.sha256 = Some(got);
        self.input.redacted = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported() -> Case {
        Case {
            version: CASE_VERSION,
            name: "run_x".into(),
            description: None,
            split: None,
            origin: None,
            input: Input {
                sha256: Some(input_sha256(&[Turn { role: Speaker::User, content: "why?".into() }], &BTreeMap::new())),
                ..Input::default()
            },
            skills: Vec::new(),
            tools: Vec::new(),
            calls: Vec::new(),
            expected: Expected::default(),
        }
    }

    #[test]
    fn a_supplied_question_must_match_the_recorded_hash() {
        let mut case = exported();
        let error = case.supply_input("why not?", BTreeMap::new()).unwrap_err();
        assert!(matches!(error, CaseError::InputMismatch { .. }), "{error}");
        assert!(case.input.messages.is_empty(), "nothing is filled in on a mismatch");
        case.supply_input("why?", BTreeMap::new()).unwrap();
        assert_eq!(case.turns().unwrap(), [Turn { role: Speaker::User, content: "why?".into() }]);
    }

    #[test]
    fn yaml_and_json_cases_parse_and_bad_ones_say_what_to_fix() {
        let yaml = "version: 2\nname: hand-written\nsplit: held_out\ninput:\n  messages:\n    - {role: user, content: \"service: postgresql why?\"}\n\
                    calls:\n  - tool: inventory.host\n    arguments: {host: db-7}\n    output: {roles: [postgresql]}\n";
        let case = Case::parse(yaml).unwrap();
        assert_eq!(case.calls[0].output, Some(serde_json::json!({"roles": ["postgresql"]})));
        assert_eq!(case.split.as_ref().map(Split::as_str), Some("held_out"));
        let json = serde_json::to_string(&case).unwrap();
        assert_eq!(Case::parse(&json).unwrap(), case);

        assert!(matches!(Case::parse("version: 3\nname: x\ninput: {}\n"), Err(CaseError::Version(3))));
        let bad_role = "version: 2\nname: x\ninput:\n  messages: [{role: tool, content: x}]\n";
        assert_eq!(
            Case::parse(bad_role).unwrap_err().to_string(),
            "input.messages[0].role must be system, user or assistant"
        );
        assert!(matches!(Case::parse("version: 2\nname: x\ninput: {}\ntypo: 1\n"), Err(CaseError::Parse(_))));
        let at = Case::parse("version: 2\nname: x\ninput: {at: \"2026-12-01T12:00:00Z\"}\n").unwrap();
        assert_eq!(at.at(), Some("2026-12-01T12:00:00Z".parse().unwrap()));
        assert!(matches!(Case::parse("version: 2\nname: x\ninput: {at: tomorrow}\n"), Err(CaseError::At(_))));
        assert_eq!(Case::parse("version: 2\nname: x\ninput: {}\n").unwrap().at(), None, "the clock");
        for split in ["Held_Out", "held out", "", &"x".repeat(33)] {
            let error = Case::parse(&format!("version: 2\nname: x\nsplit: \"{split}\"\ninput: {{}}\n")).unwrap_err();
            assert!(error.to_string().contains("lower-case letters, digits, `_` or `-`"), "{split}: {error}");
        }
        assert!(Case::parse(&format!("version: 2\nname: x\nsplit: {}\ninput: {{}}\n", "a-1_".repeat(8))).is_ok());
    }

    #[test]
    fn a_hand_written_version_1_case_is_refused_saying_how_to_mark_its_tools() {
        let text = "version: 1\nname: x\ninput: {}\ntools:\n  - {name: kubernetes.scale, description: Scale., input_schema: {type: object}}\n";
        assert_eq!(
            Case::parse(text).unwrap_err().to_string(),
            "case version 1 does not say which tools are read-only: set `read_only: true` on each read-only tool and `version: 2`"
        );
    }

    #[test]
    fn an_exported_version_1_case_reads_with_every_tool_read_only() {
        let mut case = exported();
        case.version = 1;
        case.origin = Some(Origin {
            run_id: "run_x".into(),
            namespace: "default".into(),
            source: "chat".into(),
            model: None,
            catalog_version: 1,
            exported_catalog_version: 1,
            started_at: "2026-12-01T00:00:00Z".into(),
            instructions_sha256: None,
        });
        let tool = CaseTool {
            name: "inventory.host".into(),
            description: "Host facts.".into(),
            input_schema: serde_json::json!({"type": "object"}),
            read_only: false,
        };
        case.tools = vec![tool.clone(), CaseTool { name: "metrics.query".into(), ..tool }];
        let mut json = serde_json::to_value(&case).unwrap();
        for tool in json["tools"].as_array_mut().unwrap() {
            assert_eq!(tool["read_only"], false, "read_only is always written");
            tool.as_object_mut().unwrap().remove("read_only");
        }
        let read = Case::parse(&json.to_string()).unwrap();
        assert_eq!(read.version, CASE_VERSION);
        assert!(read.tools.iter().all(|t| t.read_only), "{:?}", read.tools);
        assert_eq!(read.at(), Some("2026-12-01T00:00:00Z".parse().unwrap()), "judged at the exported Run's start");
    }
}
