//! Pure deduplication and correlation decisions. No I/O and no id generation: the store
//! looks up its indexes, calls [`decide`], persists, then applies the result with [`Incident::record`]. [`Correlator`] is an in-memory reference implementation of that loop (useful
//! as the store's working copy for one delivery, and in tests).
//!
//! Rules:
//! - the source of an event is `namespace/name` of its AlertSource ([`source_key`]): two sources of one name
//!   in two namespaces never share a dedup entry, an incident or a job;
//! - dedup index key = `namespace/name \0 deduplication_key`; a hit is a duplicate of the first event (no job);
//! - correlation index key = `namespace/name \0 correlation_key`, looked up over *open* incidents only;
//! - firing, no open incident → new incident that gets an investigation job, unless a job of the same
//!   correlation key has not started yet: then the new incident shares that job (a flapping alert does not
//!   queue one investigation per flap);
//! - firing, open incident → joins it (no job);
//! - resolved, open incident → recorded on it; the incident closes once none of its alerts is still firing
//!   (an incident tracks its firing alerts by [`member_key`]; with per-alert correlation keys — Alertmanager
//!   fingerprint, Uptime Kuma monitor, Pingdom check — a resolved event closes its incident);
//! - resolved, no open incident → new incident that is already resolved (no job);
//! - firing after close → the closed incident is not reopened; a new incident + job is created.
//!
//! Keys never include model text: they are hashes of provider fields only.

