//! Where `serve` keeps the durable stores (the audit, alerts, change approvals and bot
//! sessions): the embedded journals in the data directory, or the PostgreSQL database that
//! replicas share (`storage_backend: postgres`). On the database the schema is migrated at
//! start, and this process registers as a replica whose heartbeat the others watch.

use anyhow::{Context, Result, anyhow};
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::journal::database::{Database, Replica};

/// The stores' place.
#[derive(Clone, Debug)]
pub enum Stores {
    /// Journals in the data directory.
    Embedded,
    /// The shared database, and this process as one of its replicas.
    Database {
        /// The connection pool.
        db: Database,
        /// This replica.
        replica: Replica,
        /// Whether this replica holds the database's leadership lock (one per process: the
        /// bot pollers and the scheduler follow it).
        leading: tokio::sync::watch::Receiver<bool>,
    },
}

impl Stores {
    /// The database and this replica, when the stores are there.
    pub fn database(&self) -> Option<(&Database, &Replica)> {
        match self {
            Stores::Embedded => None,
            Stores::Database { db, replica, .. } => Some((db, replica)),
        }
    }

    /// On the database, whether this replica leads (holds the leadership lock); `None` on
    /// journals, where this process is the only one.
    pub fn leading(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        match self {
            Stores::Embedded => None,
            Stores::Database { leading, .. } => Some(leading.clone()),
        }
    }
}

/// Connects to the database (when `storage_backend` is `postgres`), migrates its schema and
/// registers this replica; its heartbeat runs in `tasks` until `cancel`.
pub async fn open(
    settings: &Settings,
    tasks: &mut tokio::task::JoinSet<()>,
    cancel: &CancellationToken,
) -> Result<Stores> {
    if !settings.on_database() {
        return Ok(Stores::Embedded);
    }
    let db = connect(settings)?;
    let migrated = db.migrate().await.context("migrating the database schema")?;
    let host = std::env::var("HOSTNAME").unwrap_or_default();
    let replica =
        Replica::register(&db, &host, settings.job_claim_timeout).await.context("registering this replica")?;
    tracing::info!(
        component = "database",
        schema_from = migrated.from,
        schema = migrated.to,
        replica = %replica.id(),
        "stores on the PostgreSQL database"
    );
    tasks.spawn(replica.clone().keep_alive(cancel.clone()));
    let leading = crate::journal::database::lead(&db, replica.lease() / 3, cancel.clone());
    Ok(Stores::Database { db, replica, leading })
}

/// A pool of connections to the database the settings name (`database_url_env`,
/// `database_ca_file`, `database_max_connections`); nothing is connected yet.
pub fn connect(settings: &Settings) -> Result<Database> {
    let name = &settings.database_url_env;
    let url = std::env::var(name).map(|v| v.trim().to_string()).unwrap_or_default();
    if url.is_empty() {
        return Err(anyhow!(
            "storage_backend is postgres but {name} is unset or empty; export the PostgreSQL connection string there \
             (for example postgres://akritas@db:5432/akritas?sslmode=require), or set database_url_env"
        ));
    }
    let ca = match &settings.database_ca_file {
        Some(path) => Some(std::fs::read(path).with_context(|| format!("reading database_ca_file {path}"))?),
        None => None,
    };
    Database::connect(&url, ca.as_deref(), settings.database_max_connections as usize)
        .with_context(|| format!("the PostgreSQL connection string in {name}"))
}
