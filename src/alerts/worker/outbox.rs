//! What the worker sends: a succeeded job's result (or, once, the notice that its
//! investigation failed) to every receiver its namespace sees, and each resolved
//! incident's resolve notice to every receiver told about it.
//!
//! Telegram and Mattermost receivers get one thread per incident: the first notification
//! that reaches a receiver is a top-level message whose id is journaled with the incident
//! ([`AlertStore::record_notified`]) before anything else is recorded; every later one
//! (the resolve notice, a result after a restart) replies in it. Each receiver's routing
//! (`spec.routing`) applies to both; a notification it excludes is recorded as a
//! `filtered` delivery with the reason and counted on /metrics
//! (`akritas_notifications_filtered_total{receiver,reason}`), never sent.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::alerts::intake::correlate::IncidentState;
use crate::alerts::store::{Delivery, DeliveryStatus, DueNotice, Job, JobStatus, Step, StoredEvent};
use crate::alerts::worker::delivery::{failed, key_text, notification, pending_delivery, target};
use crate::alerts::worker::{Worker, WorkerError};
use crate::catalog::ObjectKey;
use crate::notify::routing::{FilterReason, RouteFacts, filter};
use crate::notify::{self, Payload, ResolvedNotice, Target};
use crate::resources::notification_receiver::NotificationReceiverSpec;
use crate::resources::notification_receiver::{DeliveryRecord, NotificationReceiverStatus, ReceiverType};
use crate::resources::{Kind, Resource};
use crate::tenancy::DEFAULT_NAMESPACE;

/// Resolve notices sent per pass.
const NOTICES_PER_PASS: usize = 64;

/// Labels every event of the incident carries with the same value.
fn common_labels(events: &[StoredEvent]) -> BTreeMap<String, String> {
    let mut events = events.iter().map(|e| &e.event.labels);
    let Some(first) = events.next() else { return BTreeMap::new() };
    let mut common = first.clone();
    for labels in events {
        common.retain(|k, v| labels.get(k) == Some(v));
    }
    common
}

/// Counts a filtered notification.
fn count_filtered(receiver: &str, reason: FilterReason) {
    crate::telemetry::count(
        "akritas_notifications_filtered_total",
        "Notifications not sent because the receiver's routing excluded them, by receiver and reason.",
        &[("receiver", receiver), ("reason", reason.code())],
        1.0,
    );
}

/// Marks a delivery filtered.
fn filtered(delivery: &mut Delivery, reason: FilterReason) {
    delivery.status = DeliveryStatus::Filtered;
    delivery.reason = Some(reason.code().to_string());
    count_filtered(&delivery.receiver, reason);
}

impl Worker {
    /// The receiver `namespace/name` in the Catalog now, with its namespace.
    fn receiver_spec(&self, receiver: &str) -> Option<(String, NotificationReceiverSpec)> {
        let catalog = self.catalog.current();
        catalog.entries.iter().find_map(|(key, entry)| match entry.resource.as_ref() {
            Resource::NotificationReceiver(r)
                if key.kind == Kind::NotificationReceiver && key_text(key) == receiver =>
            {
                Some((key.namespace.clone(), r.spec.clone()))
            }
            _ => None,
        })
    }

    /// Whether `receiver` may be told about incidents of `namespace`.
    fn visible(&self, namespace: &str, receiver: &str) -> bool {
        receiver.split_once('/').is_some_and(|(ns, _)| self.settings.tenancy.sees(namespace, ns))
    }

    /// Where to send; `None` when the delivery is settled here (filtered, or failed with its code).
    fn route(&self, namespace: &str, delivery: &mut Delivery, facts: &RouteFacts<'_>) -> Option<Target> {
        if !self.visible(namespace, &delivery.receiver) {
            delivery.status = DeliveryStatus::Failed;
            delivery.error = Some("receiver_not_visible".into());
            return None;
        }
        let Some((receiver_namespace, spec)) = self.receiver_spec(&delivery.receiver) else {
            delivery.status = DeliveryStatus::Failed;
            delivery.error = Some("unknown_receiver".into());
            return None;
        };
        if let Some(reason) = filter(spec.routing.as_ref(), facts, (self.clock)()) {
            filtered(delivery, reason);
            return None;
        }
        match target(&receiver_namespace, &spec, self.secrets.as_ref()) {
            Ok(target) => Some(target),
            Err(reason) => {
                delivery.status = DeliveryStatus::Failed;
                delivery.error = Some(reason.to_string());
                None
            }
        }
    }