use crate::ids::{EventId, IncidentId, JobId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::alerts::intake::event::{Entity, Event, EventState, Severity, hash_parts};
use crate::alerts::intake::id::{Id, Key};
use crate::alerts::intake::window::DedupWindow;
pub use crate::alerts::intake::window::{DedupLimits, FirstSeen};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IncidentStatus {
    Firing,
    Resolved,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct IncidentState {
    pub id: IncidentId,
    pub correlation_key: String,
    /// Name of the AlertSource.
    pub source: String,
    /// Namespace of the AlertSource (journals written before namespaces: see the store's migration).
    #[serde(default)]
    pub namespace: String,
    pub state: IncidentStatus,
    pub name: String,
    pub severity: Severity,
    pub entity: Entity,
    pub opened_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    #[schemars(with = "Vec<String>")]
    pub event_ids: Vec<Id>,
    /// [`member_key`]s of alerts currently firing in this incident (their first 32 hex digits).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub firing_members: Members,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_job: Option<String>,
}

/// The [`member_key`]s of the alerts firing in an incident, 16 bytes each (the first half of
/// the key's SHA-256), in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Members(Vec<Key>);

impl Members {
    /// Adds a member key.
    pub fn insert(&mut self, member: &str) {
        let key = Key::of_digest(member);
        if let Err(at) = self.0.binary_search(&key) {
            self.0.insert(at, key);
        }
    }

    /// Removes a member key.
    pub fn remove(&mut self, member: &str) {
        let key = Key::of_digest(member);
        if let Ok(at) = self.0.binary_search(&key) {
            self.0.remove(at);
        }
    }

    /// Whether no alert fires.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many alerts fire.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether every firing alert (none included) is `member`.
    pub fn all_are(&self, member: &str) -> bool {
        let key = Key::of_digest(member);
        self.0.iter().all(|m| *m == key)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Already ingested: reference the first event and its incident; no new event, no job.
    Duplicate { event_id: EventId, incident_id: IncidentId },
    /// No open incident for the correlation key: open a new one. `investigate` (create a job) is true
    /// exactly for firing events; a resolved event yields an already-resolved incident.
    NewIncident { state: IncidentStatus, investigate: bool },
    /// Firing event for an already open incident: update it, no job.
    JoinIncident { incident_id: IncidentId },
    /// Resolved event for an open incident; `closes_incident` when no alert of it remains firing.
    ResolveEvent { incident_id: IncidentId, closes_incident: bool },
}

impl Decision {
    pub fn investigate(&self) -> bool {
        matches!(self, Decision::NewIncident { investigate: true, .. })
    }
}

/// `namespace/name` of the AlertSource an event came from.
pub fn source_key(event: &Event) -> String {
    format!("{}/{}", event.source.namespace, event.source.name)
}

pub fn dedup_index_key(source_key: &str, deduplication_key: &str) -> String {
    format!("{source_key}\0{deduplication_key}")
}

pub fn correlation_index_key(source_key: &str, correlation_key: &str) -> String {
    format!("{source_key}\0{correlation_key}")
}

/// State-independent identity of one alert inside an incident, so that its resolved event can be matched
/// with its firing event: hash of source type/name and provider_event_id, or name + entity.
pub fn member_key(event: &Event) -> String {
    let src = &event.source;
    match src.provider_event_id.as_deref().filter(|id| !id.is_empty()) {
        Some(id) => hash_parts(&["member", &src.kind, &src.name, "id", id]),
        None => {
            hash_parts(&["member", &src.kind, &src.name, "entity", &event.name, &event.entity.kind, &event.entity.id])
        }
    }
}

/// Decide what one (normalised) event does. `seen` takes a [`dedup_index_key`]; `open_incident_for` takes a
/// [`correlation_index_key`] and must only return incidents that are currently open (firing), with their id.
pub fn decide(
    event: &Event,
    seen: impl Fn(&str) -> Option<FirstSeen>,
    open_incident_for: impl Fn(&str) -> Option<(String, Incident)>,
) -> Decision {
    let source = source_key(event);
    if let Some(first) = seen(&dedup_index_key(&source, &event.deduplication_key)) {
        return Decision::Duplicate { event_id: first.event_id, incident_id: first.incident_id };
    }
    let open = open_incident_for(&correlation_index_key(&source, &event.correlation_key))
        .filter(|(_, i)| i.state == IncidentStatus::Firing);
    match (event.state, open) {
        (EventState::Firing, None) => Decision::NewIncident { state: IncidentStatus::Firing, investigate: true },
        (EventState::Resolved, None) => Decision::NewIncident { state: IncidentStatus::Resolved, investigate: false },
        (EventState::Firing, Some((incident_id, _))) => Decision::JoinIncident { incident_id: incident_id.into() },
        (EventState::Resolved, Some((incident_id, incident))) => {
            let member = member_key(event);
            let closes_incident = incident.firing_members.all_are(&member);
            Decision::ResolveEvent { incident_id: incident_id.into(), closes_incident }
        }
    }
}

/// An incident as memory keeps it: what correlation decides on and what listings filter and
/// sort by. Its name, entity and correlation key are those of its last event, read from the
/// journal for the whole view ([`Incident::view`]). Reads snapshots of the whole
/// [`IncidentState`] too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SavedIncident")]
pub struct Incident {
    /// Correlation index key ([`correlation_index_key`]) as a digest.
    pub correlation: Key,
    /// Name of the AlertSource.
    pub source: Arc<str>,
    /// Namespace of the AlertSource.
    pub namespace: Arc<str>,
    pub state: IncidentStatus,
    pub severity: Severity,
    pub opened_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    pub event_ids: Vec<Id>,
    pub firing_members: Members,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_job: Option<Id>,
}

/// An incident as a snapshot holds it: this version's [`Incident`], or an older whole
/// [`IncidentState`] (its correlation key then gives the digest).
#[derive(Deserialize)]
struct SavedIncident {
    #[serde(default)]
    correlation: Option<Key>,
    #[serde(default)]
    correlation_key: String,
    source: Arc<str>,
    #[serde(default)]
    namespace: Arc<str>,
    state: IncidentStatus,
    severity: Severity,
    opened_at: Timestamp,
    updated_at: Timestamp,
    #[serde(default)]
    resolved_at: Option<Timestamp>,
    event_ids: Vec<Id>,
    #[serde(default)]
    firing_members: Members,
    #[serde(default)]
    last_job: Option<Id>,
}

impl From<SavedIncident> for Incident {
    fn from(saved: SavedIncident) -> Incident {
        let correlation = saved.correlation.unwrap_or_else(|| {
            let source = format!("{}/{}", saved.namespace, saved.source);
            Key::of(&correlation_index_key(&source, &saved.correlation_key))
        });
        Incident {
            correlation,
            source: saved.source,
            namespace: saved.namespace,
            state: saved.state,
            severity: saved.severity,
            opened_at: saved.opened_at,
            updated_at: saved.updated_at,
            resolved_at: saved.resolved_at,
            event_ids: saved.event_ids,
            firing_members: saved.firing_members,
            last_job: saved.last_job,
        }
    }
}

impl Incident {
    /// A new incident for `event` (opened_at = updated_at = observed_at), its names shared
    /// through `names`.
    fn open(event: &Event, event_id: &str, names: &mut Names) -> Incident {
        let source = source_key(event);
        let mut incident = Incident {
            correlation: Key::of(&correlation_index_key(&source, &event.correlation_key)),
            source: names.get(&event.source.name),
            namespace: names.get(&event.source.namespace),
            state: IncidentStatus::Firing,
            severity: event.severity,
            opened_at: event.observed_at,
            updated_at: event.observed_at,
            resolved_at: None,
            event_ids: Vec::new(),
            firing_members: Members::default(),
            last_job: None,
        };
        incident.record(event, event_id);
        incident
    }

    /// Update from a non-duplicate event belonging to this incident.
    pub fn record(&mut self, event: &Event, event_id: &str) {
        self.severity = event.severity;
        self.updated_at = event.observed_at;
        self.event_ids.push(Id::new(event_id));
        match event.state {
            EventState::Firing => {
                self.firing_members.insert(&member_key(event));
                self.state = IncidentStatus::Firing;
                self.resolved_at = None;
            }
            EventState::Resolved => {
                self.firing_members.remove(&member_key(event));
                if self.firing_members.is_empty() {
                    self.state = IncidentStatus::Resolved;
                    self.resolved_at = Some(event.observed_at);
                }
            }
        }
    }

    pub fn is_open(&self) -> bool {
        self.state == IncidentStatus::Firing
    }

    /// The whole view of incident `id`, with the name, entity and correlation key of its last
    /// event (empty when that event cannot be read).
    pub fn view(&self, id: &str, last: Option<&Event>) -> IncidentState {
        IncidentState {
            id: id.into(),
            correlation_key: last.map(|e| e.correlation_key.clone()).unwrap_or_default(),
            source: self.source.to_string(),
            namespace: self.namespace.to_string(),
            state: self.state,
            name: last.map(|e| e.name.clone()).unwrap_or_default(),
            severity: self.severity,
            entity: last.map(|e| e.entity.clone()).unwrap_or_default(),
            opened_at: self.opened_at,
            updated_at: self.updated_at,
            resolved_at: self.resolved_at,
            event_ids: self.event_ids.clone(),
            firing_members: self.firing_members.clone(),
            last_job: self.last_job.as_ref().map(Id::text),
        }
    }
}

impl IncidentState {
    pub fn is_open(&self) -> bool {
        self.state == IncidentStatus::Firing
    }
}

/// One shared copy of each namespace and source name.
#[derive(Debug, Clone, Default)]
struct Names(std::collections::HashSet<Arc<str>>);

impl Names {
    fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.0.get(name) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(name);
        self.0.insert(shared.clone());
        shared
    }
}

/// Result of [`Correlator::ingest`] for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub decision: Decision,
    /// New event id, or the first event's id for a duplicate.
    pub event_id: EventId,
    pub incident_id: IncidentId,
    /// Investigation job created for this event (only for a newly opened firing incident).
    pub job_id: Option<JobId>,
    /// A job of the same correlation key, not started yet, that the new incident shares instead.
    pub shared_job: Option<JobId>,
}

/// What an id is requested for; the caller generates `evt_`/`inc_`/`job_` ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Event,
    Incident,
    Job,
}

