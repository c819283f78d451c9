//! `InvestigationResult`: the strict, structured outcome of an alert investigation.
//! The host accepts it only when every evidence reference names a successful
//! execution-tool call of this Run by the id the host assigned it (and a quoted
//! value occurs in that call's stored output, see [`quote`]), and nothing claims a
//! production write; confidence is descriptive and never affects validity. The
//! host records the evidence coverage: how many claims carry a verified quote.
//! A `confirmed` finding needs at least one verified quote and a `suspected` one
//! at least one cited call; only `inconclusive` stands without evidence.

mod assess;
pub mod quote;
mod room;
mod schema;
pub mod untrusted;
pub mod values;

pub use assess::{Assessment, Refusal, assess};
pub(crate) use room::result_grammar;
pub use schema::{Citable, result_schema, result_schema_citing};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Host name of the structuring tool.
pub const RESULT_TOOL: &str = "local.investigation.submit_result";
/// Longest summary, hypothesis or impact, in characters.
pub const MAX_TEXT_CHARS: usize = 4096;
/// Most items in each list.
pub const MAX_ITEMS: usize = 64;
/// Longest list item, in characters.
pub const MAX_ITEM_CHARS: usize = 1024;
/// Prefix of an evidence reference.
pub const EVIDENCE_PREFIX: &str = "tool-call:";

/// What a result may cite: the host-assigned id of each successful execution-tool
/// call of the Run, with the output the host stored for it.
pub type Evidence = BTreeMap<String, Value>;

/// Whether the finding is established.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FindingStatus {
    /// The evidence establishes the cause.
    Confirmed,
    /// The evidence points at a cause without establishing it.
    Suspected,
    /// The evidence does not settle it.
    Inconclusive,
}

/// What a human can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Actionability {
    /// A change could be prepared.
    ProposalPossible,
    /// A person must decide or act.
    RequiresHuman,
    /// Nothing to do: the alert is real and needs no action now (already
    /// resolved, renewed, within limits).
    NoAction,
    /// The alert itself is noise (flapping around its threshold, expected,
    /// duplicated): tune or silence the rule; there is nothing to fix.
    NotActionable,
}

/// Descriptive confidence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The model rates its conclusion well supported; shown to readers, never checked by the host.
    High,
    /// The model rates its conclusion plausible but not established; notifications show it as is.
    Medium,
    /// The model rates its conclusion a guess; the result is no less valid for it.
    Low,
}

impl FindingStatus {
    /// The status as the result's JSON spells it (`confirmed`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FindingStatus::Confirmed => "confirmed",
            FindingStatus::Suspected => "suspected",
            FindingStatus::Inconclusive => "inconclusive",
        }
    }
}

impl Actionability {
    /// The actionability as the result's JSON spells it (`proposal_possible`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Actionability::ProposalPossible => "proposal_possible",
            Actionability::RequiresHuman => "requires_human",
            Actionability::NoAction => "no_action",
            Actionability::NotActionable => "not_actionable",
        }
    }
}

