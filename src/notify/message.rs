//! Pure formatting of outbound incident notifications.
//!
//! Chat texts never contain the raw model answer or tool payloads: only the
//! structured fields of [`Notification`]. Every inserted value has its
//! whitespace collapsed and `@` replaced by a full-width `＠` so that
//! `@channel`/`@here`/`@all`/`@user` mentions can never fire.

use crate::ids::IncidentId;
use serde::Serialize;
use serde_json::{Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

use super::chat::{MATTERMOST_LIMIT, TELEGRAM_LIMIT, mattermost_escape};
use crate::investigation::{Actionability, Confidence, EvidenceCoverage, FindingStatus, StatusDowngrade};
use crate::severity::Severity;
use crate::text::truncate_chars;

/// Telegram `sendMessage` text limit (runes).
pub const TELEGRAM_MAX_RUNES: usize = TELEGRAM_LIMIT;
/// Mattermost post limit (runes).
pub const MATTERMOST_MAX_RUNES: usize = MATTERMOST_LIMIT;
/// Suffix appended to truncated texts; the total length stays exactly at the limit.
pub const TRUNCATION_SUFFIX: &str = "\n… truncated by Akritas";
/// Webhook envelope `event`.
pub const WEBHOOK_EVENT: &str = "incident.investigated";
/// Maximum serialized webhook envelope size (512 KiB).
pub const WEBHOOK_MAX_BODY_BYTES: usize = 512 * 1024;

/// Alert state of the incident the notification is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertStatus {
    Firing,
    Resolved,
}

impl AlertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlertStatus::Firing => "firing",
            AlertStatus::Resolved => "resolved",
        }
    }
}

/// Structured, already-sanitised result of an alert investigation.
/// Never carries raw tool data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    pub incident_id: IncidentId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_url: Option<String>,
    pub source: String,
    pub title: String,
    pub severity: Severity,
    pub status: AlertStatus,
    pub entity: String,
    pub finding: FindingStatus,
    pub confidence: Confidence,
    pub actionability: Actionability,
    pub summary: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub impact: String,
    /// Validated evidence references (`tool-call:<id>`).
    pub evidence: Vec<String>,
    pub ruled_out: Vec<String>,
    pub affected_components: Vec<String>,
    pub recommended_actions: Vec<String>,
    pub evidence_count: u32,
    /// Evidence items with a quoted value the host verified, of all claims.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_coverage: Option<EvidenceCoverage>,
    /// Evidence items the host could not verify and left out (the items stay in the Run).
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_evidence: u32,
    /// The finding the model submitted, when its evidence did not back it, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_downgrade: Option<StatusDowngrade>,
    /// Always 0 for a validated investigation.
    pub production_writes: u64,
}

/// `<public_url>/runs/<run_id>` (trailing slashes of the public URL ignored);
/// `None` when no public URL is configured or it is blank.
pub fn run_url(public_url: Option<&str>, run_id: &str) -> Option<String> {
    let base = public_url?.trim().trim_end_matches('/');
    if base.is_empty() || run_id.is_empty() {
        return None;
    }
    Some(format!("{base}/runs/{run_id}"))
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Collapses every whitespace run to one space, trims, and neutralises `@`.
pub fn sanitize_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out.replace('@', "＠")
}

fn render(n: &Notification, value: impl Fn(&str) -> String) -> String {
    let mut lines: Vec<String> = vec![
        "Akritas incident investigation".to_string(),
        format!("Alert status: {}", n.status.as_str()),
        format!("Finding: {}", value(n.finding.as_str())),
        format!("Actionability: {}", value(n.actionability.as_str())),
        format!("Confidence: {}", value(n.confidence.as_str())),
    ];
    let mut optional = |label: &str, v: Option<&str>| {
        if let Some(v) = v.map(&value).filter(|v| !v.is_empty()) {
            lines.push(format!("{label}: {v}"));
        }
    };
    optional("Run ID", n.run_id.as_deref());
    optional("Alert", Some(&n.title));
    optional("Severity", Some(n.severity.as_str()));
    optional("Source", Some(&n.source));
    optional("Entity", Some(&n.entity));
    optional("Run", n.run_url.as_deref());
    optional("Group", Some(&n.incident_id));
    lines.push(String::new());
    lines.push("Summary".to_string());
    lines.push(value(&n.summary));
    let impact = value(&n.impact);
    if !impact.is_empty() {
        lines.extend([String::new(), "Impact".to_string(), impact]);
    }
    for (title, items) in [
        ("Evidence", &n.evidence),
        ("Ruled out", &n.ruled_out),
        ("Affected components", &n.affected_components),
        ("Recommended actions", &n.recommended_actions),
    ] {
        let items: Vec<String> = items.iter().map(|a| value(a)).filter(|a| !a.is_empty()).collect();
        if !items.is_empty() {
            lines.push(String::new());
            lines.push(title.to_string());
            lines.extend(items.into_iter().map(|a| format!("- {a}")));
        }
    }
    lines.push(String::new());
    lines.push(format!("Evidence items: {}", n.evidence_count));
    if let Some(coverage) = &n.evidence_coverage {
        lines.push(format!("Evidence coverage: {} with a verified quote", coverage.describe()));
    }
    if n.refused_evidence > 0 {
        lines.push(format!("Evidence refused: {} item(s) the host could not verify", n.refused_evidence));
    }
    if let Some(downgrade) = &n.status_downgrade {
        lines.push(format!("Finding lowered from {}: {}", downgrade.from.as_str(), value(&downgrade.reason)));
    }
    lines.push(format!("Production writes: {}", n.production_writes));
    lines.join("\n")
}