/// In-memory dedup + open-incident indexes (pure: ids come from the caller). The dedup
/// index is a bounded window ([`DedupWindow`]); time advances only by [`Correlator::advance`],
/// with the delivery's recorded receive time, so replay reaches the same state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Correlator {
    seen: DedupWindow,
    /// Receive time (unix seconds) of the delivery being correlated.
    now: i64,
    /// Open incidents by correlation index key.
    open: HashMap<Key, Id>,
    incidents: BTreeMap<Id, Incident>,
    /// Jobs not started yet, by correlation index key, and the key of each.
    unstarted: HashMap<Key, Id>,
    unstarted_keys: HashMap<Id, Key>,
    #[serde(skip)]
    names: Names,
}

/// One event through the rules of this module.
fn step(
    ix: &mut Correlator,
    event: &Event,
    coalesce: bool,
    storm: Option<&str>,
    mut new_id: impl FnMut(IdKind) -> String,
) -> Outcome {
    let decision = decide(event, |k| ix.seen.get(k), |k| ix.open_incident(k));
    let source = source_key(event);
    let corr = Key::of(&correlation_index_key(&source, &event.correlation_key));
    let (event_id, incident_id, job_id, shared_job) = match &decision {
        Decision::Duplicate { event_id, incident_id } => (event_id.clone(), incident_id.clone(), None, None),
        Decision::NewIncident { investigate, .. } => {
            let event_id = new_id(IdKind::Event);
            let incident_id = new_id(IdKind::Incident);
            let mut incident = Incident::open(event, &event_id, &mut ix.names);
            let shared_job = (*investigate && coalesce)
                .then(|| ix.unstarted.get(&corr).map(Id::text).or_else(|| storm.map(str::to_string)))
                .flatten();
            let job_id = (*investigate && shared_job.is_none()).then(|| new_id(IdKind::Job));
            incident.last_job = job_id.as_deref().or(shared_job.as_deref()).map(Id::new);
            if let Some(job) = &job_id {
                let job = Id::new(job);
                ix.unstarted_keys.insert(job.clone(), corr);
                ix.unstarted.insert(corr, job);
            }
            ix.put_incident(Id::new(&incident_id), incident);
            (event_id.into(), incident_id.into(), job_id.map(JobId::from), shared_job.map(JobId::from))
        }
        Decision::JoinIncident { incident_id } | Decision::ResolveEvent { incident_id, .. } => {
            let event_id = new_id(IdKind::Event);
            let id = Id::new(incident_id);
            if let Some(mut incident) = ix.incidents.get(&id).cloned() {
                incident.record(event, &event_id);
                ix.put_incident(id, incident);
            }
            (event_id.into(), incident_id.clone(), None, None)
        }
    };
    if !matches!(decision, Decision::Duplicate { .. }) {
        let first = FirstSeen { event_id: event_id.clone(), incident_id: incident_id.clone() };
        ix.seen.insert(&dedup_index_key(&source, &event.deduplication_key), first, ix.now);
    }
    Outcome { decision, event_id, incident_id, job_id, shared_job }
}

