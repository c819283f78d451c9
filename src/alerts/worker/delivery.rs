//! What a succeeded investigation delivers and where: the notification built from
//! the alert and its structured result, and each NotificationReceiver's target
//! with its secrets resolved.

use crate::alerts::intake::event::EventState;
use crate::alerts::store::{Delivery, DeliveryStatus, Job, StoredEvent};
use crate::catalog::ObjectKey;
use crate::catalog::secrets::{SecretError, SecretResolver};
use crate::investigation::InvestigationResult;
use crate::notify::{self, AlertStatus, Notification, Target};
use crate::resources::notification_receiver::{NotificationReceiverSpec, ReceiverType};

/// Why a receiver has no delivery target. Stored on the delivery, so the text
/// names codes and secret references, never values.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A secret reference did not resolve.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// A webhook receiver without `url` or `urlFrom`.
    #[error("webhook receiver has no url")]
    NoUrl,
    /// A Telegram receiver without `chatId` or `chatIdFrom`.
    #[error("telegram receiver has no chat id")]
    NoChatId,
    /// A receiver of no known type.
    #[error("unsupported_receiver")]
    Unsupported,
}

/// `namespace/name` of a receiver, as deliveries name it.
pub fn key_text(key: &ObjectKey) -> String {
    format!("{}/{}", key.namespace, key.name)
}

/// A delivery not attempted yet, with a fresh delivery id.
pub fn pending_delivery(receiver: &str, kind: ReceiverType) -> Delivery {
    Delivery {
        receiver: receiver.to_string(),
        kind,
        delivery_id: notify::new_delivery_id(),
        status: DeliveryStatus::Pending,
        attempts: 0,
        http_status: None,
        error: None,
        detail: None,
        reason: None,
    }
}

/// What a succeeded job sends: the alert, the structured result and a link to the Run.
pub fn notification(
    job: &Job,
    result: &InvestigationResult,
    event: &StoredEvent,
    public_url: Option<&str>,
) -> Notification {
    let e = &event.event;
    let run_id = job.run_id.clone();
    Notification {
        incident_id: job.incident_id.clone(),
        run_url: run_id.as_deref().and_then(|id| notify::run_url(public_url, id)),
        run_id,
        source: format!("{}:{}", e.source.kind, e.source.name),
        title: e.name.clone(),
        severity: e.severity,
        status: match e.state {
            EventState::Firing => AlertStatus::Firing,
            EventState::Resolved => AlertStatus::Resolved,
        },
        entity: format!("{}:{}", e.entity.kind, e.entity.id),
        finding: result.finding_status,
        confidence: result.confidence,
        actionability: result.actionability,
        summary: result.summary.clone(),
        impact: result.impact.clone(),
        evidence: result.evidence.clone(),
        ruled_out: result.ruled_out.clone(),
        affected_components: result.affected_components.clone(),
        recommended_actions: result.recommended_actions.clone(),
        evidence_count: u32::try_from(result.evidence.len()).unwrap_or(u32::MAX),
        evidence_coverage: result.evidence_coverage,
        refused_evidence: u32::try_from(result.refused_evidence.len()).unwrap_or(u32::MAX),
        status_downgrade: result.status_downgrade.clone(),
        production_writes: result.production_writes,
    }
}

/// What receivers are told when a job failed for good: what failed, why, and the Run.
pub fn failed(job: &Job, event: &StoredEvent, public_url: Option<&str>) -> notify::FailedNotice {
    let e = &event.event;
    let run_id = job.run_id.clone();
    notify::FailedNotice {
        incident_id: job.incident_id.clone(),
        alert_name: e.name.clone(),
        source: format!("{}:{}", e.source.kind, e.source.name),
        severity: e.severity,
        run_url: run_id.as_deref().and_then(|id| notify::run_url(public_url, id)),
        run_id,
        error_code: job.error_code.clone().unwrap_or_else(|| "failed".into()),
        error: job.error.clone().unwrap_or_else(|| "the investigation failed".into()),
        attempts: job.attempts,
    }
}

