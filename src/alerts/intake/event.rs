//! Canonical, provider-independent alert event (`schema_version` 1).
//!
//! Adapters build an [`Event`] from a provider payload and then call [`Event::normalize`], which trims and
//! rune-bounds every string, sanitises maps and links, fills default times, validates, and derives the
//! correlation and deduplication keys when they are absent.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const SCHEMA_VERSION: u32 = 1;

pub const MAX_PROVIDER_EVENT_ID: usize = 512;
pub const MAX_NAME: usize = 256;
pub const MAX_SUMMARY: usize = 4096;
pub const MAX_DESCRIPTION: usize = 8192;
pub const MAX_ENTITY_KIND: usize = 64;
pub const MAX_ENTITY_ID: usize = 512;
pub const MAX_ENTITY_DISPLAY_NAME: usize = 512;
pub const MAX_KEY: usize = 512;
pub const MAX_RELATED_ENTITIES: usize = 32;
pub const MAX_MAP_ENTRIES: usize = 64;
pub const MAX_MAP_KEY: usize = 128;
pub const MAX_MAP_VALUE: usize = 2048;
pub const MAX_LINKS: usize = 16;
pub const MAX_LINK_TYPE: usize = 64;
pub const MAX_LINK_URL: usize = 4096;
/// Length bound of source type/name and entity kind identifiers (`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$`).
pub const MAX_IDENTIFIER: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventState {
    Firing,
    Resolved,
}

impl EventState {
    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Firing => "firing",
            EventState::Resolved => "resolved",
        }
    }

    /// The state vocabulary of providers: firing/triggered/down/failed/alert/open → firing;
    /// resolved/up/ok/recovered/closed → resolved; anything else is rejected (`None`).
    pub fn parse_lenient(raw: &str) -> Option<EventState> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "firing" | "triggered" | "down" | "failed" | "alert" | "open" => Some(EventState::Firing),
            "resolved" | "up" | "ok" | "recovered" | "closed" => Some(EventState::Resolved),
            _ => None,
        }
    }
}

