//! `kubernetes.events`: Events of a namespace or of one object, read from both
//! `events.k8s.io/v1` and core `v1` (two views of the same stored objects, merged by
//! uid), grouped by object, type and reason with counts, newest first.

use std::collections::BTreeMap;
use std::fmt::Debug;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as NewEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::ListParams;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::api::{self, Ctx, Failure};
use super::objects::describe;
use crate::text::{ELLIPSIS, truncate_bytes};

pub const NAME: &str = "kubernetes.events";

pub const DESCRIPTION: &str = "Kubernetes Events of a namespace, or of one object (`kind` + `name`, such as Pod \
web-5d9f-x2k4q or Deployment web), from both the events.k8s.io and core Events APIs, deduplicated and grouped by \
object, type and reason: how many times, first and last seen, the latest message and which controller reported it, \
newest first. Use it early for a pod that crash-loops, is not scheduled, fails probes or image pulls, is OOM-killed or \
evicted, for a failing rollout or a node problem, and to see what the cluster did around an alert's time \
(`sinceMinutes`). `type: Warning` keeps only warnings. Events expire (about an hour by default), so an empty result \
does not prove nothing happened.";

/// Items asked for per page, and most pages read from each API.
const PAGE: u32 = 500;
const MAX_PAGES: usize = 2;
/// Most bytes of a group's message.
const MESSAGE_BYTES: usize = 512;

pub fn schema() -> Value {
    api::arguments_schema(
        &[],
        json!({
            "namespace": api::namespace_schema(),
            "kind": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]{0,62}$",
                "description": "Kind of the object the events are about, such as Pod, Deployment, Node."},
            "name": api::name_schema("Name of the object the events are about."),
            "type": {"type": "string", "enum": ["Normal", "Warning"]},
            "sinceMinutes": {"type": "integer", "minimum": 1, "maximum": 10080,
                "description": "Only events last seen in this many minutes."},
        }),
    )
}

/// One stored Event, whichever API it was read from.
#[derive(Clone, Debug, PartialEq)]
struct Occurrence {
    uid: String,
    kind: String,
    name: String,
    type_: String,
    reason: String,
    count: u64,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    message: String,
    source: String,
}

/// The number an Event stands for: its series or deprecated count, at least 1.
fn event_count(counts: &[Option<i32>]) -> u64 {
    counts.iter().flatten().filter_map(|c| u64::try_from(*c).ok()).max().unwrap_or(0).max(1)
}

/// First and last seen: the first timestamp (else the event time, else the last
/// observation, else the creation) and the latest observation (else the first).
fn seen(
    metadata: &ObjectMeta,
    first_timestamp: Option<Timestamp>,
    event_time: Option<Timestamp>,
    observed: &[Option<Timestamp>],
) -> (Option<Timestamp>, Option<Timestamp>) {
    let latest = observed.iter().chain([&event_time]).flatten().max().copied();
    let first = first_timestamp.or(event_time).or(latest).or_else(|| metadata.creation_timestamp.as_ref().map(|t| t.0));
    (first, latest.max(first))
}

impl Occurrence {
    fn from_new(event: &NewEvent) -> Self {
        let regarding = event.regarding.as_ref();
        let series = event.series.as_ref();
        let (first, last) = seen(
            &event.metadata,
            event.deprecated_first_timestamp.as_ref().map(|t| t.0),
            event.event_time.as_ref().map(|t| t.0),
            &[series.map(|s| s.last_observed_time.0), event.deprecated_last_timestamp.as_ref().map(|t| t.0)],
        );
        Self {
            uid: uid_of(&event.metadata),
            kind: regarding.and_then(|r| r.kind.clone()).unwrap_or_default(),
            name: regarding.and_then(|r| r.name.clone()).unwrap_or_default(),
            type_: event.type_.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            count: event_count(&[event.deprecated_count, series.map(|s| s.count)]),
            first,
            last,
            message: event.note.clone().unwrap_or_default(),
            source: event
                .reporting_controller
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| event.deprecated_source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
        }
    }

