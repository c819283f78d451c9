//! Reads of the alert store: listings from the in-memory indexes, and events and settled
//! jobs read back from the journal by location (grouped, so a big delivery is read once).

use std::collections::{BTreeMap, HashMap};

use crate::alerts::intake::correlate::{Incident, IncidentState, IncidentStatus};
use crate::alerts::intake::event::Event;
use crate::alerts::intake::id::Id;
use crate::alerts::store::job::{Job, JobStatus, StoredEvent};
use crate::alerts::store::record::BatchRecord;
use crate::alerts::store::state::{EventAt, EventRef, JobSlot, SourceCounters};
use crate::alerts::store::{AlertStore, AlertStoreError, Backing};
use crate::journal::Location;

impl AlertStore {
    /// Incidents, newest update first.
    pub async fn incidents(&self, limit: usize) -> Result<Vec<IncidentState>, AlertStoreError> {
        self.incidents_where(limit, |_, _| true).await
    }

    /// The most recently updated incidents whose namespace and state `visible` accepts, with
    /// the name, entity and correlation key of their last event (read from the journal).
    pub async fn incidents_where(
        &self,
        limit: usize,
        visible: impl Fn(&str, IncidentStatus) -> bool,
    ) -> Result<Vec<IncidentState>, AlertStoreError> {
        self.follow().await?;
        let (chosen, last) = {
            let state = self.lock();
            let mut incidents: Vec<(&Id, &Incident)> =
                state.correlator.incidents().filter(|(_, i)| visible(&i.namespace, i.state)).collect();
            incidents.sort_by_key(|(_, i)| std::cmp::Reverse(i.updated_at));
            incidents.truncate(limit);
            let last: Vec<(Id, EventRef)> = incidents
                .iter()
                .filter_map(|(_, i)| {
                    let event = i.event_ids.last()?;
                    Some((event.clone(), state.events.get(event)?.clone()))
                })
                .collect();
            let chosen: Vec<(Id, Incident)> = incidents.into_iter().map(|(id, i)| (id.clone(), i.clone())).collect();
            (chosen, last)
        };
        let events: HashMap<String, Event> =
            self.read_events(last).await?.into_iter().map(|e| (e.id.into(), e.event)).collect();
        Ok(chosen
            .into_iter()
            .map(|(id, incident)| {
                let last = incident.event_ids.last().and_then(|e| events.get(&e.text()));
                incident.view(&id.text(), last)
            })
            .collect())
    }

    /// One incident with its events and jobs (events and settled jobs read from the journal;
    /// those retention removed are left out).
    pub async fn incident(
        &self,
        id: &str,
    ) -> Result<Option<(IncidentState, Vec<StoredEvent>, Vec<Job>)>, AlertStoreError> {
        self.follow().await?;
        let (incident, events, jobs) = {
            let state = self.lock();
            let Some(incident) = state.correlator.incident(id) else { return Ok(None) };
            let incident = incident.clone();
            let events: Vec<(Id, EventRef)> =
                incident.event_ids.iter().filter_map(|e| Some((e.clone(), state.events.get(e)?.clone()))).collect();
            let jobs: Vec<(Id, JobSlot)> =
                incident.last_job.iter().filter_map(|key| Some((key.clone(), state.jobs.get(key)?.clone()))).collect();
            (incident, events, jobs)
        };
        let events = self.read_events(events).await?;
        let mut read = Vec::with_capacity(jobs.len());
        for (key, slot) in jobs {
            read.extend(self.read_job(&key, slot).await?);
        }
        let last = incident.event_ids.last().and_then(|last| events.iter().rev().find(|e| *last == *e.id));
        let view = incident.view(id, last.map(|e| &e.event));
        Ok(Some((view, events, read)))
    }

    /// Counts a rejected delivery of a source (`namespace/name`).
    pub fn record_rejected(&self, source: &str) {
        self.lock().counters.entry(source.to_string()).or_default().rejected += 1;
    }

    /// Delivery counters of a source (`namespace/name`).
    pub fn counters(&self, source: &str) -> SourceCounters {
        self.lock().counters.get(source).copied().unwrap_or_default()
    }

    /// Delivery counters of every source.
    pub fn all_counters(&self) -> BTreeMap<String, SourceCounters> {
        self.lock().counters.clone()
    }