impl Correlator {
    pub fn new() -> Correlator {
        Correlator::default()
    }

    fn open_incident(&self, correlation: &str) -> Option<(String, Incident)> {
        let id = self.open.get(&Key::of(correlation))?;
        Some((id.text(), self.incidents.get(id)?.clone()))
    }

    /// Stores the incident and keeps the open index of its correlation key in step with its state.
    fn put_incident(&mut self, id: Id, incident: Incident) {
        let key = incident.correlation;
        if incident.is_open() {
            self.open.insert(key, id.clone());
        } else if self.open.get(&key) == Some(&id) {
            self.open.remove(&key);
        }
        self.incidents.insert(id, incident);
    }

    pub fn incident(&self, id: &str) -> Option<&Incident> {
        self.incidents.get(&Id::new(id))
    }

    /// The incidents with their ids.
    pub fn incidents(&self) -> impl Iterator<Item = (&Id, &Incident)> {
        self.incidents.iter()
    }

    /// The one shared copy of a namespace or source name.
    pub fn share_name(&mut self, name: &str) -> Arc<str> {
        self.names.get(name)
    }

    /// Shares one copy of each name among the incidents (after a snapshot was read).
    pub fn share_names(&mut self) {
        let Correlator { incidents, names, .. } = self;
        for incident in incidents.values_mut() {
            incident.source = names.get(&incident.source);
            incident.namespace = names.get(&incident.namespace);
        }
    }