    fn from_core(event: &CoreEvent) -> Self {
        let series = event.series.as_ref();
        let (first, last) = seen(
            &event.metadata,
            event.first_timestamp.as_ref().map(|t| t.0),
            event.event_time.as_ref().map(|t| t.0),
            &[
                series.and_then(|s| s.last_observed_time.as_ref().map(|t| t.0)),
                event.last_timestamp.as_ref().map(|t| t.0),
            ],
        );
        Self {
            uid: uid_of(&event.metadata),
            kind: event.involved_object.kind.clone().unwrap_or_default(),
            name: event.involved_object.name.clone().unwrap_or_default(),
            type_: event.type_.clone().unwrap_or_default(),
            reason: event.reason.clone().unwrap_or_default(),
            count: event_count(&[event.count, series.and_then(|s| s.count)]),
            first,
            last,
            message: event.message.clone().unwrap_or_default(),
            source: event
                .reporting_component
                .clone()
                .filter(|c| !c.is_empty())
                .or_else(|| event.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
        }
    }

    /// Folds the other API's view of the same Event into this one.
    fn merge(&mut self, other: Occurrence) {
        self.count = self.count.max(other.count);
        self.first = [self.first, other.first].into_iter().flatten().min();
        if other.last > self.last {
            self.last = other.last;
            if !other.message.is_empty() {
                self.message = other.message;
            }
        }
        if self.source.is_empty() {
            self.source = other.source;
        }
    }
}

/// The uid (the name when a stored Event has none, which the API server never allows).
fn uid_of(metadata: &ObjectMeta) -> String {
    metadata.uid.clone().or_else(|| metadata.name.clone()).unwrap_or_default()
}

/// Events of both APIs, one per uid.
fn merge_by_uid(occurrences: impl IntoIterator<Item = Occurrence>) -> Vec<Occurrence> {
    let mut by_uid: BTreeMap<String, Occurrence> = BTreeMap::new();
    for occurrence in occurrences {
        match by_uid.get_mut(&occurrence.uid) {
            Some(known) => known.merge(occurrence),
            None => {
                by_uid.insert(occurrence.uid.clone(), occurrence);
            }
        }
    }
    by_uid.into_values().collect()
}

/// Events of one object with one type and reason.
#[derive(Clone, Debug, PartialEq)]
struct Group {
    kind: String,
    name: String,
    type_: String,
    reason: String,
    count: u64,
    events: usize,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
    message: String,
    source: String,
}

impl Group {
    fn to_json(&self) -> Value {
        json!({
            "object": format!("{}/{}", self.kind, self.name),
            "type": self.type_,
            "reason": self.reason,
            "count": self.count,
            "events": self.events,
            "first_seen": self.first.map(|t| t.to_string()),
            "last_seen": self.last.map(|t| t.to_string()),
            "message": truncate_bytes(&self.message, MESSAGE_BYTES, ELLIPSIS),
            "source": self.source,
        })
    }
}

/// Groups by (object, type, reason), keeping events last seen at or after `since`
/// (every event without `since`); newest last-seen first.
fn group(occurrences: Vec<Occurrence>, since: Option<Timestamp>) -> Vec<Group> {
    let mut groups: BTreeMap<(String, String, String, String), Group> = BTreeMap::new();
    for event in occurrences {
        if let Some(since) = since
            && event.last.is_none_or(|last| last < since)
        {
            continue;
        }
        let key = (event.kind.clone(), event.name.clone(), event.type_.clone(), event.reason.clone());
        match groups.get_mut(&key) {
            Some(group) => {
                group.count += event.count;
                group.events += 1;
                group.first = [group.first, event.first].into_iter().flatten().min();
                if event.last >= group.last {
                    group.last = event.last;
                    group.message = event.message;
                    group.source = event.source;
                }
            }
            None => {
                groups.insert(
                    key,
                    Group {
                        kind: event.kind,
                        name: event.name,
                        type_: event.type_,
                        reason: event.reason,
                        count: event.count,
                        events: 1,
                        first: event.first,
                        last: event.last,
                        message: event.message,
                        source: event.source,
                    },
                );
            }
        }
    }
    let mut groups: Vec<Group> = groups.into_values().collect();
    // Newest first; groups without any time last.
    groups.sort_by_key(|g| std::cmp::Reverse(g.last));
    groups
}

/// A field selector value with `\`, `,` and `=` escaped.
fn escape_selector(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The field selector of one API (`regarding` or `involvedObject`).
fn selector(prefix: &str, kind: Option<&str>, name: Option<&str>, type_: Option<&str>) -> String {
    let mut parts = Vec::new();
    if let Some(kind) = kind {
        parts.push(format!("{prefix}.kind={}", escape_selector(kind)));
    }
    if let Some(name) = name {
        parts.push(format!("{prefix}.name={}", escape_selector(name)));
    }
    if let Some(type_) = type_ {
        parts.push(format!("type={}", escape_selector(type_)));
    }
    parts.join(",")
}

/// At most [`MAX_PAGES`] pages; whether more remained unread.
async fn read_pages<K>(events: &Api<K>, fields: &str) -> Result<(Vec<K>, bool), kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    if !fields.is_empty() {
        params = params.fields(fields);
    }
    for _ in 0..MAX_PAGES {
        let page = events.list(&params).await?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok((items, false)),
        }
    }
    Ok((items, true))
}

