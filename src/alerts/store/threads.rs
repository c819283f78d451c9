//! Where each incident was told, per receiver, and its resolve notices — on the alert
//! journal like every other decision, replayed and snapshotted.
//!
//! - `alerts.notified` (`{incident_id, receiver, thread_id?}`): the first notification of an
//!   incident that a receiver accepted. For Telegram and Mattermost `thread_id` is the
//!   top-level message (Telegram `message_id`, Mattermost post id) every later notification
//!   of the incident replies to; webhooks have none. A later record for the same pair does
//!   not replace the first.
//! - `alerts.notice` (`{incident_id, delivery}`): the outcome (delivered, failed or
//!   filtered) of an incident's resolve notice to one receiver; at most one is sent.
//!
//! A resolve notice is due to every receiver told about the incident once the incident is
//! resolved and until its outcome is recorded, so a restart sends what was not sent and
//! never sends one twice.

use crate::ids::IncidentId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use crate::alerts::store::job::Delivery;

/// Journal kind of the first notification of an incident to a receiver.
pub(crate) const NOTIFIED: &str = "alerts.notified";
/// Journal kind of the outcome of a resolve notice.
pub(crate) const NOTICE: &str = "alerts.notice";

/// `alerts.notified` data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NotifiedRecord {
    pub(crate) incident_id: IncidentId,
    /// `namespace/name` of the NotificationReceiver.
    pub(crate) receiver: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) thread_id: Option<String>,
}

/// `alerts.notice` data.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct NoticeRecord {
    pub(crate) incident_id: IncidentId,
    pub(crate) delivery: Delivery,
}

/// What one receiver was told about one incident.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Told {
    /// Root message of the incident's thread (chat receivers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The resolve notice, once its outcome is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolve: Option<Delivery>,
}

/// Receivers told per incident, with the indexes derived from it.
#[derive(Default, Serialize, Deserialize)]
pub(crate) struct Threads {
    /// incident → receiver → what it was told.
    pub(crate) told: BTreeMap<IncidentId, BTreeMap<String, Told>>,
    /// (receiver, thread id) → incident.
    #[serde(skip)]
    pub(crate) by_thread: HashMap<(String, String), IncidentId>,
    /// Resolved incidents with a resolve notice not recorded yet.
    #[serde(skip)]
    pub(crate) due: BTreeSet<IncidentId>,
}

impl Threads {
    /// Applies `alerts.notified`; `resolved`: whether the incident is resolved now.
    pub(crate) fn notified(&mut self, record: NotifiedRecord, resolved: bool) {
        let entries = self.told.entry(record.incident_id.clone()).or_default();
        if entries.contains_key(&record.receiver) {
            return;
        }
        if let Some(thread) = &record.thread_id {
            self.by_thread.insert((record.receiver.clone(), thread.clone()), record.incident_id.clone());
        }
        entries.insert(record.receiver, Told { thread_id: record.thread_id, resolve: None });
        if resolved {
            self.due.insert(record.incident_id);
        }
    }

    /// Applies `alerts.notice`.
    pub(crate) fn noticed(&mut self, record: NoticeRecord) {
        let entries = self.told.entry(record.incident_id.clone()).or_default();
        let receiver = record.delivery.receiver.clone();
        entries.entry(receiver).or_default().resolve = Some(record.delivery);
        if entries.values().all(|t| t.resolve.is_some()) {
            self.due.remove(record.incident_id.as_str());
        }
    }

    /// The incident resolved: its resolve notices are due to every receiver told about it.
    pub(crate) fn resolved(&mut self, incident_id: &str) {
        if self.told.get(incident_id).is_some_and(|e| e.values().any(|t| t.resolve.is_none())) {
            self.due.insert(incident_id.into());
        }
    }

    /// Forgets an incident.
    pub(crate) fn forget(&mut self, incident_id: &str) {
        for (receiver, told) in self.told.remove(incident_id).unwrap_or_default() {
            if let Some(thread) = told.thread_id {
                self.by_thread.remove(&(receiver, thread));
            }
        }
        self.due.remove(incident_id);
    }

    /// Rebuilds the indexes after a snapshot was read.
    pub(crate) fn reindex(&mut self, resolved: impl Fn(&str) -> bool) {
        self.by_thread.clear();
        self.due.clear();
        for (incident, entries) in &self.told {
            for (receiver, told) in entries {
                if let Some(thread) = &told.thread_id {
                    self.by_thread.insert((receiver.clone(), thread.clone()), incident.clone());
                }
            }
            if resolved(incident) && entries.values().any(|t| t.resolve.is_none()) {
                self.due.insert(incident.clone());
            }
        }
    }
}

/// A resolve notice to send: the incident, the receiver and the thread to reply in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DueNotice {
    pub incident_id: IncidentId,
    /// `namespace/name`.
    pub receiver: String,
    pub thread_id: Option<String>,
}
