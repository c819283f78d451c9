//! What deletes a store's records: a snapshot that stands for them, and retention. Either moves
//! the chain's anchor to the last record deleted, so the kept chain still verifies.

use super::DatabaseError;
use super::{Log, Tx, db_seq, seq_of, statement};
use crate::journal::Checkpoint;

/// What [`Log::retain`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retained {
    /// Records deleted.
    pub records: u64,
    /// The last one deleted (now the chain's anchor), if any.
    pub last_deleted: Option<u64>,
}

impl Log {
    /// The chain's anchor: the last record a snapshot or retention deleted (0 when none was).
    pub(crate) async fn anchor(&self) -> Result<u64, DatabaseError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt("SELECT anchor_seq FROM akritas_heads WHERE store = $1", &[&self.store])
            .await
            .map_err(statement("read the store's anchor"))?;
        Ok(row.map_or(0, |row| seq_of(row.get(0))))
    }

    /// Writes `data` as the store's snapshot at `checkpoint` (unless a newer one is there),
    /// keeping the records it stands for (a store that reads records by location after them).
    pub(crate) async fn keep_snapshot(
        &self,
        checkpoint: &Checkpoint,
        format: &str,
        data: &str,
    ) -> Result<(), DatabaseError> {
        let client = self.db.client().await?;
        upsert_snapshot(&client, self.store, checkpoint, format, data)
            .await
            .map_err(statement("write the store's snapshot"))?;
        Ok(())
    }

    /// Writes `data` as the store's snapshot at `checkpoint` (unless a newer one is there) and
    /// deletes the records it stands for; the snapshot's record becomes the chain's anchor.
    pub(crate) async fn compact(&self, checkpoint: &Checkpoint, format: &str, data: &str) -> Result<(), DatabaseError> {
        let tx = Tx::begin(&self.db).await?;
        let client = tx.client();
        let script = async {
            upsert_snapshot(client, self.store, checkpoint, format, data).await?;
            client
                .execute(
                    "UPDATE akritas_heads h SET anchor_seq = s.seq, anchor_hash = s.hash FROM akritas_snapshots s \
                     WHERE h.store = $1 AND s.store = $1 AND s.seq > h.anchor_seq",
                    &[&self.store],
                )
                .await?;
            client
                .execute(
                    "DELETE FROM akritas_records WHERE store = $1 AND seq <= (SELECT anchor_seq FROM akritas_heads WHERE store = $1)",
                    &[&self.store],
                )
                .await?;
            Ok(())
        }
        .await;
        script.map_err(statement("write the store's snapshot"))?;
        tx.commit().await.map_err(statement("commit the store's snapshot"))
    }

    /// Deletes the oldest records: those before `keep_from` (what a snapshot or an open item
    /// still needs) up to the first one not older than `max_age`, so what goes is always a prefix
    /// of the chain even when replicas' clocks disagree. The last one deleted becomes the chain's
    /// anchor.
    pub async fn retain(&self, max_age: std::time::Duration, keep_from: u64) -> Result<Retained, DatabaseError> {
        let tx = Tx::begin(&self.db).await?;
        let client = tx.client();
        let seconds = max_age.as_secs_f64();
        let script = async {
            let row = client
                .query_one(
                    "WITH bound AS (SELECT COALESCE((SELECT min(seq) FROM akritas_records WHERE store = $1 AND seq < $2 \
                     AND time::timestamptz >= now() - make_interval(secs => $3)), $2) AS upto), \
                     gone AS (DELETE FROM akritas_records WHERE store = $1 AND seq < (SELECT upto FROM bound) RETURNING seq, hash) \
                     SELECT count(*), (SELECT seq FROM gone ORDER BY seq DESC LIMIT 1), \
                     (SELECT hash FROM gone ORDER BY seq DESC LIMIT 1) FROM gone",
                    &[&self.store, &db_seq(keep_from), &seconds],
                )
                .await?;
            let removed: i64 = row.get(0);
            let last: Option<i64> = row.get(1);
            let hash: Option<String> = row.get(2);
            if let (Some(seq), Some(hash)) = (last, hash) {
                client
                    .execute(
                        "UPDATE akritas_heads SET anchor_seq = $2, anchor_hash = $3 WHERE store = $1 AND anchor_seq < $2",
                        &[&self.store, &seq, &hash],
                    )
                    .await?;
            }
            Ok(Retained { records: seq_of(removed), last_deleted: last.map(seq_of) })
        }
        .await;
        let retained = script.map_err(statement("delete old records"))?;
        tx.commit().await.map_err(statement("commit the deletion"))?;
        Ok(retained)
    }
}

/// Puts the snapshot row in place unless a newer one is there.
async fn upsert_snapshot(
    client: &deadpool_postgres::Object,
    store: &str,
    checkpoint: &Checkpoint,
    format: &str,
    data: &str,
) -> Result<u64, tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO akritas_snapshots (store, seq, hash, format, data) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (store) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash, format = EXCLUDED.format, \
             data = EXCLUDED.data, written_at = now() WHERE akritas_snapshots.seq < EXCLUDED.seq",
            &[&store, &db_seq(checkpoint.seq), &checkpoint.hash, &format, &data],
        )
        .await
}