/// The delivery target of a receiver, its secrets resolved. Errors are codes or
/// reference names, never values.
pub fn target(
    namespace: &str,
    spec: &NotificationReceiverSpec,
    secrets: &dyn SecretResolver,
) -> Result<Target, TargetError> {
    let resolve = |reference| secrets.resolve(namespace, reference).map(|v| v.expose().trim().to_string());
    if let Some(w) = &spec.webhook {
        let url = match (&w.url, &w.url_from) {
            (Some(url), _) => url.clone(),
            (None, Some(reference)) => resolve(reference)?,
            (None, None) => return Err(TargetError::NoUrl),
        };
        let bearer_token = w.bearer_token.as_ref().map(resolve).transpose()?;
        let hmac_secret = w.hmac_secret.as_ref().map(resolve).transpose()?;
        return Ok(Target::Webhook { url, bearer_token, hmac_secret });
    }
    if let Some(t) = &spec.telegram {
        let chat_id = match (&t.chat_id, &t.chat_id_from) {
            (Some(id), _) => id.clone(),
            (None, Some(reference)) => resolve(reference)?,
            (None, None) => return Err(TargetError::NoChatId),
        };
        return Ok(Target::Telegram {
            base_url: t.base_url.clone().unwrap_or_else(|| notify::TELEGRAM_DEFAULT_BASE_URL.to_string()),
            bot_token: resolve(&t.bot_token)?,
            chat_id,
            message_thread_id: t.message_thread_id,
        });
    }
    if let Some(m) = &spec.mattermost {
        return Ok(Target::Mattermost {
            base_url: m.base_url.clone(),
            bot_token: resolve(&m.bot_token)?,
            channel_id: m.channel_id.clone(),
        });
    }
    if let Some(s) = &spec.slack {
        return Ok(Target::Slack {
            base_url: s.base_url.clone().unwrap_or_else(|| notify::slack::SLACK_DEFAULT_BASE_URL.to_string()),
            bot_token: resolve(&s.bot_token)?,
            channel_id: s.channel_id.clone(),
        });
    }
    Err(TargetError::Unsupported)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::catalog::secrets::EnvSecrets;

    fn spec(value: Value) -> NotificationReceiverSpec {
        serde_json::from_value(value).unwrap()
    }

    fn secrets() -> EnvSecrets<impl Fn(&str) -> Option<String> + Send + Sync> {
        EnvSecrets::with_lookup(|name: &str| (name == "BOT_TOKEN").then(|| " 123:abc \n".to_string()))
    }

    #[test]
    fn targets_resolve_their_secrets() {
        let telegram =
            spec(json!({"type": "telegram", "telegram": {"botToken": {"env": "BOT_TOKEN"}, "chatId": "-100"}}));
        let Ok(Target::Telegram { base_url, bot_token, chat_id, message_thread_id }) =
            target("ops", &telegram, &secrets())
        else {
            panic!("a telegram target")
        };
        assert_eq!(base_url, notify::TELEGRAM_DEFAULT_BASE_URL);
        assert_eq!((bot_token.as_str(), chat_id.as_str(), message_thread_id), ("123:abc", "-100", None));

        let webhook = spec(json!({"type": "webhook", "webhook": {"url": "https://hooks.example/x"}}));
        assert!(matches!(
            target("ops", &webhook, &secrets()),
            Ok(Target::Webhook { url, bearer_token: None, hmac_secret: None }) if url == "https://hooks.example/x"
        ));
    }

    #[test]
    fn a_target_that_cannot_be_built_says_why_without_values() {
        let missing = spec(json!({"type": "mattermost", "mattermost":
            {"baseUrl": "https://mm.example", "botToken": {"env": "MISSING"}, "channelId": "c1"}}));
        let error = target("ops", &missing, &secrets()).unwrap_err();
        assert_eq!(error.to_string(), SecretError::EnvUnset("MISSING".into()).to_string());
        let no_chat = spec(json!({"type": "telegram", "telegram": {"botToken": {"env": "BOT_TOKEN"}}}));
        assert_eq!(target("ops", &no_chat, &secrets()).unwrap_err().to_string(), "telegram receiver has no chat id");
        let no_url = spec(json!({"type": "webhook", "webhook": {}}));
        assert_eq!(target("ops", &no_url, &secrets()).unwrap_err().to_string(), "webhook receiver has no url");
        let nothing = spec(json!({"type": "webhook"}));
        assert_eq!(target("ops", &nothing, &secrets()).unwrap_err().to_string(), "unsupported_receiver");
    }

    #[test]
    fn new_deliveries_are_pending_with_their_own_ids() {
        let first = pending_delivery("ops/pager", ReceiverType::Webhook);
        let second = pending_delivery("ops/pager", ReceiverType::Webhook);
        assert_eq!((first.status, first.attempts, first.error), (DeliveryStatus::Pending, 0, None));
        assert_eq!((first.receiver.as_str(), first.kind.as_str()), ("ops/pager", "webhook"));
        assert_ne!(first.delivery_id, second.delivery_id);
    }
}
