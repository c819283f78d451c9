//! What `/health` says of the database: one round trip and the pool. The round trip is made
//! by one task every `database_health_interval` ([`HealthWatch`]), never by a `/health` call:
//! callers, however many, read the last answer.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use super::{CONNECT_TIMEOUT, Database, DatabaseError, statement};

/// The database as `/health` shows it.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct DatabaseHealth {
    /// Whether a round trip succeeded.
    pub reachable: bool,
    /// That round trip, in milliseconds.
    pub latency_ms: f64,
    /// The schema version the database is migrated to.
    pub schema: Option<i32>,
    /// The connection pool of this replica.
    pub pool: PoolHealth,
    /// Why the database could not be reached (never the connection string).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A replica's connection pool.
#[derive(Clone, Debug, serde::Serialize, schemars::JsonSchema)]
pub struct PoolHealth {
    /// Most connections.
    pub max: usize,
    /// Connections open.
    pub open: usize,
    /// Open and idle.
    pub idle: usize,
    /// Callers waiting for one.
    pub waiting: usize,
}

impl Database {
    /// The pool's connections now.
    fn pool_health(&self) -> PoolHealth {
        let status = self.pool.status();
        PoolHealth { max: status.max_size, open: status.size, idle: status.available, waiting: status.waiting }
    }

    /// What `/health` says of the database: a round trip's latency and the schema version, and
    /// the pool's connections. Each call is one round trip (counted in
    /// `akritas_database_health_probes_total`): `/health` reads a [`HealthWatch`] instead.
    pub async fn health(&self) -> DatabaseHealth {
        crate::telemetry::count(
            "akritas_database_health_probes_total",
            "Round trips made to tell /health whether the database answers (one per database_health_interval).",
            &[],
            1.0,
        );
        let pool = self.pool_health();
        let started = std::time::Instant::now();
        let probe = async {
            let client = self.client().await?;
            let row = client
                .query_one("SELECT COALESCE(MAX(version), 0) FROM akritas_schema", &[])
                .await
                .map_err(statement("read the schema version"))?;
            Ok::<i32, DatabaseError>(row.get(0))
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, probe).await {
            Ok(Ok(schema)) => DatabaseHealth {
                reachable: true,
                latency_ms: started.elapsed().as_secs_f64() * 1000.0,
                schema: Some(schema),
                pool,
                error: None,
            },
            Ok(Err(error)) => {
                DatabaseHealth { reachable: false, latency_ms: 0.0, schema: None, pool, error: Some(error.to_string()) }
            }
            Err(_) => DatabaseHealth {
                reachable: false,
                latency_ms: 0.0,
                schema: None,
                pool,
                error: Some(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())),
            },
        }
    }
}

/// The database's health as last probed: `/health` reads it, and one task ([`HealthWatch::run`])
/// probes again every interval, so the database gets one query per interval however many
/// callers ask.
#[derive(Clone, Debug)]
pub struct HealthWatch {
    db: Database,
    last: Arc<ArcSwap<DatabaseHealth>>,
}

impl HealthWatch {
    /// Probes `db` once, so that the first answer is a real one.
    pub async fn new(db: Database) -> Self {
        let first = db.health().await;
        Self { db, last: Arc::new(ArcSwap::from_pointee(first)) }
    }

    /// The last probe, with the pool's connections as they are now.
    pub fn current(&self) -> DatabaseHealth {
        DatabaseHealth { pool: self.db.pool_health(), ..(**self.last.load()).clone() }
    }

    /// Probes again every `every` until `cancel`.
    pub async fn run(self, every: Duration, cancel: CancellationToken) {
        loop {
            let probed = tokio::select! {
                () = cancel.cancelled() => return,
                probed = async {
                    tokio::time::sleep(every).await;
                    self.db.health().await
                } => probed,
            };
            self.last.store(Arc::new(probed));
        }
    }
}