impl Confidence {
    /// The confidence as the result's JSON spells it (`high`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// The structured result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InvestigationResult {
    /// Finding status.
    pub finding_status: FindingStatus,
    /// What a human can do next, as the model judges it; scheduled reports compare it run to run.
    pub actionability: Actionability,
    /// Confidence (descriptive only).
    pub confidence: Confidence,
    /// The model's account of what happened (1 to [`MAX_TEXT_CHARS`] characters); notifications
    /// and bot replies quote it.
    pub summary: String,
    /// Leading hypothesis.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hypothesis: String,
    /// Who or what the problem affects, in the model's words; may be empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub impact: String,
    /// Evidence references (`tool-call:<call id>`, optionally followed by a space and
    /// a double-quoted value from that call's output). A model submits an item as
    /// `{"call": "<call id>", "value": "<value>"}` (`observed` is read as `value`, and the
    /// text form is read too); the host records it in the text form.
    #[serde(default, deserialize_with = "evidence_items")]
    pub evidence: Vec<String>,
    /// Hypotheses ruled out.
    #[serde(default)]
    pub ruled_out: Vec<String>,
    /// Affected components.
    #[serde(default)]
    pub affected_components: Vec<String>,
    /// Recommended actions for a human.
    #[serde(default)]
    pub recommended_actions: Vec<String>,
    /// Production writes performed: always 0.
    pub production_writes: u64,
    /// Computed by the host at validation (absent in journals written before it was
    /// recorded; replay then computes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_coverage: Option<EvidenceCoverage>,
    /// Evidence items the host left out because it could not verify them, each with the
    /// reason (computed by the host; a submission that states it is refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_evidence: Vec<RefusedEvidence>,
    /// The status the model submitted, when the evidence the host verified did not back it
    /// and the host lowered it (computed by the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_downgrade: Option<StatusDowngrade>,
}

/// An evidence item the host refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RefusedEvidence {
    /// The item as submitted (text form).
    pub item: String,
    /// Why it was refused.
    pub reason: String,
}

/// A finding status the host lowered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusDowngrade {
    /// The status the model submitted.
    pub from: FindingStatus,
    /// Why the verified evidence does not back it.
    pub reason: String,
}

/// `{"call": "<id>", "value": "<value>"}`: the structured form of an evidence item (`call`
/// may carry the `tool-call:` prefix; `observed` is the earlier name of `value`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CitedValue {
    call: String,
    #[serde(default, alias = "observed")]
    value: Option<String>,
}

impl CitedValue {
    /// The text form: `tool-call:<id>`, then ` "<value>"` when a value is given.
    fn text(&self) -> String {
        let call = self.call.trim();
        let id = call.strip_prefix(EVIDENCE_PREFIX).unwrap_or(call);
        match self.value.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            Some(value) => format!("{EVIDENCE_PREFIX}{id} \"{value}\""),
            None => format!("{EVIDENCE_PREFIX}{id}"),
        }
    }
}

/// Reads evidence items in either form into the text form (`tool-call:<id> "<value>"`).
fn evidence_items<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    use serde::de::Error;
    let items = Vec::<Value>::deserialize(deserializer)?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(text) => Ok(text),
            Value::Object(_) => serde_json::from_value::<CitedValue>(item)
                .map(|cited| cited.text())
                .map_err(|e| D::Error::custom(format!("evidence[{i}]: {e}"))),
            _ => Err(D::Error::custom(format!(
                "evidence[{i}] must be an object {{\"call\": \"<call id>\", \"value\": \"<value>\"}}"
            ))),
        })
        .collect()
}

/// How much of a result's evidence quotes a value the host found in the cited
/// call's output: `verified` of `claims` evidence items. A result without
/// evidence has ratio 0: nothing it says is backed by a quote.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceCoverage {
    /// Evidence items.
    pub claims: u32,
    /// Evidence items with a quoted value that occurs in the cited call's output.
    pub verified: u32,
    /// `verified / claims`, 0 without claims.
    pub ratio: f64,
    /// The finding status was checked against this evidence (`confirmed` needs a
    /// verified quote, `suspected` a cited call). Absent in records written before
    /// the host applied that rule; they replay without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backs_status: bool,
}

impl EvidenceCoverage {
    fn of(claims: usize, verified: usize) -> EvidenceCoverage {
        let claims = u32::try_from(claims).unwrap_or(u32::MAX);
        let verified = u32::try_from(verified).unwrap_or(u32::MAX);
        let ratio = if claims == 0 { 0.0 } else { f64::from(verified) / f64::from(claims) };
        EvidenceCoverage { claims, verified, ratio, backs_status: false }
    }

    /// Whether two coverages count the same claims and quotes (whatever rule
    /// each was recorded under).
    fn counts_equal(&self, other: &EvidenceCoverage) -> bool {
        (self.claims, self.verified) == (other.claims, other.verified)
    }