    /// Sends the result of a succeeded job (or the notice that a job failed) to
    /// every pending delivery, in parallel, and records each outcome. The
    /// investigation itself never runs again.
    pub(super) async fn notify(&self, mut job: Job) -> Result<(), WorkerError> {
        let public_url = self.settings.public_url.as_deref();
        let (investigated, failed_notice);
        let event = self.store.event(&job.event_id).await?;
        let (payload, event) = match (job.status, &job.result, event) {
            (JobStatus::Succeeded, Some(result), Some(event)) => {
                investigated = notification(&job, result, &event, public_url);
                (Payload::Investigated(&investigated), event)
            }
            (JobStatus::Failed, _, Some(event)) => {
                failed_notice = failed(&job, &event, public_url);
                (Payload::Failed(&failed_notice), event)
            }
            _ => {
                // Cannot happen with a consistent journal; never leave deliveries pending forever.
                let mut deliveries = std::mem::take(&mut job.deliveries);
                for delivery in deliveries.iter_mut().filter(|d| d.status == DeliveryStatus::Pending) {
                    delivery.status = DeliveryStatus::Failed;
                    delivery.error = Some("alert_context_missing".into());
                }
                return Ok(self.store.step(&mut job, Step::Notified { deliveries }).await?);
            }
        };
        let namespace = if job.namespace.is_empty() { DEFAULT_NAMESPACE } else { job.namespace.as_str() }.to_string();
        let incident = self.store.incident(&job.incident_id).await?;
        let events = incident.as_ref().map(|(_, events, _)| events.clone()).unwrap_or_else(|| vec![event.clone()]);
        let labels = common_labels(&events);
        let facts = RouteFacts {
            severity: event.event.severity,
            severity_label: event.event.labels.get("severity").map(String::as_str),
            alert_source: incident.as_ref().map_or(event.event.source.name.as_str(), |(i, _, _)| i.source.as_str()),
            namespace: &namespace,
            labels: &labels,
        };
        // A send whose outcome was never recorded (its replica stopped, or the record failed) is
        // not sent again: a notification reaches its receiver at most once.
        for delivery in job.deliveries.iter_mut().filter(|d| d.status == DeliveryStatus::Sending) {
            delivery.status = DeliveryStatus::Failed;
            delivery.error = Some("send_interrupted".into());
        }
        let mut sends = Vec::new();
        for (index, delivery) in job.deliveries.iter_mut().enumerate() {
            if delivery.status != DeliveryStatus::Pending {
                continue;
            }
            if let Some(target) = self.route(&namespace, delivery, &facts) {
                let root = self.store.told(&job.incident_id, &delivery.receiver).and_then(|t| t.thread_id);
                sends.push((index, target, root));
            }
        }
        // Replicas: the sends are recorded as started first, so a replica taking the job over
        // from this one, should it stop now, does not send them again.
        if self.replica.is_some() && !sends.is_empty() {
            for (index, _, _) in &sends {
                job.deliveries[*index].status = DeliveryStatus::Sending;
            }
            let deliveries = job.deliveries.clone();
            self.store.step(&mut job, Step::Notified { deliveries }).await?;
        }
        let (client, policy, incident_id) = (&self.client, self.settings.delivery, &job.incident_id);
        let outcomes = futures_util::future::join_all(sends.iter().map(|(index, target, root)| {
            let delivery = &job.deliveries[*index];
            async move {
                let receiver = &delivery.receiver;
                let sent = notify::deliver_threaded(
                    client,
                    receiver,
                    target,
                    payload,
                    root.as_deref(),
                    &delivery.delivery_id,
                    policy,
                )
                .await;
                // A new thread is linked to its incident as soon as its own message is out, not
                // after the slowest receiver's retries: a reply in it meanwhile has the incident
                // as context. It is journaled before the job, so a restart replies in it too.
                let linked = match sent.outcome.delivered && root.is_none() {
                    true => self.store.record_notified(incident_id, receiver, sent.message_id.clone()).await,
                    false => Ok(()),
                };
                (sent.outcome, linked)
            }
        }))
        .await;
        for ((index, _, _), (outcome, linked)) in sends.iter().zip(outcomes) {
            linked?;
            let delivery = &mut job.deliveries[*index];
            delivery.status = if outcome.delivered { DeliveryStatus::Delivered } else { DeliveryStatus::Failed };
            delivery.attempts += outcome.attempts;
            delivery.http_status = outcome.http_status;
            delivery.error = outcome.error;
            delivery.detail = outcome.cause.map(|cause| cause.detail);
        }
        for delivery in &job.deliveries {
            self.report_delivery(delivery);
        }
        let deliveries = std::mem::take(&mut job.deliveries);
        Ok(self.store.step(&mut job, Step::Notified { deliveries }).await?)
    }