    /// Jobs by status, and incidents by state (`firing`, `resolved`).
    pub fn tallies(&self) -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>) {
        let state = self.lock();
        let mut jobs =
            BTreeMap::from([("deferred", 0), ("pending", 0), ("running", 0), ("succeeded", 0), ("failed", 0)]);
        for slot in state.jobs.values() {
            let name = match slot.status() {
                JobStatus::Deferred => "deferred",
                JobStatus::Pending => "pending",
                JobStatus::Running => "running",
                JobStatus::Succeeded => "succeeded",
                JobStatus::Failed => "failed",
            };
            *jobs.entry(name).or_default() += 1;
        }
        let mut incidents = BTreeMap::from([("firing", 0), ("resolved", 0)]);
        for (_, incident) in state.correlator.incidents() {
            let name = match incident.state {
                IncidentStatus::Firing => "firing",
                IncidentStatus::Resolved => "resolved",
            };
            *incidents.entry(name).or_default() += 1;
        }
        (jobs, incidents)
    }

    /// Sizes of the in-memory indexes: incidents, events, jobs, dedup keys.
    pub fn index_sizes(&self) -> BTreeMap<&'static str, usize> {
        let state = self.lock();
        BTreeMap::from([
            ("incidents", state.correlator.incidents().count()),
            ("events", state.events.len()),
            ("jobs", state.jobs.len()),
            ("dedup_keys", state.correlator.dedup_keys()),
        ])
    }

    /// One stored event (read from the journal).
    pub async fn event(&self, id: &str) -> Result<Option<StoredEvent>, AlertStoreError> {
        self.follow().await?;
        let key = Id::new(id);
        let Some(event) = self.lock().events.get(&key).cloned() else { return Ok(None) };
        Ok(self.read_events(vec![(key, event)]).await?.pop())
    }

    /// One job (a settled one read from the journal).
    pub async fn job(&self, id: &str) -> Result<Option<Job>, AlertStoreError> {
        self.follow().await?;
        let key = Id::new(id);
        let Some(slot) = self.lock().jobs.get(&key).cloned() else { return Ok(None) };
        self.read_job(&key, slot).await
    }

    async fn read_job(&self, key: &Id, slot: JobSlot) -> Result<Option<Job>, AlertStoreError> {
        Ok(match slot {
            JobSlot::Live(_) | JobSlot::Waiting(_) => slot.live(key).map(|job| self.lock().shown(job)),
            JobSlot::Done { location, namespace, .. } => {
                let Some(record) = self.read_logged(location).await? else { return Ok(None) };
                let Ok(mut job) = serde_json::from_value::<Job>(record) else { return Ok(None) };
                if job.namespace.is_empty() {
                    job.namespace = namespace;
                }
                Some(job)
            }
        })
    }

    /// The events, each record read once, in the order given.
    async fn read_events(&self, wanted: Vec<(Id, EventRef)>) -> Result<Vec<StoredEvent>, AlertStoreError> {
        let mut records: BTreeMap<Location, Option<BatchRecord>> = BTreeMap::new();
        let mut out = Vec::with_capacity(wanted.len());
        for (id, event) in wanted {
            let id = id.text();
            let item = event.item as usize;
            let stored = match &event.at {
                EventAt::Queued(record) => stored_event(&id, record, item, &|n| self.legacy_namespace(n)),
                EventAt::Stored(location) => {
                    if !records.contains_key(location) {
                        let read = self.read_logged(*location).await?;
                        records.insert(*location, read.and_then(|data| serde_json::from_value(data).ok()));
                    }
                    let record = records.get(location).and_then(Option::as_ref);
                    record.and_then(|r| stored_event(&id, r, item, &|n| self.legacy_namespace(n)))
                }
            };
            out.extend(stored);
        }
        Ok(out)
    }

    /// The data of the record at `location`: `None` (logged) when the journal cannot give it
    /// (retention removed it meanwhile, a damaged line); an error when the database cannot be
    /// read.
    async fn read_logged(&self, location: Location) -> Result<Option<serde_json::Value>, AlertStoreError> {
        let read = match &self.backing {
            Backing::File(journal) => journal.read_at(location).map_err(|error| error.to_string()),
            Backing::Database(db) => match db.log.read(location.segment).await? {
                Some(record) => Ok(record),
                None => Err(format!("record {} is no longer kept", location.segment)),
            },
        };
        match read {
            Ok(record) => Ok(Some(record.data)),
            Err(error) => {
                tracing::warn!(component = "akritas_alerts", %error, "cannot read an alert record back from the journal");
                Ok(None)
            }
        }
    }
}

/// Item `item` of a delivery record as a stored event.
fn stored_event(id: &str, record: &BatchRecord, item: usize, legacy: &dyn Fn(&str) -> String) -> Option<StoredEvent> {
    let found = record.items.get(item).filter(|i| i.outcome.event_id == id)?;
    let mut event = found.event.clone();
    event.source.namespace =
        if record.namespace.is_empty() { legacy(&record.source) } else { record.namespace.clone() };
    Some(StoredEvent {
        id: id.into(),
        incident_id: found.outcome.incident_id.clone(),
        delivery_id: record.delivery_id.clone(),
        event,
    })
}
