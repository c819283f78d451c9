//! The alert store's reads and records of incident threads and resolve notices
//! ([`crate::alerts::store::threads`]).

use std::collections::BTreeMap;

use crate::alerts::store::job::Delivery;
use crate::alerts::store::threads::{DueNotice, NOTICE, NOTIFIED, NoticeRecord, NotifiedRecord, Told};
use crate::alerts::store::{AlertStore, AlertStoreError};
use crate::ids::IncidentId;

impl AlertStore {
    /// The incident whose thread, in the receiver `namespace/receiver`, starts at the message
    /// (Telegram `message_id` as text) or post `thread_id` — for a bot to answer a follow-up
    /// in an incident's thread with the incident as context. `None` for any other message.
    pub fn incident_for_thread(&self, namespace: &str, receiver: &str, thread_id: &str) -> Option<IncidentId> {
        let key = (format!("{namespace}/{receiver}"), thread_id.to_string());
        self.lock().threads.by_thread.get(&key).cloned()
    }

    /// What the receiver `namespace/name` was told about an incident (`None`: nothing yet).
    pub fn told(&self, incident_id: &str, receiver: &str) -> Option<Told> {
        self.lock().threads.told.get(incident_id)?.get(receiver).cloned()
    }

    /// Every receiver told about an incident, with its thread and resolve notice.
    pub fn told_all(&self, incident_id: &str) -> BTreeMap<String, Told> {
        self.lock().threads.told.get(incident_id).cloned().unwrap_or_default()
    }

    /// Resolve notices due now, at most `max`.
    pub fn due_notices(&self, max: usize) -> Vec<DueNotice> {
        let state = self.lock();
        let threads = &state.threads;
        let mut due = Vec::new();
        for incident in &threads.due {
            for (receiver, told) in threads.told.get(incident).into_iter().flatten() {
                if told.resolve.is_none() && due.len() < max {
                    due.push(DueNotice {
                        incident_id: incident.clone(),
                        receiver: receiver.clone(),
                        thread_id: told.thread_id.clone(),
                    });
                }
            }
        }
        due
    }

    /// Records the first notification of an incident a receiver accepted, with the root of
    /// its thread (chat receivers). A second record for the pair changes nothing.
    pub async fn record_notified(
        &self,
        incident_id: &str,
        receiver: &str,
        thread_id: Option<String>,
    ) -> Result<(), AlertStoreError> {
        let record = NotifiedRecord { incident_id: incident_id.into(), receiver: receiver.to_string(), thread_id };
        let data = serde_json::to_value(&record).unwrap_or_default();
        self.append(
            NOTIFIED,
            move |_| Ok(data),
            move |state| {
                let resolved = state.incident_resolved(&record.incident_id);
                state.threads.notified(record, resolved);
            },
            |_, _| {},
        )
        .await?;
        // A resolve notice may be due already.
        self.wake();
        Ok(())
    }

    /// Records the outcome of an incident's resolve notice to one receiver.
    pub async fn record_notice(&self, incident_id: &str, delivery: &Delivery) -> Result<(), AlertStoreError> {
        let record = NoticeRecord { incident_id: incident_id.into(), delivery: delivery.clone() };
        let data = serde_json::to_value(&record).unwrap_or_default();
        self.append(NOTICE, move |_| Ok(data), move |state| state.threads.noticed(record), |_, _| {}).await?;
        self.wake();
        Ok(())
    }
}
