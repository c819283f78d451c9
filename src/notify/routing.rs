//! Receiver routing (`NotificationReceiver.spec.routing`): whether a notification about an
//! incident goes to a receiver now, or is filtered, and why. Pure: the caller gives the
//! time, so tests inject it.

use std::collections::BTreeMap;

use jiff::Timestamp;

use crate::resources::notification_receiver::{QuietWindow, Routing, Weekday, clock_minutes, offset_seconds};
use crate::severity::Severity;

/// What routing looks at in an incident.
#[derive(Clone, Debug)]
pub struct RouteFacts<'a> {
    /// Normalised severity.
    pub severity: Severity,
    /// The raw `severity` label, when the alert had one.
    pub severity_label: Option<&'a str>,
    /// Name of the AlertSource.
    pub alert_source: &'a str,
    /// Namespace of the incident.
    pub namespace: &'a str,
    /// Labels all of the incident's alerts share.
    pub labels: &'a BTreeMap<String, String>,
}

/// Why a notification was not sent to a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterReason {
    /// The severity is not in `severities`.
    Severity,
    /// The AlertSource is not in `alertSources`.
    AlertSource,
    /// The incident's namespace is not in `namespaces`.
    Namespace,
    /// A `matchLabels` entry does not match.
    Labels,
    /// The time falls in a quiet window.
    QuietWindow,
}

impl FilterReason {
    /// The stable reason code (stored on the delivery and used as a metric label).
    pub fn code(self) -> &'static str {
        match self {
            FilterReason::Severity => "severity",
            FilterReason::AlertSource => "alert_source",
            FilterReason::Namespace => "namespace",
            FilterReason::Labels => "labels",
            FilterReason::QuietWindow => "quiet_window",
        }
    }
}

/// `None` when `routing` lets the notification through at `now`; else the first reason
/// it is filtered (filters in the order severity, source, namespace, labels, then quiet windows).
pub fn filter(routing: Option<&Routing>, facts: &RouteFacts<'_>, now: Timestamp) -> Option<FilterReason> {
    let routing = routing?;
    let severity_ok = routing.severities.is_empty()
        || routing.severities.iter().any(|s| {
            s.eq_ignore_ascii_case(facts.severity.as_str())
                || facts.severity_label.is_some_and(|l| s.eq_ignore_ascii_case(l))
        });
    if !severity_ok {
        return Some(FilterReason::Severity);
    }
    if !routing.alert_sources.is_empty() && !routing.alert_sources.iter().any(|s| s == facts.alert_source) {
        return Some(FilterReason::AlertSource);
    }
    if !routing.namespaces.is_empty() && !routing.namespaces.iter().any(|n| n == facts.namespace) {
        return Some(FilterReason::Namespace);
    }
    if !routing.match_labels.iter().all(|(k, v)| facts.labels.get(k) == Some(v)) {
        return Some(FilterReason::Labels);
    }
    if routing.quiet_windows.iter().any(|w| in_quiet_window(w, now)) {
        return Some(FilterReason::QuietWindow);
    }
    None
}

/// Day index of a weekday, Monday 0.
fn day_index(day: Weekday) -> u8 {
    match day {
        Weekday::Mon => 0,
        Weekday::Tue => 1,
        Weekday::Wed => 2,
        Weekday::Thu => 3,
        Weekday::Fri => 4,
        Weekday::Sat => 5,
        Weekday::Sun => 6,
    }
}