    /// Sends the resolve notices that are due, one receiver at a time, recording each outcome.
    pub(super) async fn send_notices(self: &Arc<Self>) -> Result<(), WorkerError> {
        loop {
            let due = self.store.due_notices(NOTICES_PER_PASS);
            if due.is_empty() {
                return Ok(());
            }
            for notice in due {
                let delivery = self.send_notice(&notice).await;
                self.report_delivery(&delivery);
                self.store.record_notice(&notice.incident_id, &delivery).await?;
            }
        }
    }

    /// Sends one resolve notice; the delivery says what happened.
    async fn send_notice(&self, due: &DueNotice) -> Delivery {
        let kind = self.receiver_spec(&due.receiver).map_or(ReceiverType::Webhook, |(_, spec)| spec.type_);
        let mut delivery = pending_delivery(&due.receiver, kind);
        // The same id on every attempt, also after a crash between sending and recording:
        // a receiver sees a re-sent notice under the id it already has.
        delivery.delivery_id = notice_delivery_id(&due.incident_id, &due.receiver);
        let found = self.store.incident(&due.incident_id).await.unwrap_or_else(|error| {
            tracing::warn!(incident = %due.incident_id, %error, "cannot read the incident for its resolve notice");
            None
        });
        let Some((incident, events, _)) = found else {
            delivery.status = DeliveryStatus::Failed;
            delivery.error = Some("alert_context_missing".into());
            return delivery;
        };
        let labels = common_labels(&events);
        let first = events.first();
        let facts = RouteFacts {
            severity: incident.severity,
            severity_label: first.and_then(|e| e.event.labels.get("severity")).map(String::as_str),
            alert_source: &incident.source,
            namespace: &incident.namespace,
            labels: &labels,
        };
        let Some(target) = self.route(&incident.namespace, &mut delivery, &facts) else { return delivery };
        let notice = resolved_notice(&incident, first);
        let sent = notify::deliver_threaded(
            &self.client,
            &delivery.receiver,
            &target,
            Payload::Resolved(&notice),
            due.thread_id.as_deref(),
            &delivery.delivery_id,
            self.settings.delivery,
        )
        .await;
        delivery.status = if sent.outcome.delivered { DeliveryStatus::Delivered } else { DeliveryStatus::Failed };
        delivery.attempts = sent.outcome.attempts;
        delivery.http_status = sent.outcome.http_status;
        delivery.error = sent.outcome.error;
        delivery.detail = sent.outcome.cause.map(|cause| cause.detail);
        delivery
    }

    pub(super) fn report_delivery(&self, delivery: &Delivery) {
        let Some((namespace, name)) = delivery.receiver.split_once('/') else { return };
        let key = ObjectKey { kind: Kind::NotificationReceiver, namespace: namespace.into(), name: name.into() };
        let outcome = match delivery.status {
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Filtered => "filtered",
            DeliveryStatus::Pending | DeliveryStatus::Sending => return,
        };
        let message = match (&delivery.error, &delivery.reason) {
            (Some(error), _) => error.clone(),
            (None, Some(reason)) => format!("filtered by routing: {reason}"),
            (None, None) => format!("delivery {}", delivery.delivery_id),
        };
        let last = DeliveryRecord {
            time: crate::resources::common::now_rfc3339(),
            outcome: outcome.to_string(),
            message: Some(message),
        };
        self.board.update_facts(&key, |status: &mut NotificationReceiverStatus| status.last_delivery = Some(last));
    }
}

/// The delivery id of an incident's resolve notice to a receiver: 32 hex characters
/// derived from both, so it is stable across attempts and restarts.
fn notice_delivery_id(incident_id: &str, receiver: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("akritas resolve notice\n{incident_id}\n{receiver}").as_bytes());
    hex::encode(&digest[..16])
}

/// The resolve notice of an incident.
fn resolved_notice(incident: &IncidentState, first: Option<&StoredEvent>) -> ResolvedNotice {
    ResolvedNotice {
        incident_id: incident.id.clone(),
        alert_name: incident.name.clone(),
        source: first
            .map_or_else(|| incident.source.clone(), |e| format!("{}:{}", e.event.source.kind, e.event.source.name)),
        severity: incident.severity,
        alert_status: notify::AlertStatus::Resolved,
        resolved_at: incident.resolved_at.unwrap_or(incident.updated_at).to_string(),
    }
}
