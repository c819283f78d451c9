//! What receivers are told about a scheduled check (a `RunSchedule`'s Run): what changed
//! since the Run before, and the validated result. Like every notification, only
//! structured fields, each value sanitised (no mention can fire).

use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Value, json};

use super::chat::mattermost_escape;
use super::message::{MATTERMOST_MAX_RUNES, TELEGRAM_MAX_RUNES, TRUNCATION_SUFFIX, rfc3339_nano_utc, sanitize_value};
use crate::text::truncate_chars;

/// Webhook envelope `event` of a scheduled check.
pub const WEBHOOK_CHECKED_EVENT: &str = "schedule.checked";

/// A scheduled check's outcome, as receivers see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleNotice {
    /// `namespace/name` of the RunSchedule.
    pub schedule: String,
    /// The tick (RFC 3339).
    pub scheduled_time: String,
    /// `healthy`, a finding status, or `failed`.
    pub state: String,
    /// What differs from the Run before; empty when nothing did (`notify: always`).
    pub changes: Vec<String>,
    /// The result's summary, or why the Run failed.
    pub summary: String,
    /// The result's actionability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actionability: Option<String>,
    /// Verified evidence values (the quotes the host found in tool output).
    pub evidence: Vec<String>,
    /// Evidence items, and those with a verified quote.
    pub evidence_count: u32,
    /// Evidence items with a verified quote.
    pub evidence_verified: u32,
    /// Recommended actions for a human.
    pub recommended_actions: Vec<String>,
    /// The Run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Link to the Run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_url: Option<String>,
}

fn lines(n: &ScheduleNotice, value: impl Fn(&str) -> String) -> String {
    let mut lines = vec![
        format!("Akritas scheduled check {}: {}", value(&n.schedule), value(&n.state)),
        format!("Scheduled: {}", value(&n.scheduled_time)),
    ];
    if !n.changes.is_empty() {
        lines.push("What changed".to_string());
        lines.extend(n.changes.iter().map(|c| format!("- {}", value(c))));
    }
    lines.extend(["Summary".to_string(), value(&n.summary)]);
    if let Some(actionability) = &n.actionability {
        lines.push(format!("Actionability: {}", value(actionability)));
    }
    if !n.evidence.is_empty() {
        lines.push("Verified evidence".to_string());
        lines.extend(n.evidence.iter().map(|e| format!("- {}", value(e))));
    }
    if !n.recommended_actions.is_empty() {
        lines.push("Recommended actions".to_string());
        lines.extend(n.recommended_actions.iter().map(|a| format!("- {}", value(a))));
    }
    lines.push(format!("Evidence coverage: {}/{} with a verified quote", n.evidence_verified, n.evidence_count));
    lines.extend(n.run_id.as_deref().map(|id| format!("Run ID: {}", value(id))));
    lines.extend(n.run_url.as_deref().map(|url| format!("Run: {}", value(url))));
    lines.join("\n")
}

/// Plain-text Telegram (and Slack, before escaping) message.
pub fn checked_text(n: &ScheduleNotice) -> String {
    truncate_chars(&lines(n, sanitize_value), TELEGRAM_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Mattermost message (Markdown-escaped values).
pub fn checked_mattermost_text(n: &ScheduleNotice) -> String {
    let text = lines(n, |v| mattermost_escape(&sanitize_value(v)));
    truncate_chars(&text, MATTERMOST_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Webhook envelope `{"version":1,"event":"schedule.checked","delivery_id","created_at","check"}`.
pub fn checked_webhook_body(n: &ScheduleNotice, delivery_id: &str) -> Value {
    json!({
        "version": 1,
        "event": WEBHOOK_CHECKED_EVENT,
        "delivery_id": delivery_id,
        "created_at": rfc3339_nano_utc(SystemTime::now()),
        "check": n,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_notice_says_what_changed_and_no_mention_fires() {
        let notice = ScheduleNotice {
            schedule: "ops/certs".into(),
            scheduled_time: "2026-12-06T08:00:00Z".into(),
            state: "confirmed".into(),
            changes: vec!["first finding: confirmed".into(), "new evidence: \"@here 9 days\"".into()],
            summary: "The certificate of shop expires in 9 days".into(),
            actionability: Some("requires_human".into()),
            evidence: vec!["9 days".into()],
            evidence_count: 1,
            evidence_verified: 1,
            recommended_actions: vec!["renew".into()],
            run_id: Some("run_1".into()),
            run_url: None,
        };
        let text = checked_text(&notice);
        assert!(text.starts_with("Akritas scheduled check ops/certs: confirmed"), "{text}");
        assert!(text.contains("What changed\n- first finding: confirmed"), "{text}");
        assert!(!text.contains("@here") && text.contains("＠here"), "{text}");
        assert!(checked_mattermost_text(&notice).contains("Evidence coverage: 1/1"));
        let body = checked_webhook_body(&notice, "d1");
        assert_eq!(body["event"], WEBHOOK_CHECKED_EVENT);
        assert_eq!(body["check"]["changes"][0], "first finding: confirmed");
    }
}