/// `kubernetes.events`.
pub async fn events(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let kind = api::text(&args, "kind").map(api::canonical_kind);
    let name = api::text(&args, "name");
    let type_ = api::text(&args, "type");
    let since = api::number(&args, "sinceMinutes")
        .map(|minutes| Timestamp::now() - SignedDuration::from_mins(i64::try_from(minutes).unwrap_or(10080)));
    let (new_api, namespace) = ctx.namespaced::<NewEvent>(api::text(&args, "namespace"))?;
    let (core_api, _) = ctx.namespaced::<CoreEvent>(Some(&namespace))?;
    let new_fields = selector("regarding", kind, name, type_);
    let core_fields = selector("involvedObject", kind, name, type_);
    let (new_read, core_read) = tokio::join!(read_pages(&new_api, &new_fields), read_pages(&core_api, &core_fields));

    let mut notes = Vec::new();
    let mut occurrences = Vec::new();
    let mut read = serde_json::Map::new();
    let new_failure = match new_read {
        Ok((items, more)) => {
            read.insert("events.k8s.io/v1".into(), json!(items.len()));
            if more {
                notes.push(unread_note("events.k8s.io/v1"));
            }
            occurrences.extend(items.iter().map(Occurrence::from_new));
            None
        }
        Err(e) => Some(Failure::from_kube(e, &describe("list", "events.events.k8s.io", None, Some(&namespace)))),
    };
    let core_failure = match core_read {
        Ok((items, more)) => {
            read.insert("v1".into(), json!(items.len()));
            if more {
                notes.push(unread_note("v1"));
            }
            occurrences.extend(items.iter().map(Occurrence::from_core));
            None
        }
        Err(e) => Some(Failure::from_kube(e, &describe("list", "events", None, Some(&namespace)))),
    };
    match (&new_failure, &core_failure) {
        (Some(new), Some(core)) => {
            return Err(Failure::new(format!(
                "neither Events API could be read: events.k8s.io/v1: {}; core v1: {}",
                new.message(),
                core.message()
            )));
        }
        (Some(failed), None) => {
            notes.push(format!("events.k8s.io/v1 could not be read ({}); core v1 Events were used", failed.message()))
        }
        (None, Some(failed)) => {
            notes.push(format!("core v1 Events could not be read ({}); events.k8s.io/v1 was used", failed.message()))
        }
        (None, None) => {}
    }

    let unique = merge_by_uid(occurrences);
    let total = unique.len();
    let groups = group(unique, since);
    let omitted = groups.len().saturating_sub(ctx.limits.max_entries);
    let shown: Vec<Value> = groups.iter().take(ctx.limits.max_entries).map(Group::to_json).collect();
    let mut out = json!({
        "namespace": namespace,
        "events_read": read,
        "events": total,
        "groups": shown,
        "omitted": omitted,
    });
    if kind.is_some() || name.is_some() {
        out["object"] = json!(format!("{}/{}", kind.unwrap_or("*"), name.unwrap_or("*")));
    }
    if let Some(since) = since {
        out["since"] = json!(since.to_string());
    }
    if total == 0 {
        notes.push("no Events matched; Events expire (about an hour by default)".into());
    }
    if !notes.is_empty() {
        out["notes"] = json!(notes);
    }
    Ok(out)
}