    /// `2/3 (67%)`.
    pub fn describe(&self) -> String {
        format!("{}/{} ({:.0}%)", self.verified, self.claims, self.ratio * 100.0)
    }
}

/// How quotes are compared: [`quote::occurs`] (token rules) for every result this
/// version records; exact substrings for a journal record written before the host
/// recorded coverage, so old journals replay under the rule they were accepted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuoteRule {
    Tokens,
    LegacySubstring,
}

/// The rules a result is checked by: how quotes compare, and whether the finding
/// status must be backed by its evidence (every result this version records;
/// not records written before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rules {
    quotes: QuoteRule,
    backs_status: bool,
}

impl Rules {
    const CURRENT: Rules = Rules { quotes: QuoteRule::Tokens, backs_status: true };

    /// The rules a journal record was accepted under, read from what it recorded.
    fn of_record(recorded: &str) -> Rules {
        let value = serde_json::from_str::<Value>(recorded).ok().filter(Value::is_object);
        let Some(coverage) = value.as_ref().map(|v| v.get("evidence_coverage")) else { return Rules::CURRENT };
        match coverage {
            None => Rules { quotes: QuoteRule::LegacySubstring, backs_status: false },
            Some(coverage) => Rules {
                quotes: QuoteRule::Tokens,
                backs_status: coverage.get("backs_status").and_then(Value::as_bool).unwrap_or(false),
            },
        }
    }
}

/// Why a structured result was rejected; each message names the field and the rule.
#[derive(Debug, thiserror::Error)]
pub enum InvestigationError {
    /// The arguments are not JSON.
    #[error("result is not valid JSON: {0}")]
    Json(serde_json::Error),
    /// The JSON does not have the result's shape.
    #[error("result does not match the schema: {0}")]
    Schema(serde_json::Error),
    /// The result claims writes an investigation cannot make.
    #[error("result claims {0} production writes; investigations are read-only")]
    ProductionWrites(u64),
    /// The summary is blank.
    #[error("summary must not be empty")]
    EmptySummary,
    /// A text field is over [`MAX_TEXT_CHARS`].
    #[error("{field} has {chars} characters; at most {MAX_TEXT_CHARS} are allowed")]
    TextTooLong {
        /// Field name.
        field: &'static str,
        /// Characters it has.
        chars: usize,
    },
    /// A list is over [`MAX_ITEMS`].
    #[error("{field} has {items} items; at most {MAX_ITEMS} are allowed")]
    TooManyItems {
        /// Field name.
        field: &'static str,
        /// Items it has.
        items: usize,
    },
    /// A list item is blank.
    #[error("{0} has an empty item")]
    EmptyItem(&'static str),
    /// A list item is over [`MAX_ITEM_CHARS`].
    #[error("{0} has an item over {MAX_ITEM_CHARS} characters")]
    ItemTooLong(&'static str),
    /// A submission states a field only the host computes.
    #[error("{0} is computed by the host; omit the field")]
    HostComputed(&'static str),
    /// An evidence reference is not of the form the host records.
    #[error(
        "evidence {0:?} is not a reference this host recorded; use tool-call:<call id>, optionally followed by a space and a \"quoted value\""
    )]
    ForeignReference(String),
    /// An evidence reference names no successful execution-tool call of this Run.
    #[error(
        "evidence {0:?} names no successful tool call of this Run; cite only the host-assigned ids of successful execution calls"
    )]
    UnknownCall(String),
    /// A quoted value is not in the cited call's output.
    #[error(
        "evidence {0:?} quotes a value that does not occur in that call's output; quote one of the values listed \
         for that call, or whole words or numbers as the output shows them"
    )]
    QuoteNotInOutput(String),
    /// A `confirmed` or `suspected` finding without the evidence that status needs.
    #[error("{}", unbacked(*status, *claims))]
    UnbackedStatus {
        /// The finding status.
        status: FindingStatus,
        /// Evidence items the result cites (none of them with a verified quote).
        claims: u32,
    },
    /// A result states a coverage other than the one its evidence gives.
    #[error(
        "evidence_coverage is computed by the host: the result states {stated} but its evidence gives {computed}; \
         omit the field"
    )]
    CoverageMismatch {
        /// What the result said.
        stated: String,
        /// What the host computed.
        computed: String,
    },
}

