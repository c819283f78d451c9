//! The connections the host opens to bot providers, on the leader: a `getUpdates` long poll
//! per Telegram receiver in polling mode, a Socket Mode connection per Slack receiver in
//! socket mode, and the bot-token check (`auth.test`) of the other Slack receivers. They
//! follow the receivers in force: one whose settings or secrets change is restarted, one
//! that is removed is stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
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

/// A receiver's running connection.
struct Running {
    fingerprint: u64,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// Runs every receiver's connection until `cancel`; receivers are re-read every second, so
/// a changed Catalog or a rotated secret takes effect. A receiver's new connection starts
/// only once its old one has ended (one Telegram poller per token, one `Connected` writer);
/// on `cancel` every connection is ended before this returns.
pub async fn run(bots: Arc<Bots>, cancel: CancellationToken) {
    let mut running: BTreeMap<String, Running> = BTreeMap::new();
    loop {
        let receivers = bots.receivers();
        let wanted: BTreeMap<&String, &Receiver> =
            receivers.iter().filter(|(_, r)| r.mode != InboundMode::Webhook || r.provider == Provider::Slack).collect();
        let changed: Vec<String> = running
            .iter()
            .filter(|(key, current)| wanted.get(key).is_none_or(|r| r.fingerprint != current.fingerprint))
            .map(|(key, _)| key.clone())
            .collect();
        let mut ending: BTreeMap<String, JoinHandle<()>> = BTreeMap::new();
        for key in changed {
            if let Some(current) = running.remove(&key) {
                current.stop.cancel();
                ending.insert(key, current.task);
            }
        }
        for (key, receiver) in wanted {
            if running.contains_key(key) {
                continue;
            }
            let (stop, fingerprint) = (cancel.child_token(), receiver.fingerprint);
            let previous = ending.remove(key);
            let (bots, receiver, until) = (bots.clone(), receiver.clone(), stop.clone());
            let task = tokio::spawn(async move {
                if let Some(previous) = previous {
                    let _ = previous.await;
                }
                connect(bots, receiver, until).await;
            });
            running.insert(key.clone(), Running { fingerprint, stop, task });
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    for current in running.into_values() {
        current.stop.cancel();
        let _ = current.task.await;
    }
}

/// The connection a receiver holds: Slack's Socket Mode or its token check, or a Telegram poll.
async fn connect(bots: Arc<Bots>, receiver: Receiver, stop: CancellationToken) {
    match (&receiver.client, receiver.mode) {
        (Client::Slack(_), InboundMode::Socket) => socket_mode(bots, receiver, stop).await,
        (Client::Slack(_), _) => identity_check(bots, receiver, stop).await,
        _ => poll_one(bots.gateway.clone(), receiver, stop).await,
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