/// Plain-text Telegram message (sent without `parse_mode`, so no Markdown
/// escaping is needed), truncated to [`TELEGRAM_MAX_RUNES`].
pub fn telegram_text(n: &Notification) -> String {
    truncate_chars(&render(n, sanitize_value), TELEGRAM_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Mattermost message: values sanitised and Markdown-escaped, truncated to
/// [`MATTERMOST_MAX_RUNES`].
pub fn mattermost_text(n: &Notification) -> String {
    truncate_chars(&render(n, |v| mattermost_escape(&sanitize_value(v))), MATTERMOST_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Webhook envelope `{"version":1,"event","delivery_id","created_at","incident"}`.
pub fn webhook_body(n: &Notification, delivery_id: &str) -> Value {
    webhook_body_at(n, delivery_id, SystemTime::now())
}

/// [`webhook_body`] with an explicit creation time (deterministic tests).
pub fn webhook_body_at(n: &Notification, delivery_id: &str, created_at: SystemTime) -> Value {
    json!({
        "version": 1,
        "event": WEBHOOK_EVENT,
        "delivery_id": delivery_id,
        "created_at": rfc3339_nano_utc(created_at),
        "incident": n,
    })
}

/// Webhook envelope `event` of a resolve notice.
pub const WEBHOOK_RESOLVED_EVENT: &str = "incident.resolved";

/// An incident whose alerts all resolved: what its resolve notice says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResolvedNotice {
    pub incident_id: IncidentId,
    /// Name of the alert (the incident's title).
    pub alert_name: String,
    /// `type:name` of the AlertSource.
    pub source: String,
    pub severity: Severity,
    /// Always `resolved`.
    pub alert_status: AlertStatus,
    /// RFC 3339 time the incident resolved.
    pub resolved_at: String,
}

/// The chat line of a resolve notice: `Resolved: <alert name> (<incident id>) at <time>`,
/// values sanitised like every inserted value.
pub fn resolved_text(n: &ResolvedNotice) -> String {
    format!(
        "Resolved: {} ({}) at {}",
        sanitize_value(&n.alert_name),
        sanitize_value(&n.incident_id),
        sanitize_value(&n.resolved_at)
    )
}

/// Webhook envelope of a resolve notice: the shape of [`webhook_body`] with event
/// `incident.resolved`.
pub fn resolved_webhook_body(n: &ResolvedNotice, delivery_id: &str) -> Value {
    json!({
        "version": 1,
        "event": WEBHOOK_RESOLVED_EVENT,
        "delivery_id": delivery_id,
        "created_at": rfc3339_nano_utc(SystemTime::now()),
        "incident": n,
    })
}

/// Webhook envelope `event` of an investigation that failed.
pub const WEBHOOK_FAILED_EVENT: &str = "incident.investigation_failed";

/// An incident whose investigation failed for good: what the people on call are told,
/// so that they know the alert was not investigated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedNotice {
    pub incident_id: IncidentId,
    /// Name of the alert (the incident's title).
    pub alert_name: String,
    /// `type:name` of the AlertSource.
    pub source: String,
    pub severity: Severity,
    /// The last Run of the job, when one started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_url: Option<String>,
    /// Stable code of the failure (`upstream_error`, `structure_failed`, `budget_exceeded`, …).
    pub error_code: String,
    /// Why, sanitised (no secret the host knows).
    pub error: String,
    /// Attempts made.
    pub attempts: u32,
}

/// The chat text of a failed investigation, values sanitised like every inserted value.
fn failed_lines(n: &FailedNotice, value: impl Fn(&str) -> String) -> String {
    let mut lines = vec![
        "Akritas could not investigate this incident".to_string(),
        format!("Alert: {}", value(&n.alert_name)),
        format!("Severity: {}", value(n.severity.as_str())),
        format!("Source: {}", value(&n.source)),
        format!("Group: {}", value(&n.incident_id)),
        format!("Failure: {}", value(&n.error_code)),
        format!("Reason: {}", value(&n.error)),
        format!("Attempts: {}", n.attempts),
    ];
    lines.extend(n.run_id.as_deref().map(|id| format!("Run ID: {}", value(id))));
    lines.extend(n.run_url.as_deref().map(|url| format!("Run: {}", value(url))));
    lines.push("Look at the alert yourself: nothing was concluded about it.".to_string());
    lines.join("\n")
}

/// Plain-text Telegram message of a failed investigation.
pub fn failed_telegram_text(n: &FailedNotice) -> String {
    truncate_chars(&failed_lines(n, sanitize_value), TELEGRAM_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Mattermost message of a failed investigation (Markdown-escaped values).
pub fn failed_mattermost_text(n: &FailedNotice) -> String {
    let text = failed_lines(n, |v| mattermost_escape(&sanitize_value(v)));
    truncate_chars(&text, MATTERMOST_MAX_RUNES, TRUNCATION_SUFFIX)
}

/// Webhook envelope of a failed investigation: the shape of [`webhook_body`] with
/// event `incident.investigation_failed`.
pub fn failed_webhook_body(n: &FailedNotice, delivery_id: &str) -> Value {
    json!({
        "version": 1,
        "event": WEBHOOK_FAILED_EVENT,
        "delivery_id": delivery_id,
        "created_at": rfc3339_nano_utc(SystemTime::now()),
        "incident": n,
    })
}

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

/// RFC 3339 UTC timestamp with nanoseconds, trailing zeros trimmed like Go's
/// `time.RFC3339Nano` (e.g. `2026-11-30T06:36:31.5Z`).
pub fn rfc3339_nano_utc(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, day) = civil_from_days(days);
    let mut s = format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}", rem / 3600, (rem % 3600) / 60, rem % 60);
    let nanos = d.subsec_nanos();
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        s.push('.');
        s.push_str(frac.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

// Howard Hinnant's days-from-civil inverse.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// What a delivery carries: an investigation's result, a resolve notice, or the
/// notice that an investigation failed.
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// `incident.investigated`.
    Investigated(&'a Notification),
    /// `incident.resolved`.
    Resolved(&'a ResolvedNotice),
    /// `incident.investigation_failed`.
    Failed(&'a FailedNotice),
    /// `schedule.checked`.
    Checked(&'a ScheduleNotice),
}

impl Payload<'_> {
    /// The Telegram text.
    pub fn telegram_text(&self) -> String {
        match self {
            Payload::Investigated(n) => telegram_text(n),
            Payload::Resolved(n) => resolved_text(n),
            Payload::Failed(n) => failed_telegram_text(n),
            Payload::Checked(n) => checked_text(n),
        }
    }

    /// The Mattermost text (Markdown-escaped).
    pub fn mattermost_text(&self) -> String {
        match self {
            Payload::Investigated(n) => mattermost_text(n),
            Payload::Resolved(n) => mattermost_escape(&resolved_text(n)),
            Payload::Failed(n) => failed_mattermost_text(n),
            Payload::Checked(n) => checked_mattermost_text(n),
        }
    }

    /// The Slack mrkdwn text: the plain text (values sanitised) with `&`, `<` and `>` escaped.
    pub fn slack_text(&self) -> String {
        super::slack::slack_escape(&self.telegram_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    pub(crate) fn sample() -> Notification {
        Notification {
            incident_id: "inc-1".into(),
            run_id: Some("run-1".into()),
            run_url: run_url(Some("https://akritas.test/"), "run-1"),
            source: "alertmanager:prod".into(),
            title: "HighCPU".into(),
            severity: Severity::Critical,
            status: AlertStatus::Firing,
            entity: "deployment:shop/api".into(),
            finding: FindingStatus::Suspected,
            confidence: Confidence::Medium,
            actionability: Actionability::RequiresHuman,
            summary: "CPU   is\n\thigh".into(),
            impact: String::new(),
            evidence: vec!["tool-call:call_1".into()],
            ruled_out: Vec::new(),
            affected_components: vec!["api".into()],
            recommended_actions: vec!["scale up".into(), "  ".into()],
            evidence_count: 3,
            evidence_coverage: Some(EvidenceCoverage { claims: 3, verified: 2, ratio: 2.0 / 3.0, backs_status: true }),
            refused_evidence: 0,
            status_downgrade: None,
            production_writes: 0,
        }
    }

    #[test]
    fn run_url_from_public_url() {
        assert_eq!(run_url(Some("https://akritas.test/"), "abc").as_deref(), Some("https://akritas.test/runs/abc"));
        assert_eq!(run_url(None, "abc"), None);
        assert_eq!(run_url(Some("  "), "abc"), None);
    }

    #[test]
    fn telegram_layout_and_collapse() {
        let t = telegram_text(&sample());
        assert!(t.starts_with("Akritas incident investigation\nAlert status: firing\nFinding: suspected\n"));
        assert!(t.contains("Run: https://akritas.test/runs/run-1\n"));
        assert!(t.contains("\n\nSummary\nCPU is high\n"));
        assert!(t.contains("\n\nEvidence\n- tool-call:call_1\n\nAffected components\n- api\n"));
        assert!(t.contains(
            "\n\nRecommended actions\n- scale up\n\nEvidence items: 3\n\
             Evidence coverage: 2/3 (67%) with a verified quote\nProduction writes: 0"
        ));
        assert!(!t.contains("Impact") && !t.contains("Ruled out"), "empty sections are left out");
        assert!(!t.contains("- \n"));
    }

    #[test]
    fn mentions_neutralised_everywhere() {
        let mut n = sample();
        n.summary = "ping @channel and @here and @all".into();
        n.recommended_actions = vec!["tell @alice".into()];
        for t in [telegram_text(&n), mattermost_text(&n)] {
            assert!(!t.contains('@'), "{t}");
            assert!(t.contains("＠channel and ＠here and ＠all"));
            assert!(t.contains("tell ＠alice"));
        }
    }

    #[test]
    fn mattermost_escapes_markdown() {
        let mut n = sample();
        n.summary = "*CPU* _x_ `y` ~z~ [l](u) <b> #h \\".into();
        let t = mattermost_text(&n);
        assert!(t.contains("\\*CPU\\* \\_x\\_ \\`y\\` \\~z\\~ \\[l\\](u) \\<b\\> \\#h \\\\"), "{t}");
        // Telegram is plain text: no escaping.
        assert!(telegram_text(&n).contains("*CPU* _x_"));
    }

    #[test]
    fn truncation_exact_lengths() {
        let mut n = sample();
        n.summary = "é".repeat(50_000);
        let t = telegram_text(&n);
        assert_eq!(t.chars().count(), TELEGRAM_MAX_RUNES);
        assert!(t.ends_with(TRUNCATION_SUFFIX));
        let m = mattermost_text(&n);
        assert_eq!(m.chars().count(), MATTERMOST_MAX_RUNES);
        assert!(m.ends_with(TRUNCATION_SUFFIX));
        assert_eq!(truncate_chars("abc", 3, TRUNCATION_SUFFIX), "abc");
        assert_eq!(truncate_chars("abc", 2, TRUNCATION_SUFFIX).chars().count(), 2);
        let short = telegram_text(&sample());
        assert!(!short.ends_with(TRUNCATION_SUFFIX));
    }

    #[test]
    fn webhook_envelope_fields() {
        let t = UNIX_EPOCH + Duration::new(1_780_000_000, 500_000_000);
        let v = webhook_body_at(&sample(), "d1", t);
        assert_eq!(v["version"], 1);
        assert_eq!(v["event"], "incident.investigated");
        assert_eq!(v["delivery_id"], "d1");
        assert_eq!(v["created_at"], "2026-05-28T20:26:40.5Z");
        assert_eq!(v["incident"]["status"], "firing");
        assert_eq!(v["incident"]["run_url"], "https://akritas.test/runs/run-1");
        assert_eq!(v["incident"]["evidence_count"], 3);
        assert_eq!(v["incident"]["evidence_coverage"]["verified"], 2);
        assert_eq!(v["incident"]["evidence_coverage"]["claims"], 3);
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339_nano_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_nano_utc(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn a_failed_investigation_says_what_failed_and_why_with_mentions_neutralised() {
        let notice = FailedNotice {
            incident_id: "inc_1".into(),
            alert_name: "HighLoad".into(),
            source: "alertmanager:am".into(),
            severity: Severity::Critical,
            run_id: Some("run_1".into()),
            run_url: Some("https://akritas.example/runs/run_1".into()),
            error_code: "upstream_error".into(),
            error: "cannot reach the model server @here".into(),
            attempts: 3,
        };
        let text = failed_telegram_text(&notice);
        assert!(text.starts_with("Akritas could not investigate this incident\nAlert: HighLoad\n"), "{text}");
        for line in
            ["Failure: upstream_error", "Reason: cannot reach the model server ＠here", "Attempts: 3", "Run ID: run_1"]
        {
            assert!(text.contains(line), "{line:?} missing in {text}");
        }
        assert!(failed_mattermost_text(&notice).contains("Failure: upstream\\_error"));
        let body = failed_webhook_body(&notice, "d1");
        assert_eq!(
            (body["event"].as_str(), body["incident"]["error_code"].as_str()),
            (Some(WEBHOOK_FAILED_EVENT), Some("upstream_error"))
        );
    }

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
