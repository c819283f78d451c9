//! The connections the host opens to bot providers, on the leader: a `getUpdates` long poll
//! per Telegram receiver in polling mode, a Socket Mode connection per Slack receiver in
//! socket mode, and the bot-token check (`auth.test`) of the other Slack receivers. They
//! follow the receivers in force: one whose settings or secrets change is restarted, one
//! that is removed is stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::gateway::Gateway;
use super::host::{Bots, Client, Receiver};
use super::ingress::{self, Provider, Refusal};
use super::slack_bot::{identity_check, socket_mode};
use crate::resources::notification_receiver::InboundMode;

/// Seconds one `getUpdates` long poll waits at Telegram.
pub const POLL_SECONDS: u32 = 30;
/// Longest pause between failed polls.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Runs every receiver's connection until `cancel`; receivers are re-read every second, so
/// a changed Catalog or a rotated secret takes effect.
pub async fn run(bots: Arc<Bots>, cancel: CancellationToken) {
    let mut running: BTreeMap<String, (u64, CancellationToken)> = BTreeMap::new();
    loop {
        let receivers = bots.receivers();
        let wanted: BTreeMap<&String, &Receiver> =
            receivers.iter().filter(|(_, r)| r.mode != InboundMode::Webhook || r.provider == Provider::Slack).collect();
        running.retain(|key, (fingerprint, stop)| {
            let keep = wanted.get(key).is_some_and(|r| r.fingerprint == *fingerprint);
            if !keep {
                stop.cancel();
            }
            keep
        });
        for (key, receiver) in wanted {
            if running.contains_key(key) {
                continue;
            }
            let stop = cancel.child_token();
            running.insert(key.clone(), (receiver.fingerprint, stop.clone()));
            match (&receiver.client, receiver.mode) {
                (Client::Slack(_), InboundMode::Socket) => {
                    tokio::spawn(socket_mode(bots.clone(), receiver.clone(), stop))
                }
                (Client::Slack(_), _) => tokio::spawn(identity_check(bots.clone(), receiver.clone(), stop)),
                _ => tokio::spawn(poll_one(bots.gateway.clone(), receiver.clone(), stop)),
            };
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// One receiver's `getUpdates` loop. The offset advances past an update only once it
/// is durably queued (or refused); a full queue is retried every second; failures back
/// off from 1 s to 30 s. Telegram keeps unconfirmed updates, and the dedup ids survive
/// a restart, so nothing is lost and nothing is answered twice.
async fn poll_one(gateway: Arc<Gateway>, receiver: Receiver, stop: CancellationToken) {
    let Client::Telegram(api) = &receiver.client else { return };
    let (mut offset, mut backoff) = (0_i64, Duration::from_secs(1));
    while !stop.is_cancelled() {
        let updates = tokio::select! {
            _ = stop.cancelled() => return,
            updates = api.get_updates(offset, POLL_SECONDS) => updates,
        };
        let updates = match updates {
            Ok(updates) => {
                backoff = Duration::from_secs(1);
                updates
            }
            Err(error) => {
                tracing::warn!(receiver = %receiver.key, %error, backoff_s = backoff.as_secs(), "telegram getUpdates failed");
                tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(backoff) => {} }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        for update in updates {
            let Some(id) = update["update_id"].as_i64().filter(|id| *id >= offset) else { continue };
            match ingress::telegram_update(&receiver.key, &update, &receiver.allow) {
                Ok(inbound) => loop {
                    match gateway.submit(inbound.clone()).await {
                        Ok(_) => break,
                        Err(error) => {
                            tracing::warn!(receiver = %receiver.key, %error, "bot message not queued yet; retrying");
                            tokio::select! { _ = stop.cancelled() => return, _ = tokio::time::sleep(Duration::from_secs(1)) => {} }
                        }
                    }
                },
                Err(Refusal::Forbidden) => {
                    tracing::info!(receiver = %receiver.key, event = "ingress_forbidden", "telegram message from outside the allowlists ignored");
                }
                Err(refusal) => tracing::debug!(receiver = %receiver.key, %refusal, "telegram update skipped"),
            }
            offset = id + 1;
        }
    }
}
