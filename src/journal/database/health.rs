//! What `/health` says of the database: one round trip and the pool.

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
    /// What `/health` says of the database: a round trip's latency and the schema version, and
    /// the pool's connections.
    pub async fn health(&self) -> DatabaseHealth {
        let status = self.pool.status();
        let pool =
            PoolHealth { max: status.max_size, open: status.size, idle: status.available, waiting: status.waiting };
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