    /// Moves the clock to `now` (unix seconds; a delivery's receive time) and, with `limits`,
    /// forgets the dedup keys outside the window. Returns how many were forgotten.
    pub fn advance(&mut self, now: i64, limits: Option<DedupLimits>) -> usize {
        self.now = now;
        limits.map_or(0, |limits| self.seen.expire(now, limits))
    }

    /// Dedup keys remembered.
    pub fn dedup_keys(&self) -> usize {
        self.seen.len()
    }

    /// Forgets a resolved incident (its id stays in the dedup window as the incident of
    /// the keys it saw). Returns it.
    pub fn forget(&mut self, id: &str) -> Option<Incident> {
        let id = Id::new(id);
        let incident = self.incidents.remove(&id)?;
        if self.open.get(&incident.correlation).is_some_and(|open| *open == id) {
            self.open.remove(&incident.correlation);
        }
        Some(incident)
    }

    /// Decides and applies one event; with `coalesce`, a new incident shares a job of its
    /// correlation key that has not started yet, else the `storm` job when one is given,
    /// instead of asking for a new one.
    pub fn ingest(
        &mut self,
        event: &Event,
        coalesce: bool,
        storm: Option<&str>,
        new_id: impl FnMut(IdKind) -> String,
    ) -> Outcome {
        step(self, event, coalesce, storm, new_id)
    }

    /// A job left the waiting state (claimed, or given up): later incidents get their own.
    pub fn job_started(&mut self, job_id: &str) {
        let job = Id::new(job_id);
        if let Some(correlation) = self.unstarted_keys.remove(&job)
            && self.unstarted.get(&correlation).is_some_and(|j| *j == job)
        {
            self.unstarted.remove(&correlation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alerts::adapters::{DecodeContext, adapter};

    const AM_FIRING: &str = include_str!("../../../tests/fixtures/alertmanager/alertmanager-webhook.json");
    const AM_RESOLVED: &str = include_str!("../../../tests/fixtures/alertmanager/alertmanager-webhook-resolved.json");

    fn am(body: &str, observed: &str) -> Vec<Event> {
        let ctx = DecodeContext {
            source_type: "alertmanager",
            source_name: "alertmanager",
            observed_at: observed.parse().unwrap(),
        };
        adapter("alertmanager").unwrap().decode(body.as_bytes(), &ctx).unwrap()
    }

    fn ids() -> impl FnMut(IdKind) -> String {
        let mut n = 0;
        move |kind| {
            n += 1;
            let prefix = match kind {
                IdKind::Event => "evt",
                IdKind::Incident => "inc",
                IdKind::Job => "job",
            };
            format!("{prefix}_{n}")
        }
    }

    /// A generic event about host `host` (its correlation key too) observed `minute` minutes
    /// after 22:00 on the test day.
    fn on(host: &str, name: &str, state: EventState, minute: u32) -> Event {
        generic(host, name, state, &format!("2026-11-29T22:{minute:02}:00Z"), host)
    }

    fn generic(entity: &str, name: &str, state: EventState, observed: &str, corr: &str) -> Event {
        let mut e = Event::new(
            "generic",
            "ops",
            state,
            name,
            Entity { kind: "host".into(), id: entity.into(), display_name: None },
            observed.parse().unwrap(),
        );
        e.summary = format!("{name} on {entity}");
        e.correlation_key = corr.into();
        e.normalize().unwrap()
    }

    #[test]
    fn same_firing_delivery_twice_is_a_duplicate_of_the_first_event() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let first = c.ingest(&am(AM_FIRING, "2026-11-29T22:45:00Z")[0], false, None, &mut ids);
        assert_eq!(first.decision, Decision::NewIncident { state: IncidentStatus::Firing, investigate: true });
        assert!(first.job_id.is_some());
        let again = c.ingest(&am(AM_FIRING, "2026-11-29T22:50:00Z")[0], false, None, &mut ids);
        assert_eq!(
            again.decision,
            Decision::Duplicate { event_id: first.event_id.clone(), incident_id: first.incident_id.clone() }
        );
        assert_eq!(again.event_id, first.event_id);
        assert_eq!(again.job_id, None);
        assert_eq!(c.incident(&first.incident_id).unwrap().event_ids.len(), 1);
    }

    #[test]
    fn intra_batch_duplicates_use_the_working_copy() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let event = &am(AM_FIRING, "2026-11-29T22:45:00Z")[0];
        let outcomes: Vec<_> = [event, event].into_iter().map(|e| c.ingest(e, false, None, &mut ids)).collect();
        assert!(matches!(outcomes[1].decision, Decision::Duplicate { .. }));
    }

    #[test]
    fn alerts_with_the_same_correlation_key_share_one_incident_and_one_job() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let a = c.ingest(&on("db-1", "HighCPU", EventState::Firing, 0), false, None, &mut ids);
        let b = c.ingest(&on("db-1", "HighLoad", EventState::Firing, 1), false, None, &mut ids);
        let other = c.ingest(&on("db-2", "HighCPU", EventState::Firing, 1), false, None, &mut ids);
        assert!(a.decision.investigate());
        assert_eq!(b.decision, Decision::JoinIncident { incident_id: a.incident_id.clone() });
        assert_eq!(b.job_id, None);
        assert_ne!(other.incident_id, a.incident_id);
        let inc = c.incident(&a.incident_id).unwrap();
        assert_eq!(inc.event_ids, [Id::new(&a.event_id), Id::new(&b.event_id)]);
        assert_eq!(inc.firing_members.len(), 2);
        assert_eq!(inc.view(&a.incident_id, Some(&generic_last())).name, "HighLoad", "the last event names it");
    }