fn unread_note(api: &str) -> String {
    let read = PAGE as usize * MAX_PAGES;
    format!("more than {read} Events matched in {api}; only the first {read} were read (name an object or a `type`)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Option<Timestamp> {
        Some(text.parse().unwrap())
    }

    fn core(value: Value) -> Occurrence {
        Occurrence::from_core(&serde_json::from_value(value).unwrap())
    }

    fn new(value: Value) -> Occurrence {
        Occurrence::from_new(&serde_json::from_value(value).unwrap())
    }

    #[test]
    fn both_views_of_one_event_count_once() {
        let core_view = core(json!({
            "metadata": {"name": "web.1", "uid": "u1", "creationTimestamp": "2026-01-01T10:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "web"}, "type": "Warning", "reason": "BackOff",
            "count": 5, "firstTimestamp": "2026-01-01T10:00:00Z", "lastTimestamp": "2026-01-01T10:05:00Z",
            "message": "Back-off restarting failed container", "source": {"component": "kubelet"}
        }));
        let new_view = new(json!({
            "metadata": {"name": "web.1", "uid": "u1", "creationTimestamp": "2026-01-01T10:00:00Z"},
            "eventTime": null, "regarding": {"kind": "Pod", "name": "web"}, "type": "Warning", "reason": "BackOff",
            "deprecatedCount": 5, "deprecatedFirstTimestamp": "2026-01-01T10:00:00Z",
            "deprecatedLastTimestamp": "2026-01-01T10:05:00Z", "note": "Back-off restarting failed container",
            "deprecatedSource": {"component": "kubelet"}
        }));
        assert_eq!(core_view, new_view);
        let other = new(json!({
            "metadata": {"name": "web.2", "uid": "u2", "creationTimestamp": "2026-01-01T10:06:00Z"},
            "eventTime": "2026-01-01T10:06:00.123456Z", "regarding": {"kind": "Pod", "name": "web"},
            "type": "Warning", "reason": "BackOff", "note": "again", "reportingController": "kubelet",
            "reportingInstance": "node-1", "action": "Restart"
        }));
        let merged = merge_by_uid([core_view, new_view, other]);
        assert_eq!(merged.len(), 2);
        let groups = group(merged, None);
        assert_eq!(groups.len(), 1);
        let g = &groups[0];
        assert_eq!((g.count, g.events), (6, 2));
        assert_eq!(g.first, at("2026-01-01T10:00:00Z"));
        assert_eq!(g.last, at("2026-01-01T10:06:00.123456Z"));
        assert_eq!((g.message.as_str(), g.source.as_str()), ("again", "kubelet"));
    }

    #[test]
    fn groups_are_newest_first_and_the_window_drops_old_events() {
        let event = |uid: &str, reason: &str, last: &str| Occurrence {
            uid: uid.into(),
            kind: "Pod".into(),
            name: "web".into(),
            type_: "Normal".into(),
            reason: reason.into(),
            count: 1,
            first: at(last),
            last: at(last),
            message: String::new(),
            source: String::new(),
        };
        let groups = group(
            vec![
                event("a", "Scheduled", "2026-01-01T09:00:00Z"),
                event("b", "Pulled", "2026-01-01T10:00:00Z"),
                event("c", "Started", "2026-01-01T09:30:00Z"),
            ],
            None,
        );
        let reasons: Vec<&str> = groups.iter().map(|g| g.reason.as_str()).collect();
        assert_eq!(reasons, ["Pulled", "Started", "Scheduled"]);
        let recent = group(
            vec![event("a", "Scheduled", "2026-01-01T09:00:00Z"), event("b", "Pulled", "2026-01-01T10:00:00Z")],
            at("2026-01-01T09:59:00Z"),
        );
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].reason, "Pulled");
    }

    #[test]
    fn series_count_and_time_win_over_the_first_observation() {
        let occurrence = new(json!({
            "metadata": {"name": "e", "uid": "u", "creationTimestamp": "2026-01-01T10:00:00Z"},
            "eventTime": "2026-01-01T10:00:00Z", "regarding": {"kind": "Pod", "name": "web"},
            "type": "Warning", "reason": "Unhealthy", "reportingController": "kubelet",
            "reportingInstance": "n", "action": "Probe",
            "series": {"count": 40, "lastObservedTime": "2026-01-01T10:20:00Z"}
        }));
        assert_eq!(occurrence.count, 40);
        assert_eq!(occurrence.last, at("2026-01-01T10:20:00Z"));
        assert_eq!(occurrence.first, at("2026-01-01T10:00:00Z"));
        // Written later than it happened (a relayed or replayed Event): its own times count.
        let relayed = core(json!({
            "metadata": {"name": "e", "uid": "u", "creationTimestamp": "2026-01-01T11:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "db"}, "reason": "Unhealthy",
            "lastTimestamp": "2026-01-01T10:30:00Z"
        }));
        assert_eq!((relayed.first, relayed.last), (at("2026-01-01T10:30:00Z"), at("2026-01-01T10:30:00Z")));
    }

    #[test]
    fn selectors_name_the_object_in_each_api_and_escape_values() {
        assert_eq!(
            selector("regarding", Some("Pod"), Some("web"), Some("Warning")),
            "regarding.kind=Pod,regarding.name=web,type=Warning"
        );
        assert_eq!(selector("involvedObject", None, Some("a,b=c"), None), "involvedObject.name=a\\,b\\=c");
        assert_eq!(selector("regarding", None, None, None), "");
    }
}
