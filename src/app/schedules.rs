//! Starts the scheduler of RunSchedules: its journal (`<data_dir>/schedules/schedules.jsonl`,
//! or the store `schedules` of the shared database) and the scheduler itself, on the leader
//! only (on the database: the replica holding the leadership lock).

use std::sync::Arc;

use anyhow::Context;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::catalog::CatalogStore;
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::config::Settings;
use crate::engine::run::Engine;
use crate::journal::JournalOptions;
use crate::schedules::{ScheduleStore, Scheduler, SchedulerParts, SystemClock};

/// What the scheduler needs from the host.
pub struct ScheduleParts {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The Catalog.
    pub catalog: CatalogStore,
    /// Receivers' secrets.
    pub secrets: Arc<dyn SecretResolver>,
    /// Where status shows.
    pub board: StatusBoard,
}

/// Opens the schedule journal and starts the scheduler (while this process leads); returns it,
/// for the Runs people ask for now.
pub async fn start(
    settings: &Settings,
    parts: ScheduleParts,
    stores: &super::storage::Stores,
    tasks: &mut JoinSet<()>,
    cancel: &CancellationToken,
) -> anyhow::Result<Arc<Scheduler>> {
    let snapshot_every = settings.snapshot_records;
    let store = match stores.database() {
        Some((db, _)) => {
            let clock = Arc::new(|| jiff::Timestamp::now().to_string());
            ScheduleStore::open_database(db, clock, snapshot_every)
                .await
                .context("opening the schedules in the database")?
        }
        None => {
            let path = settings.data_dir.join("schedules").join("schedules.jsonl");
            let options = JournalOptions {
                segment_bytes: settings.journal_segment_bytes,
                segment_age: Some(settings.journal_segment_age),
                ..JournalOptions::default()
            };
            tokio::task::spawn_blocking(move || ScheduleStore::open(&path, options, snapshot_every))
                .await
                .context("opening the schedule journal")?
                .context("opening the schedule journal")?
        }
    };
    let scheduler = Arc::new(
        Scheduler::new(SchedulerParts {
            store,
            engine: parts.engine,
            catalog: parts.catalog,
            secrets: parts.secrets,
            board: parts.board,
            clock: Arc::new(SystemClock),
            settings: crate::app::narrow::schedules(settings),
        })
        .context("building the scheduler")?,
    );
    let running = scheduler.clone();
    match stores.leading() {
        Some(leading) => {
            let start = move |token: CancellationToken| tokio::spawn(running.clone().run(token));
            tasks.spawn(super::leader::while_database_leader(leading, cancel.clone(), start));
        }
        None => {
            tasks.spawn(running.run(cancel.clone()));
        }
    }
    Ok(scheduler)
}
