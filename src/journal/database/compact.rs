//! What deletes a store's records: a snapshot that stands for them, and retention. Either moves
//! the chain's anchor to the last record deleted, so the kept chain still verifies.

use super::{Log, Tx, db_seq, seq_of, statement};
use crate::journal::Checkpoint;
use super::DatabaseError;

impl Log {
    /// Writes `data` as the store's snapshot at `checkpoint` (unless a newer one is there) and
    /// deletes the records it stands for; the snapshot's record becomes the chain's anchor.
    pub(crate) async fn compact(&self, checkpoint: &Checkpoint, format: &str, data: &str) -> Result<(), DatabaseError> {
        let tx = Tx::begin(&self.db).await?;
        let client = tx.client();
        let script = async {
            client
                .execute(
                    "INSERT INTO akritas_snapshots (store, seq, hash, format, data) VALUES ($1, $2, $3, $4, $5) \
                     ON CONFLICT (store) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash, format = EXCLUDED.format, \
                     data = EXCLUDED.data, written_at = now() WHERE akritas_snapshots.seq < EXCLUDED.seq",
                    &[&self.store, &db_seq(checkpoint.seq), &checkpoint.hash, &format, &data],
                )
                .await?;
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

    /// Deletes the records older than `max_age` and before `keep_from` (what a snapshot or an
    /// open item still needs); the last one deleted becomes the chain's anchor. Returns how many
    /// were deleted.
    pub async fn retain(&self, max_age: std::time::Duration, keep_from: u64) -> Result<u64, DatabaseError> {
        let tx = Tx::begin(&self.db).await?;
        let client = tx.client();
        let seconds = max_age.as_secs_f64();
        let script = async {
            let row = client
                .query_one(
                    "WITH gone AS (DELETE FROM akritas_records WHERE store = $1 AND seq < $2 \
                     AND time::timestamptz < now() - make_interval(secs => $3) RETURNING seq, hash) \
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
            Ok(seq_of(removed))
        }
        .await;
        let removed = script.map_err(statement("delete old records"))?;
        tx.commit().await.map_err(statement("commit the deletion"))?;
        Ok(removed)
    }
}
