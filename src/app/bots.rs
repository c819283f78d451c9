//! Starts the bots: the session journal (`<data_dir>/bots/sessions.jsonl`), the gateway
//! answering with the read-only engine, the inbound receivers kept in step with the
//! Catalog and its secrets, and the Telegram long-poll loops.

use std::sync::Arc;

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::alerts::store::AlertStore;
pub use crate::bots::host::Bots;
use crate::bots::host::{AlertIncidents, EngineResponder, ProviderReplier, receivers};
use crate::bots::{Gateway, GatewaySettings, SessionOptions, SessionStore};
use crate::catalog::CatalogStore;
use crate::catalog::secrets::SecretResolver;
use crate::config::Settings;
use crate::engine::run::Engine;

/// What the bots need from the host.
pub struct BotParts {
    /// The Catalog.
    pub store: CatalogStore,
    /// Secret resolution (bot tokens, webhook secrets).
    pub secrets: Arc<dyn SecretResolver>,
    /// Wakes when watched secrets change.
    pub secrets_changed: tokio::sync::watch::Receiver<u64>,
    /// The engine answering messages.
    pub engine: Arc<Engine>,
    /// Incidents for `/incident`.
    pub alerts: Option<Arc<AlertStore>>,
    /// Where a Slack receiver's connection shows.
    pub board: crate::catalog::status::StatusBoard,
}

/// Opens the session journal and starts the gateway, the receiver refresher and the pollers.
pub async fn start(
    settings: &Settings,
    parts: BotParts,
    stores: &super::storage::Stores,
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
) -> anyhow::Result<Arc<Bots>> {
    let path = settings.data_dir.join("bots").join("sessions.jsonl");
    let sessions = match stores.database() {
        Some((db, _)) => SessionStore::open_database(db, SessionOptions::default())
            .await
            .context("opening the bot sessions in the database")?,
        None => tokio::task::spawn_blocking(move || SessionStore::open(&path, SessionOptions::default()))
            .await
            .context("opening the bot session journal")?
            .context("opening the bot session journal")?,
    };
    let timeout = settings.notification_timeout;
    let alerts = parts.alerts.clone();
    let current = receivers(&parts.store.current(), parts.secrets.as_ref(), timeout);
    let shared = Arc::new(ArcSwap::from_pointee(current));
    let gateway = Arc::new(Gateway::new(
        sessions,
        Arc::new(EngineResponder { engine: parts.engine, alerts: parts.alerts.clone() }),
        Arc::new(ProviderReplier { receivers: shared.clone() }),
        Arc::new(AlertIncidents { store: parts.alerts.clone() }),
        GatewaySettings::default(),
    ));
    let bots = Arc::new(Bots::new(gateway.clone(), shared.clone(), alerts, Some(parts.board.clone())));
    tasks.spawn(gateway.run(cancel.clone()));
    // Replicas sharing a database: only the one holding the database's leadership polls.
    let pollers = bots.clone();
    let poll = move |token: CancellationToken| tokio::spawn(crate::bots::connections::run(pollers.clone(), token));
    match stores.leading() {
        Some(leading) => {
            tasks.spawn(super::leader::while_database_leader(leading, cancel.clone(), poll));
        }
        None => {
            let pollers = poll(cancel.clone());
            tasks.spawn(async move {
                let _ = pollers.await;
            });
        }
    }
    let (store, secrets, mut secrets_changed, cancel) =
        (parts.store, parts.secrets, parts.secrets_changed, cancel.clone());
    tasks.spawn(async move {
        let mut catalog = store.subscribe();
        let mut secrets_open = true;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = catalog.changed() => if changed.is_err() { return; },
                changed = secrets_changed.changed(), if secrets_open => if changed.is_err() { secrets_open = false; },
            }
            shared.store(Arc::new(receivers(&store.current(), secrets.as_ref(), timeout)));
        }
    });
    Ok(bots)
}