    fn generic_last() -> Event {
        generic("db-1", "HighLoad", EventState::Firing, "2026-11-29T22:01:00Z", "db-1")
    }

    #[test]
    fn an_incident_of_an_older_snapshot_reads_with_the_digests_of_its_keys() {
        let e = generic("db-1", "HighCPU", EventState::Firing, "2026-11-29T22:00:00Z", "db-1");
        let member = member_key(&e);
        let old = serde_json::json!({
            "id": "inc_x", "correlation_key": "db-1", "source": "ops", "namespace": "team-a", "state": "firing",
            "name": "HighCPU", "severity": "warning", "entity": {"kind": "host", "id": "db-1"},
            "opened_at": "2026-11-29T22:00:00Z", "updated_at": "2026-11-29T22:00:00Z",
            "event_ids": ["evt_x"], "firing_members": [member], "last_job": "job_x"
        });
        let incident: Incident = serde_json::from_value(old).unwrap();
        assert_eq!(incident.correlation, Key::of(&correlation_index_key("team-a/ops", "db-1")));
        assert!(incident.firing_members.all_are(&member), "a member key's first half is its digest");
        let again: Incident = serde_json::from_value(serde_json::to_value(&incident).unwrap()).unwrap();
        assert_eq!(again, incident, "this version's snapshot reads back the same");
    }