/// Decodes, normalises (trims, sorts lists, drops repeated items) and validates a result
/// against the calls it may cite (`evidence`), and records its evidence coverage. Every
/// rejection says why. A stated `evidence_coverage` must equal the computed one. Strict: one
/// unverifiable item refuses the result ([`Assessment::settle`] keeps the rest instead).
pub fn validate(arguments: &str, evidence: &Evidence) -> Result<InvestigationResult, InvestigationError> {
    assess(arguments, evidence)?.strict()
}

/// [`validate`] for a result read back from the audit journal, under the rules it
/// was accepted by: a record without `evidence_coverage` keeps the exact-substring
/// quote rule, and one whose coverage lacks `backs_status` was accepted before a
/// finding status needed evidence.
pub fn revalidate(recorded: &str, evidence: &Evidence) -> Result<InvestigationResult, InvestigationError> {
    check(recorded, evidence, Rules::of_record(recorded))
}

fn check(arguments: &str, evidence: &Evidence, rules: Rules) -> Result<InvestigationResult, InvestigationError> {
    let result = decode(arguments)?;
    let mut verified = 0;
    let mut tokenized = BTreeMap::new();
    for reference in &result.evidence {
        verified += usize::from(check_reference(reference, evidence, rules.quotes, &mut tokenized)?);
    }
    finish(result, verified, rules)
}

/// Decodes a result and normalises it: texts trimmed and bounded, lists trimmed, bounded,
/// sorted and without repeated items (a repetition is dropped, not refused), no production
/// write.
fn decode(arguments: &str) -> Result<InvestigationResult, InvestigationError> {
    let value: Value = serde_json::from_str(arguments).map_err(InvestigationError::Json)?;
    let mut result: InvestigationResult = serde_json::from_value(value).map_err(InvestigationError::Schema)?;
    if result.production_writes != 0 {
        return Err(InvestigationError::ProductionWrites(result.production_writes));
    }
    result.summary = bounded_text(&result.summary, "summary")?;
    if result.summary.is_empty() {
        return Err(InvestigationError::EmptySummary);
    }
    result.hypothesis = bounded_text(&result.hypothesis, "hypothesis")?;
    result.impact = bounded_text(&result.impact, "impact")?;
    for (name, list) in [
        ("evidence", &mut result.evidence),
        ("ruled_out", &mut result.ruled_out),
        ("affected_components", &mut result.affected_components),
        ("recommended_actions", &mut result.recommended_actions),
    ] {
        normalise_list(list, name)?;
    }
    Ok(result)
}

/// Records the coverage of `result`, whose evidence items are all verified (`verified` of
/// them with a quote), and, under `rules`, checks that it backs the finding status. A stated
/// coverage must equal the computed one.
fn finish(
    mut result: InvestigationResult,
    verified: usize,
    rules: Rules,
) -> Result<InvestigationResult, InvestigationError> {
    let mut computed = EvidenceCoverage::of(result.evidence.len(), verified);
    if let Some(stated) = result.evidence_coverage
        && !stated.counts_equal(&computed)
    {
        return Err(InvestigationError::CoverageMismatch { stated: stated.describe(), computed: computed.describe() });
    }
    if rules.backs_status {
        backed(result.finding_status, &computed)?;
        computed.backs_status = true;
    }
    result.evidence_coverage = Some(computed);
    Ok(result)
}