/// Whether `now` falls in `window`: from `start` (inclusive) to `end` (exclusive) in the
/// window's UTC offset, starting on one of its days; a window whose end is before its start
/// runs past midnight into the next day. A window that does not parse (validation refuses
/// it) is never quiet.
pub fn in_quiet_window(window: &QuietWindow, now: Timestamp) -> bool {
    let (Some(start), Some(end)) = (clock_minutes(&window.start), clock_minutes(&window.end)) else { return false };
    let Some(offset) = offset_seconds(window.utc_offset.as_deref().unwrap_or("+00:00")) else { return false };
    let local = now.as_second() + i64::from(offset);
    let minute = u16::try_from(local.rem_euclid(86_400) / 60).unwrap_or(0);
    // 1970-01-01 was a Thursday (index 3).
    let today = u8::try_from((local.div_euclid(86_400) + 3).rem_euclid(7)).unwrap_or(0);
    let starts_on = |day: u8| window.days.is_empty() || window.days.iter().any(|d| day_index(*d) == day);
    if start < end {
        starts_on(today) && (start..end).contains(&minute)
    } else {
        (starts_on(today) && minute >= start) || (starts_on((today + 6) % 7) && minute < end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(days: &[Weekday], start: &str, end: &str, offset: Option<&str>) -> QuietWindow {
        QuietWindow {
            days: days.to_vec(),
            start: start.into(),
            end: end.into(),
            utc_offset: offset.map(str::to_string),
        }
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn quiet_windows_follow_days_offsets_and_midnight() {
        // 2026-03-02 is a Monday.
        let night = window(&[Weekday::Mon], "22:00", "06:00", Some("+02:00"));
        assert!(in_quiet_window(&night, at("2026-03-02T20:30:00Z")), "Mon 22:30 local");
        assert!(in_quiet_window(&night, at("2026-03-03T03:59:00Z")), "Tue 05:59 local, started Monday");
        assert!(!in_quiet_window(&night, at("2026-03-03T04:00:00Z")), "Tue 06:00 local: the end is exclusive");
        assert!(!in_quiet_window(&night, at("2026-03-03T20:30:00Z")), "Tue 22:30 local: not a start day");
        let office = window(&[], "09:00", "17:00", None);
        assert!(in_quiet_window(&office, at("2026-03-07T09:00:00Z")));
        assert!(!in_quiet_window(&office, at("2026-03-07T17:00:00Z")));
        let west = window(&[Weekday::Sun], "23:00", "23:30", Some("-05:00"));
        assert!(in_quiet_window(&west, at("2026-03-09T04:10:00Z")), "Sun 23:10 at -05:00 is Mon 04:10 UTC");
    }

    #[test]
    fn filters_name_the_first_reason() {
        let labels: BTreeMap<String, String> = [("team".to_string(), "db".to_string())].into();
        let facts = RouteFacts {
            severity: Severity::Critical,
            severity_label: Some("page"),
            alert_source: "am",
            namespace: "ops",
            labels: &labels,
        };
        let now = at("2026-03-02T12:00:00Z");
        assert_eq!(filter(None, &facts, now), None);
        let mut routing = Routing { severities: vec!["page".into()], ..Routing::default() };
        assert_eq!(filter(Some(&routing), &facts, now), None, "the raw severity label matches too");
        routing.severities = vec!["warning".into()];
        assert_eq!(filter(Some(&routing), &facts, now), Some(FilterReason::Severity));
        routing.severities.clear();
        routing.alert_sources = vec!["other".into()];
        assert_eq!(filter(Some(&routing), &facts, now), Some(FilterReason::AlertSource));
        routing.alert_sources = vec!["am".into()];
        routing.namespaces = vec!["prod".into()];
        assert_eq!(filter(Some(&routing), &facts, now), Some(FilterReason::Namespace));
        routing.namespaces.clear();
        routing.match_labels = [("team".to_string(), "web".to_string())].into();
        assert_eq!(filter(Some(&routing), &facts, now), Some(FilterReason::Labels));
        routing.match_labels = labels.clone();
        routing.quiet_windows = vec![window(&[], "11:00", "13:00", None)];
        assert_eq!(filter(Some(&routing), &facts, now).map(FilterReason::code), Some("quiet_window"));
        assert_eq!(filter(Some(&routing), &facts, at("2026-03-02T13:00:00Z")), None);
    }
}