    #[test]
    fn incident_closes_when_all_firing_alerts_resolved() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let a = c.ingest(&on("db-1", "HighCPU", EventState::Firing, 0), false, None, &mut ids);
        c.ingest(&on("db-1", "HighLoad", EventState::Firing, 1), false, None, &mut ids);
        let r1 = c.ingest(&on("db-1", "HighCPU", EventState::Resolved, 10), false, None, &mut ids);
        assert_eq!(r1.decision, Decision::ResolveEvent { incident_id: a.incident_id.clone(), closes_incident: false });
        assert!(c.incident(&a.incident_id).unwrap().is_open());
        let r2 = c.ingest(&on("db-1", "HighLoad", EventState::Resolved, 12), false, None, &mut ids);
        assert_eq!(r2.decision, Decision::ResolveEvent { incident_id: a.incident_id.clone(), closes_incident: true });
        let inc = c.incident(&a.incident_id).unwrap();
        assert_eq!(inc.state, IncidentStatus::Resolved);
        assert_eq!(inc.resolved_at.map(|t| t.to_string()).as_deref(), Some("2026-11-29T22:12:00Z"));
        assert_eq!(inc.last_job, a.job_id.as_deref().map(Id::new), "resolution keeps the investigation link");
    }

    #[test]
    fn alertmanager_resolve_closes_and_later_firing_opens_new_investigated_incident() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let fire = c.ingest(&am(AM_FIRING, "2026-11-29T22:45:00Z")[0], false, None, &mut ids);
        let resolve = c.ingest(&am(AM_RESOLVED, "2026-11-29T22:46:00Z")[0], false, None, &mut ids);
        assert_eq!(
            resolve.decision,
            Decision::ResolveEvent { incident_id: fire.incident_id.clone(), closes_incident: true }
        );
        assert_eq!(resolve.job_id, None, "resolved events never trigger investigations");

        // Same alert fires again later (new startsAt → new dedup key).
        let body = AM_FIRING.replace("2026-11-29T22:41:16Z", "2026-11-29T23:30:00Z");
        let refire = c.ingest(&am(&body, "2026-11-29T23:31:00Z")[0], false, None, &mut ids);
        assert_eq!(refire.decision, Decision::NewIncident { state: IncidentStatus::Firing, investigate: true });
        assert_ne!(refire.incident_id, fire.incident_id);
        assert!(refire.job_id.is_some());
        assert_eq!(c.incident(&fire.incident_id).unwrap().state, IncidentStatus::Resolved);
    }

    #[test]
    fn resolved_without_open_incident_creates_resolved_incident_without_job() {
        let mut c = Correlator::new();
        let out = c.ingest(&am(AM_RESOLVED, "2026-11-29T22:46:00Z")[0], false, None, ids());
        assert_eq!(out.decision, Decision::NewIncident { state: IncidentStatus::Resolved, investigate: false });
        assert_eq!(out.job_id, None);
        let inc = c.incident(&out.incident_id).unwrap();
        assert!(!inc.is_open());
        assert!(inc.resolved_at.is_some());
    }

    #[test]
    fn decide_is_scoped_by_source_name_and_ignores_closed_incidents() {
        let e = generic("db-1", "HighCPU", EventState::Firing, "2026-11-29T22:00:00Z", "db-1");
        let mut closed = Incident::open(&e, "evt_x", &mut Names::default());
        let seen_key = dedup_index_key(&source_key(&e), &e.deduplication_key);
        let d = decide(
            &e,
            |k| (k == seen_key).then(|| FirstSeen { event_id: "evt_x".into(), incident_id: "inc_x".into() }),
            |_| None,
        );
        assert_eq!(d, Decision::Duplicate { event_id: "evt_x".into(), incident_id: "inc_x".into() });
        closed.state = IncidentStatus::Resolved;
        let d = decide(&e, |_| None, |_| Some(("inc_x".into(), closed.clone())));
        assert!(d.investigate());
        assert_eq!(correlation_index_key("ops", "db-1"), "ops\0db-1");
    }

    #[test]
    fn a_correlator_read_back_from_a_snapshot_decides_the_same() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let e = generic("db-1", "HighCPU", EventState::Firing, "2026-11-29T22:00:00Z", "db-1");
        let first = c.ingest(&e, false, None, &mut ids);
        let mut restored: Correlator = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert!(matches!(restored.ingest(&e, false, None, &mut ids).decision, Decision::Duplicate { .. }));
        let join = generic("db-1", "HighLoad", EventState::Firing, "2026-11-29T22:05:00Z", "db-1");
        assert_eq!(
            restored.ingest(&join, false, None, &mut ids).decision,
            Decision::JoinIncident { incident_id: first.incident_id.clone() }
        );
        // Past the window the same alert is no longer a duplicate: it joins the open incident.
        restored.advance(10 * 86_400, Some(DedupLimits { window_secs: 3600, max_keys: 10 }));
        assert_eq!(
            restored.ingest(&e, false, None, &mut ids).decision,
            Decision::JoinIncident { incident_id: first.incident_id }
        );
    }

    #[test]
    fn sources_of_one_name_in_two_namespaces_never_share_an_incident() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let mut a = am(AM_FIRING, "2026-11-29T22:45:00Z").remove(0);
        a.source.namespace = "team-a".into();
        let mut b = a.clone();
        b.source.namespace = "team-b".into();
        let first = c.ingest(&a, true, None, &mut ids);
        let second = c.ingest(&b, true, None, &mut ids);
        assert!(second.job_id.is_some(), "{second:?}");
        assert_ne!(first.incident_id, second.incident_id);
        assert_eq!(&*c.incident(&second.incident_id).unwrap().namespace, "team-b");
    }

    #[test]
    fn a_new_incident_shares_a_job_that_has_not_started() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let fire = c.ingest(&am(AM_FIRING, "2026-11-29T22:45:00Z")[0], true, None, &mut ids);
        c.ingest(&am(AM_RESOLVED, "2026-11-29T22:46:00Z")[0], true, None, &mut ids);
        let refire = am(&AM_FIRING.replace("2026-11-29T22:41:16Z", "2026-11-29T22:42:00Z"), "2026-11-29T23:31:00Z");
        let shared = c.ingest(&refire[0], true, None, &mut ids);
        assert_eq!((shared.job_id.as_ref(), shared.shared_job.as_ref()), (None, fire.job_id.as_ref()));
        assert_eq!(c.incident(&shared.incident_id).unwrap().last_job, fire.job_id.as_deref().map(Id::new));

        // Once that job started, the next flap gets its own.
        c.job_started(fire.job_id.as_deref().unwrap());
        let resolved = AM_RESOLVED
            .replace("2026-11-29T22:41:16Z", "2026-11-29T22:42:00Z")
            .replace("2026-11-29T22:41:20Z", "2026-11-29T22:42:30Z");
        c.ingest(&am(&resolved, "2026-11-29T23:32:00Z")[0], true, None, &mut ids);
        let again = am(&AM_FIRING.replace("2026-11-29T22:41:16Z", "2026-11-29T22:43:00Z"), "2026-11-30T00:31:00Z");
        assert!(c.ingest(&again[0], true, None, &mut ids).job_id.is_some());
    }

    #[test]
    fn a_new_incident_shares_the_storm_job_unless_its_own_key_has_one_waiting() {
        let mut c = Correlator::new();
        let mut ids = ids();
        let db1 = c.ingest(&on("db-1", "HighCPU", EventState::Firing, 0), true, None, &mut ids);
        let storm = c.ingest(&on("db-2", "HighCPU", EventState::Firing, 1), true, db1.job_id.as_deref(), &mut ids);
        assert_eq!((storm.job_id.as_deref(), storm.shared_job.as_deref()), (None, db1.job_id.as_deref()));
        let resolved = generic("db-2", "HighCPU", EventState::Resolved, "2026-11-29T22:02:00Z", "db-2");
        c.ingest(&resolved, true, None, &mut ids);
        let own = c.ingest(&on("db-3", "HighCPU", EventState::Firing, 3), true, None, &mut ids);
        let again = c.ingest(&on("db-3", "HighLoad", EventState::Firing, 4), true, db1.job_id.as_deref(), &mut ids);
        assert_eq!(again.job_id, None, "joins its open incident");
        c.ingest(&on("db-1", "HighCPU", EventState::Resolved, 5), true, None, &mut ids);
        let refire = c.ingest(&on("db-1", "HighCPU", EventState::Firing, 6), true, own.job_id.as_deref(), &mut ids);
        assert_eq!(refire.shared_job, db1.job_id, "its own key's waiting job comes first");
    }
}