impl fmt::Display for EventState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::severity::Severity;

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Source {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    /// Namespace of the AlertSource, set by the store from configuration (never the payload);
    /// empty in events decoded but not stored yet and in journals older than namespaces.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_event_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Entity {
    pub kind: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Link {
    #[serde(rename = "type")]
    pub kind: String,
    pub url: String,
}

/// Canonical alert event. `event_id` is host-assigned (`evt_<32hex>`) by the store, empty until then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Event {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub event_id: String,
    pub source: Source,
    pub state: EventState,
    pub name: String,
    pub severity: Severity,
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub entity: Entity,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_entities: Vec<Entity>,
    pub started_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
    pub observed_at: Timestamp,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    pub deduplication_key: String,
    pub correlation_key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ValidationError {
    pub field: &'static str,
    pub reason: String,
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ValidationError {
    ValidationError { field, reason: reason.into() }
}

impl Event {
    /// A minimal event skeleton; adapters fill the remaining fields and then call [`Event::normalize`].
    pub fn new(
        source_type: &str,
        source_name: &str,
        state: EventState,
        name: &str,
        entity: Entity,
        observed_at: Timestamp,
    ) -> Event {
        Event {
            schema_version: SCHEMA_VERSION,
            event_id: String::new(),
            source: Source {
                kind: source_type.to_owned(),
                name: source_name.to_owned(),
                namespace: String::new(),
                provider_event_id: None,
            },
            state,
            name: name.to_owned(),
            severity: Severity::Unknown,
            summary: String::new(),
            description: None,
            entity,
            related_entities: Vec::new(),
            started_at: observed_at,
            ended_at: None,
            observed_at,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            links: Vec::new(),
            deduplication_key: String::new(),
            correlation_key: String::new(),
        }
    }

    /// Trim and bound every field, sanitise maps/links, validate, and derive missing keys.
    pub fn normalize(mut self) -> Result<Event, ValidationError> {
        self.schema_version = SCHEMA_VERSION;
        self.source.kind = self.source.kind.trim().to_owned();
        self.source.name = self.source.name.trim().to_owned();
        self.source.provider_event_id = bound_opt(self.source.provider_event_id.take(), MAX_PROVIDER_EVENT_ID);
        self.name = bound(&self.name, MAX_NAME);
        self.summary = bound(&self.summary, MAX_SUMMARY);
        self.description = bound_opt(self.description.take(), MAX_DESCRIPTION);
        self.entity = normalize_entity(std::mem::take(&mut self.entity));

        let mut seen = BTreeSet::new();
        let related = std::mem::take(&mut self.related_entities);
        for entity in related.into_iter().map(normalize_entity) {
            if self.related_entities.len() >= MAX_RELATED_ENTITIES {
                break;
            }
            if entity.kind.is_empty() || entity.id.is_empty() {
                continue;
            }
            if seen.insert((entity.kind.clone(), entity.id.clone())) {
                self.related_entities.push(entity);
            }
        }

        self.labels = normalize_map(std::mem::take(&mut self.labels));
        self.annotations = normalize_map(std::mem::take(&mut self.annotations));
        let links = std::mem::take(&mut self.links);
        self.links = links
            .into_iter()
            .filter_map(|l| {
                let url = bound(&l.url, MAX_LINK_URL);
                is_absolute_http_url(&url).then(|| Link { kind: bound(&l.kind, MAX_LINK_TYPE).to_lowercase(), url })
            })
            .take(MAX_LINKS)
            .collect();
        self.deduplication_key = bound(&self.deduplication_key, MAX_KEY);
        self.correlation_key = bound(&self.correlation_key, MAX_KEY);

        if !is_identifier(&self.source.kind) {
            return Err(invalid("source.type", "must match ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"));
        }
        if !is_identifier(&self.source.name) {
            return Err(invalid("source.name", "must match ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"));
        }
        if self.name.is_empty() {
            return Err(invalid("name", "required"));
        }
        if self.summary.is_empty() {
            return Err(invalid("summary", "required"));
        }
        if !is_identifier(&self.entity.kind) {
            return Err(invalid("entity.kind", "required; must match ^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$"));
        }
        if self.entity.id.is_empty() {
            return Err(invalid("entity.id", "required"));
        }
        if let Some(ended) = self.ended_at
            && ended < self.started_at
        {
            return Err(invalid("ended_at", "must not be before started_at"));
        }

        if self.correlation_key.is_empty() {
            self.correlation_key = derive_correlation_key(&self);
        }
        if self.deduplication_key.is_empty() {
            self.deduplication_key = derive_deduplication_key(&self);
        }
        Ok(self)
    }
}

/// `hex(SHA-256("correlation"\0type\0name\0identity))`, identity = provider_event_id or `name\0kind\0id`.
pub fn derive_correlation_key(event: &Event) -> String {
    let identity = match &event.source.provider_event_id {
        Some(id) if !id.is_empty() => id.clone(),
        _ => format!("{}\0{}\0{}", event.name, event.entity.kind, event.entity.id),
    };
    hash_parts(&["correlation", &event.source.kind, &event.source.name, &identity])
}

/// `hex(SHA-256("event"\0type\0source name\0provider_event_id\0state\0name\0kind\0id\0started_at\0ended_at\0summary))`.
/// Times use RFC 3339 with nanosecond precision and trailing zeros trimmed (Go `RFC3339Nano`) in UTC.
pub fn derive_deduplication_key(event: &Event) -> String {
    let started = rfc3339_nano(event.started_at);
    let ended = event.ended_at.map(rfc3339_nano).unwrap_or_default();
    hash_parts(&[
        "event",
        &event.source.kind,
        &event.source.name,
        event.source.provider_event_id.as_deref().unwrap_or(""),
        event.state.as_str(),
        &event.name,
        &event.entity.kind,
        &event.entity.id,
        &started,
        &ended,
        &event.summary,
    ])
}

/// Hex SHA-256 of the parts joined with NUL bytes.
pub fn hash_parts(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            hasher.update([0u8]);
        }
        hasher.update(part.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// Go `time.RFC3339Nano` rendering of a UTC instant (fraction only when non-zero, trailing zeros trimmed).
pub fn rfc3339_nano(ts: Timestamp) -> String {
    // jiff's default Display for Timestamp is RFC 3339 in UTC ("Z") with the minimal fractional precision.
    ts.to_string()
}

/// Trim, then keep at most `max` Unicode scalar values.
pub fn bound(raw: &str, max: usize) -> String {
    crate::text::prefix_chars(raw.trim(), max).trim_end().to_owned()
}

fn bound_opt(raw: Option<String>, max: usize) -> Option<String> {
    raw.map(|s| bound(&s, max)).filter(|s| !s.is_empty())
}

fn normalize_entity(entity: Entity) -> Entity {
    Entity {
        kind: bound(&entity.kind, MAX_ENTITY_KIND).to_lowercase(),
        id: bound(&entity.id, MAX_ENTITY_ID),
        display_name: bound_opt(entity.display_name, MAX_ENTITY_DISPLAY_NAME),
    }
}

/// Keys lower-cased and bounded (empty dropped), values bounded; sorted, first 64 kept.
/// When two keys collide after lower-casing, the one that sorts first in the original map wins.
fn normalize_map(map: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let key = bound(&k, MAX_MAP_KEY).to_lowercase();
        if key.is_empty() {
            continue;
        }
        out.entry(key).or_insert_with(|| bound(&v, MAX_MAP_VALUE));
    }
    out.into_iter().take(MAX_MAP_ENTRIES).collect()
}

/// `^[A-Za-z0-9][A-Za-z0-9._:/-]{0,255}$`
pub fn is_identifier(s: &str) -> bool {
    let bytes = s.as_bytes();
    match bytes.first() {
        Some(first) if first.is_ascii_alphanumeric() => {}
        _ => return false,
    }
    bytes.len() <= MAX_IDENTIFIER
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-'))
}

/// Absolute `http`/`https` URL with a non-empty host (no whitespace or control characters).
pub fn is_absolute_http_url(url: &str) -> bool {
    let scheme_is = |prefix: &str| url.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix));
    let rest = if scheme_is("https://") {
        url.get(8..).unwrap_or("")
    } else if scheme_is("http://") {
        url.get(7..).unwrap_or("")
    } else {
        return false;
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = if host_port.starts_with('[') {
        host_port.split(']').next().map(|h| h.trim_start_matches('[')).unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    !host.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn sample() -> Event {
        let mut e = Event::new(
            "generic",
            "ops",
            EventState::Firing,
            "  HighCPU  ",
            Entity { kind: "Host".into(), id: "db-1".into(), display_name: None },
            ts("2026-11-29T22:41:16Z"),
        );
        e.summary = "CPU high".into();
        e
    }

    #[test]
    fn normalize_trims_lowercases_and_derives_keys() {
        let e = sample().normalize().unwrap();
        assert_eq!(e.name, "HighCPU");
        assert_eq!(e.entity.kind, "host");
        assert_eq!(e.deduplication_key.len(), 64);
        assert_eq!(e.correlation_key.len(), 64);
        assert_ne!(e.deduplication_key, e.correlation_key);
        // Keys are deterministic.
        assert_eq!(e, sample().normalize().unwrap());
    }

    #[test]
    fn dedup_key_depends_on_state_but_correlation_key_does_not() {
        let firing = sample().normalize().unwrap();
        let mut resolved = sample();
        resolved.state = EventState::Resolved;
        let resolved = resolved.normalize().unwrap();
        assert_ne!(firing.deduplication_key, resolved.deduplication_key);
        assert_eq!(firing.correlation_key, resolved.correlation_key);
    }

    #[test]
    fn known_hash_vector() {
        assert_eq!(hash_parts(&["a", "b"]), hex::encode(Sha256::digest(b"a\0b")));
        assert_eq!(rfc3339_nano(ts("2026-11-29T22:42:48.108000+01:00")), "2026-11-29T21:42:48.108Z");
    }

    #[test]
    fn bounds_truncate_by_runes() {
        let mut e = sample();
        e.name = "é".repeat(MAX_NAME + 10);
        e.summary = "x".repeat(MAX_SUMMARY * 2);
        e.description = Some("   ".into());
        for i in 0..100 {
            e.labels.insert(format!("Key{i:03}"), "v".repeat(MAX_MAP_VALUE + 1));
        }
        e.labels.insert(" ".into(), "dropped".into());
        e.links.push(Link { kind: "X".into(), url: "javascript:alert(1)".into() });
        e.links.push(Link { kind: "Runbook".into(), url: "https://example.invalid/rb".into() });
        e.links.push(Link { kind: "bad".into(), url: "https:///nohost".into() });
        let e = e.normalize().unwrap();
        assert_eq!(e.name.chars().count(), MAX_NAME);
        assert_eq!(e.summary.len(), MAX_SUMMARY);
        assert_eq!(e.description, None);
        assert_eq!(e.labels.len(), MAX_MAP_ENTRIES);
        assert!(e.labels.keys().all(|k| k.starts_with("key")));
        assert!(e.labels.values().all(|v| v.len() == MAX_MAP_VALUE));
        assert_eq!(e.links, vec![Link { kind: "runbook".into(), url: "https://example.invalid/rb".into() }]);
    }

    #[test]
    fn validation_rejects_bad_events() {
        let mut e = sample();
        e.summary = " ".into();
        assert_eq!(e.normalize().unwrap_err().field, "summary");
        let mut e = sample();
        e.entity.id = String::new();
        assert_eq!(e.normalize().unwrap_err().field, "entity.id");
        let mut e = sample();
        e.source.name = "-bad".into();
        assert_eq!(e.normalize().unwrap_err().field, "source.name");
        let mut e = sample();
        e.ended_at = Some(ts("2026-11-29T22:00:00Z"));
        assert_eq!(e.normalize().unwrap_err().field, "ended_at");
    }

    #[test]
    fn vocabularies() {
        assert_eq!(Severity::normalize("EMERGENCY"), Severity::Critical);
        assert_eq!(Severity::normalize("minor"), Severity::Warning);
        assert_eq!(Severity::normalize("ok"), Severity::Info);
        assert_eq!(Severity::normalize("high"), Severity::Unknown);
        assert_eq!(EventState::parse_lenient(" Triggered "), Some(EventState::Firing));
        assert_eq!(EventState::parse_lenient("recovered"), Some(EventState::Resolved));
        assert_eq!(EventState::parse_lenient("pending"), None);
    }

    #[test]
    fn url_checks() {
        assert!(is_absolute_http_url("http://vm:19093"));
        assert!(is_absolute_http_url("HTTPS://[::1]:8443/x"));
        assert!(!is_absolute_http_url("http://"));
        assert!(!is_absolute_http_url("ftp://host/"));
        assert!(!is_absolute_http_url("/relative"));
        assert!(is_absolute_http_url("http://é.example/"));
        assert!(!is_absolute_http_url("http://a b/"));
    }

    #[test]
    fn serialises_with_upstream_field_names() {
        let v = serde_json::to_value(sample().normalize().unwrap()).unwrap();
        assert_eq!(v["schema_version"], 1);
        assert_eq!(v["source"]["type"], "generic");
        assert_eq!(v["state"], "firing");
        assert_eq!(v["severity"], "unknown");
        assert_eq!(v["started_at"], "2026-11-29T22:41:16Z");
        assert!(v["deduplication_key"].is_string() && v["correlation_key"].is_string());
        assert!(v.get("event_id").is_none() && v.get("ended_at").is_none());
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, sample().normalize().unwrap());
    }
}