/// A `confirmed` finding needs at least one verified quote; a `suspected` one at
/// least one cited successful call. `inconclusive` stands without evidence.
fn backed(status: FindingStatus, coverage: &EvidenceCoverage) -> Result<(), InvestigationError> {
    let unbacked = match status {
        FindingStatus::Confirmed => coverage.verified == 0,
        FindingStatus::Suspected => coverage.claims == 0,
        FindingStatus::Inconclusive => false,
    };
    if unbacked {
        return Err(InvestigationError::UnbackedStatus { status, claims: coverage.claims });
    }
    Ok(())
}

/// Why a finding status is not backed, what it needs and what to choose instead.
fn unbacked(status: FindingStatus, claims: u32) -> String {
    let (name, needs) = match status {
        FindingStatus::Confirmed => {
            ("confirmed", "at least one evidence item quoting a value from a successful call's output")
        }
        _ => ("suspected", "at least one cited successful call"),
    };
    let has = match claims {
        0 => "no evidence".to_string(),
        claims => format!("{claims} cited call(s) and no quoted value"),
    };
    let instead = if status == FindingStatus::Confirmed && claims > 0 { "suspected" } else { "inconclusive" };
    format!(
        "finding_status {name} needs {needs}, and the result has {has}; cite it (tool-call:<call id> \"value\") or \
         choose {instead}"
    )
}

/// `tool-call:<id>` or `tool-call:<id> "<value>"`: the id must be one of `evidence`
/// and the value, when given, must occur in that call's output. Whether a value
/// was quoted (and so verified). Each cited output is tokenised once per result
/// (`tokenized`), however many quotes cite it.
fn check_reference<'a>(
    reference: &str,
    evidence: &'a Evidence,
    quotes: QuoteRule,
    tokenized: &mut BTreeMap<&'a str, quote::Tokenized>,
) -> Result<bool, InvestigationError> {
    let foreign = || InvestigationError::ForeignReference(reference.to_string());
    let rest = reference.strip_prefix(EVIDENCE_PREFIX).ok_or_else(foreign)?;
    let (id, quote) = match rest.split_once(' ') {
        None => (rest, None),
        Some((id, quoted)) => {
            let value = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"')).filter(|v| !v.is_empty());
            (id, Some(value.ok_or_else(foreign)?))
        }
    };
    let (id, output) =
        evidence.get_key_value(id).ok_or_else(|| InvestigationError::UnknownCall(reference.to_string()))?;
    let Some(value) = quote else { return Ok(false) };
    let found = match quotes {
        QuoteRule::Tokens => {
            tokenized.entry(id.as_str()).or_insert_with(|| quote::Tokenized::new(output)).contains(value)
        }
        QuoteRule::LegacySubstring => occurs_as_substring(value, output),
    };
    if !found {
        return Err(InvestigationError::QuoteNotInOutput(reference.to_string()));
    }
    Ok(true)
}

/// The rule of journals written before coverage was recorded: `value` occurs in a
/// string of `output` or in its JSON text.
fn occurs_as_substring(value: &str, output: &Value) -> bool {
    fn in_strings(value: &str, output: &Value) -> bool {
        match output {
            Value::String(text) => text.contains(value),
            Value::Array(items) => items.iter().any(|item| in_strings(value, item)),
            Value::Object(map) => map.values().any(|item| in_strings(value, item)),
            _ => false,
        }
    }
    in_strings(value, output) || output.to_string().contains(value)
}

fn bounded_text(text: &str, field: &'static str) -> Result<String, InvestigationError> {
    let trimmed = text.trim();
    let chars = trimmed.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Err(InvestigationError::TextTooLong { field, chars });
    }
    Ok(trimmed.to_string())
}

