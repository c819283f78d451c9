//! This process among the replicas that share the database: a row with its heartbeat. A Run or
//! a claim that names a replica whose heartbeat is older than the lease belongs to a replica
//! that stopped, and another one may finish or take it over.

use std::collections::HashSet;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Database, DatabaseError, statement};

/// One replica's presence in the database.
#[derive(Clone, Debug)]
pub struct Replica {
    db: Database,
    id: String,
    lease: Duration,
}

impl Replica {
    /// Registers this process under a new id (`prefix` and a random suffix: a restarted process
    /// is a new replica) with its first heartbeat; `lease` is how long a heartbeat counts.
    pub async fn register(db: &Database, prefix: &str, lease: Duration) -> Result<Replica, DatabaseError> {
        let prefix: String =
            prefix.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.')).take(63).collect();
        let id = format!("{}-{:016x}", if prefix.is_empty() { "akritas" } else { &prefix }, rand::random::<u64>());
        let replica = Replica { db: db.clone(), id, lease };
        replica.beat().await?;
        Ok(replica)
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// How long a heartbeat counts.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Says it is alive now.
    pub async fn beat(&self) -> Result<(), DatabaseError> {
        let client = self.db.client().await?;
        client
            .execute(
                "INSERT INTO akritas_replicas (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()",
                &[&self.id],
            )
            .await
            .map_err(statement("record the replica's heartbeat"))?;
        Ok(())
    }

    /// Beats every third of the lease until `cancel`, then removes its row (a replica that
    /// stops cleanly leaves nothing to wait for).
    pub async fn keep_alive(self, cancel: CancellationToken) {
        let every = self.lease / 3;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(every) => {}
            }
            if let Err(error) = self.beat().await {
                tracing::warn!(component = "database", replica = %self.id, %error, "could not record the replica's heartbeat");
            }
        }
        let removed = async {
            let client = self.db.client().await?;
            client
                .execute("DELETE FROM akritas_replicas WHERE id = $1", &[&self.id])
                .await
                .map_err(statement("remove the replica"))
        };
        if let Err(error) = removed.await {
            tracing::warn!(component = "database", replica = %self.id, %error, "could not remove the replica at shutdown");
        }
    }

    /// The replicas whose heartbeat is within the lease (this one included).
    pub async fn live(&self) -> Result<HashSet<String>, DatabaseError> {
        Replica::running(&self.db, self.lease).await
    }

    /// The replicas of `db` whose heartbeat is within `lease`.
    pub async fn running(db: &Database, lease: Duration) -> Result<HashSet<String>, DatabaseError> {
        let client = db.client().await?;
        let rows = client
            .query(
                "SELECT id FROM akritas_replicas WHERE heartbeat_at > now() - make_interval(secs => $1)",
                &[&lease.as_secs_f64()],
            )
            .await
            .map_err(statement("read the live replicas"))?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }
}
