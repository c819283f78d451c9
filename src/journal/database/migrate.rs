//! The database's schema: its versions, applied at start under an advisory lock.

use deadpool_postgres::Object;

use super::{Database, DatabaseError, statement};

/// The schema versions, oldest first: version, what it adds, its SQL.
const MIGRATIONS: &[(i32, &str, &str)] = &[
    (1, "journal records, heads and snapshots", include_str!("v1.sql")),
    (2, "records found by key and kind; replicas and their heartbeats", include_str!("v2.sql")),
];

/// Advisory lock key held while migrating (`akritas` and 1 as bytes).
const MIGRATE_LOCK: i64 = 0x616b_7269_7461_7301;

/// What [`Database::migrate`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The version found (0: an empty database).
    pub from: i32,
    /// The version now.
    pub to: i32,
}

impl Database {
    /// Applies the schema versions the database lacks, each in its own transaction, under an
    /// advisory lock (replicas starting together wait for the first). Refuses a database a
    /// newer version migrated.
    pub async fn migrate(&self) -> Result<Migrated, DatabaseError> {
        let client = self.client().await?;
        // Another replica may be migrating: wait for it longer than a statement may take.
        client
            .batch_execute("SET statement_timeout = '10min'")
            .await
            .map_err(statement("set the migration's timeout"))?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATE_LOCK])
            .await
            .map_err(statement("take the migration lock"))?;
        client.batch_execute("RESET statement_timeout").await.map_err(statement("reset the statement timeout"))?;
        let result = migrate_locked(&client).await;
        let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATE_LOCK]).await;
        let migrated = result?;
        unlocked.map_err(statement("release the migration lock"))?;
        Ok(migrated)
    }
}

async fn migrate_locked(client: &Object) -> Result<Migrated, DatabaseError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS akritas_schema (version integer PRIMARY KEY, about text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(statement("create the schema table"))?;
    let row = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM akritas_schema", &[])
        .await
        .map_err(statement("read the schema version"))?;
    let from: i32 = row.get(0);
    let known = MIGRATIONS.last().map_or(0, |(version, _, _)| *version);
    if from > known {
        return Err(DatabaseError::NewerSchema { found: from, known });
    }
    for (version, about, sql) in MIGRATIONS.iter().filter(|(version, _, _)| *version > from) {
        let script = format!(
            "BEGIN; {sql}; INSERT INTO akritas_schema (version, about) VALUES ({version}, '{}'); COMMIT;",
            about.replace('\'', "''")
        );
        if let Err(error) = client.batch_execute(&script).await {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(statement("apply a schema version")(error));
        }
        tracing::info!(component = "database", version, about, "database schema migrated");
    }
    Ok(Migrated { from, to: known })
}