fn normalise_list(list: &mut Vec<String>, field: &'static str) -> Result<(), InvestigationError> {
    if list.len() > MAX_ITEMS {
        return Err(InvestigationError::TooManyItems { field, items: list.len() });
    }
    for item in list.iter_mut() {
        *item = item.trim().to_string();
        if item.is_empty() {
            return Err(InvestigationError::EmptyItem(field));
        }
        if item.chars().count() > MAX_ITEM_CHARS {
            return Err(InvestigationError::ItemTooLong(field));
        }
    }
    // A model that repeats an item said nothing wrong: the repetition is dropped.
    list.sort();
    list.dedup();
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_label_is_spelt_as_its_json() {
        for status in [FindingStatus::Confirmed, FindingStatus::Suspected, FindingStatus::Inconclusive] {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for actionability in [
            Actionability::ProposalPossible,
            Actionability::RequiresHuman,
            Actionability::NoAction,
            Actionability::NotActionable,
        ] {
            assert_eq!(serde_json::to_value(actionability).unwrap(), actionability.as_str());
        }
        for confidence in [Confidence::High, Confidence::Medium, Confidence::Low] {
            assert_eq!(serde_json::to_value(confidence).unwrap(), confidence.as_str());
        }
    }

    use serde_json::json;

    use super::*;

    fn calls() -> Evidence {
        Evidence::from([
            ("call-1".to_string(), json!({"host": "db-7", "roles": ["postgresql"]})),
            ("call-2".to_string(), json!({"longest_query_seconds": 1820, "note": "autovacuum \"busy\""})),
        ])
    }

    fn result(evidence: Value, writes: u64) -> String {
        json!({
            "finding_status": "suspected", "actionability": "requires_human", "confidence": "low",
            "summary": "  autovacuum saturates db-7  ", "impact": "", "evidence": evidence, "ruled_out": ["disk"],
            "affected_components": ["db-7"], "recommended_actions": ["tune autovacuum", "check locks"],
            "production_writes": writes
        })
        .to_string()
    }

    #[test]
    fn accepts_real_references_and_normalises() {
        let accepted = validate(&result(json!(["tool-call:call-2", "tool-call:call-1"]), 0), &calls()).unwrap();
        assert_eq!(accepted.summary, "autovacuum saturates db-7");
        assert_eq!(accepted.evidence, ["tool-call:call-1", "tool-call:call-2"]);
        assert_eq!(accepted.recommended_actions, ["check locks", "tune autovacuum"]);
        assert_eq!(accepted.confidence, Confidence::Low, "confidence is descriptive and does not affect validity");
    }

    fn rejection(arguments: &str) -> String {
        validate(arguments, &calls()).unwrap_err().to_string()
    }

    #[test]
    fn rejects_invented_evidence_and_production_writes() {
        assert!(
            rejection(&result(json!(["tool-call:call_invented"]), 0))
                .starts_with("evidence \"tool-call:call_invented\" names no successful tool call of this Run")
        );
        assert!(rejection(&result(json!(["artifact:x"]), 0)).contains("not a reference this host recorded"));
        assert_eq!(rejection(&result(json!([]), 2)), "result claims 2 production writes; investigations are read-only");
        let extra = result(json!([]), 0).replace("\"impact\"", "\"secret_field\": 1, \"impact\"");
        assert!(rejection(&extra).contains("unknown field"));
    }

    #[test]
    fn rejects_oversized_blank_and_malformed_fields() {
        let with = |field: &str, value: Value| {
            let mut v: Value = serde_json::from_str(&result(json!([]), 0)).unwrap();
            v[field] = value;
            rejection(&v.to_string())
        };
        assert_eq!(
            with("summary", json!("x".repeat(MAX_TEXT_CHARS + 1))),
            format!("summary has {} characters; at most {MAX_TEXT_CHARS} are allowed", MAX_TEXT_CHARS + 1)
        );
        assert_eq!(with("summary", json!("  ")), "summary must not be empty");
        assert_eq!(with("ruled_out", json!(["disk", " "])), "ruled_out has an empty item");
        assert_eq!(
            with("affected_components", json!(["y".repeat(MAX_ITEM_CHARS + 1)])),
            format!("affected_components has an item over {MAX_ITEM_CHARS} characters")
        );
        let many: Vec<String> = (0..=MAX_ITEMS).map(|i| format!("step {i}")).collect();
        assert_eq!(
            with("recommended_actions", json!(many)),
            format!("recommended_actions has {} items; at most {MAX_ITEMS} are allowed", MAX_ITEMS + 1)
        );
        assert!(rejection("{").starts_with("result is not valid JSON: "));
        assert!(with("confidence", json!("certain")).starts_with("result does not match the schema: "));
    }

    #[test]
    fn a_quoted_value_must_occur_in_the_cited_calls_output() {
        for quoted in
            ["tool-call:call-2 \"1820\"", "tool-call:call-1 \"postgresql\"", "tool-call:call-2 \"autovacuum \"busy\"\""]
        {
            assert!(validate(&result(json!([quoted]), 0), &calls()).is_ok(), "{quoted}");
        }
        assert!(
            rejection(&result(json!(["tool-call:call-1 \"1820\""]), 0))
                .contains("does not occur in that call's output")
        );
        assert!(rejection(&result(json!(["tool-call:call-2 \"182\""]), 0)).contains("does not occur"), "partial token");
        for malformed in ["tool-call:call-1 1820", "tool-call:call-1 \"\"", "tool-call:call-1 \"open"] {
            assert!(
                rejection(&result(json!([malformed]), 0)).contains("not a reference this host recorded"),
                "{malformed}"
            );
        }
    }

    #[test]
    fn an_observed_value_in_the_structured_form_is_checked_and_recorded_as_text() {
        let structured = json!([{"call": "tool-call:call-1", "observed": "host=db-7"}, "tool-call:call-2 \"1820\""]);
        let accepted = validate(&result(structured, 0), &calls()).unwrap();
        assert_eq!(accepted.evidence, ["tool-call:call-1 \"host=db-7\"", "tool-call:call-2 \"1820\""]);
        assert_eq!(accepted.evidence_coverage.map(|c| c.verified), Some(2));
        let absent = json!([{"call": "tool-call:call-1", "observed": "host=db-8"}]);
        assert!(rejection(&result(absent, 0)).contains("does not occur in that call's output"));
        let invented = json!([{"call": "tool-call:call-9", "observed": "db-7"}]);
        assert!(rejection(&result(invented, 0)).contains("names no successful tool call"));
        let extra = json!([{"call": "tool-call:call-1", "observed": "db-7", "verified": true}]);
        assert!(rejection(&result(extra, 0)).contains("evidence[0]: unknown field `verified`"));
        assert!(rejection(&result(json!([7]), 0)).contains("evidence[0] must be an object"));
    }

    #[test]
    fn normalised_quotes_are_accepted_and_counted_in_the_coverage() {
        let accepted = validate(
            &result(json!(["tool-call:call-2 \"1,820\"", "tool-call:call-1 \"host=db-7\"", "tool-call:call-1"]), 0),
            &calls(),
        )
        .unwrap();
        assert_eq!(
            accepted.evidence_coverage,
            Some(EvidenceCoverage { claims: 3, verified: 2, ratio: 2.0 / 3.0, backs_status: true })
        );
        assert_eq!(accepted.evidence_coverage.unwrap().describe(), "2/3 (67%)");
        let inconclusive = result(json!([]), 0).replace("\"suspected\"", "\"inconclusive\"");
        let none = validate(&inconclusive, &calls()).unwrap().evidence_coverage.unwrap();
        assert_eq!((none.claims, none.verified, none.ratio), (0, 0, 0.0), "no claims: nothing is backed");
    }

    #[test]
    fn a_recorded_result_replays_identically_and_a_forged_coverage_is_rejected() {
        let accepted = validate(&result(json!(["tool-call:call-2 \"1820.0\""]), 0), &calls()).unwrap();
        let recorded = serde_json::to_string(&accepted).unwrap();
        assert_eq!(revalidate(&recorded, &calls()).unwrap(), accepted);
        assert_eq!(validate(&recorded, &calls()).unwrap(), accepted);
        let forged = recorded.replace("\"verified\":1", "\"verified\":0");
        assert_ne!(forged, recorded);
        assert_eq!(
            validate(&forged, &calls()).unwrap_err().to_string(),
            "evidence_coverage is computed by the host: the result states 0/1 (100%) but its evidence gives 1/1 \
             (100%); omit the field"
        );
    }

    #[test]
    fn a_journal_record_without_coverage_keeps_the_substring_rule() {
        let old = result(json!(["tool-call:call-2 \"182\""]), 0);
        assert!(validate(&old, &calls()).is_err(), "new results quote whole tokens");
        let replayed = revalidate(&old, &calls()).unwrap();
        assert_eq!(replayed.evidence_coverage.map(|c| c.verified), Some(1));
        assert!(revalidate(&result(json!(["tool-call:call-2 \"9999\""]), 0), &calls()).is_err());
    }

    fn with_status(status: &str, evidence: Value) -> String {
        result(evidence, 0).replace("\"suspected\"", &format!("\"{status}\""))
    }

    #[test]
    fn a_finding_status_needs_the_evidence_it_claims() {
        let confirmed_bare = rejection(&with_status("confirmed", json!([])));
        assert_eq!(
            confirmed_bare,
            "finding_status confirmed needs at least one evidence item quoting a value from a successful call's \
             output, and the result has no evidence; cite it (tool-call:<call id> \"value\") or choose inconclusive"
        );
        assert!(
            rejection(&with_status("confirmed", json!(["tool-call:call-1"])))
                .contains("the result has 1 cited call(s) and no quoted value; cite it (tool-call:<call id> \"value\") or choose suspected"),
            "a cited call without a quote does not confirm"
        );
        assert!(validate(&with_status("confirmed", json!(["tool-call:call-2 \"1820\""])), &calls()).is_ok());
        assert!(rejection(&with_status("suspected", json!([]))).starts_with(
            "finding_status suspected needs at least one cited successful call, and the result has no evidence"
        ));
        assert!(validate(&with_status("suspected", json!(["tool-call:call-1"])), &calls()).is_ok());
        let inconclusive = validate(&with_status("inconclusive", json!([])), &calls()).unwrap();
        assert!(inconclusive.evidence_coverage.unwrap().backs_status, "recorded as checked by the rule");
    }

    #[test]
    fn records_written_before_the_status_rule_replay_under_their_own_rule() {
        let accepted = validate(&with_status("confirmed", json!(["tool-call:call-2 \"1820\""])), &calls()).unwrap();
        let recorded = serde_json::to_string(&accepted).unwrap();
        assert!(recorded.contains("\"backs_status\":true"), "{recorded}");
        assert_eq!(revalidate(&recorded, &calls()).unwrap(), accepted);
        let bare = with_status("confirmed", json!([]));
        let before_rule = bare.replace(
            "\"production_writes\"",
            "\"evidence_coverage\": {\"claims\": 0, \"verified\": 0, \"ratio\": 0.0}, \"production_writes\"",
        );
        let replayed = revalidate(&before_rule, &calls()).unwrap();
        assert!(!replayed.evidence_coverage.unwrap().backs_status, "kept the rule it was accepted by");
        assert!(revalidate(&bare, &calls()).is_ok(), "a record from before coverage keeps the old rule too");
        let new_record = before_rule.replace("\"ratio\": 0.0}", "\"ratio\": 0.0, \"backs_status\": true}");
        assert!(
            revalidate(&new_record, &calls()).unwrap_err().to_string().starts_with("finding_status confirmed needs")
        );
        assert!(validate(&before_rule, &calls()).is_err(), "a model cannot opt out by stating a coverage");
    }
}
