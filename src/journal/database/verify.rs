//! `audit verify` on the database: a store's whole chain checked from its anchor to its head.

use super::{DatabaseError, GENESIS_PREV, Log, Tx, db_seq, seq_of, statement};

/// What [`Log::verify`] found: the chain from its anchor to its head, every hash (and seal)
/// checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// Records read.
    pub records: u64,
    /// The first kept record (0 when none).
    pub first_seq: u64,
    /// The head.
    pub last_seq: u64,
    /// The head's hash.
    pub last_hash: String,
    /// Records whose keyed seal was checked.
    pub sealed: u64,
}

impl Log {
    /// Reads the whole chain from its anchor to its head and checks every hash, that each
    /// record follows the one before it, that the head is the last record, and each keyed
    /// seal when `key` is given (`audit verify` on the database), in one snapshot of the
    /// database while replicas go on writing.
    pub async fn verify(&self, key: Option<&[u8]>) -> Result<Verified, DatabaseError> {
        // One snapshot of the database for the head and every record: replicas may be writing.
        let tx = Tx::begin_with(&self.db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?;
        let verified = self.verify_in(tx.client(), key).await;
        tx.end().await;
        verified
    }

    async fn verify_in(
        &self,
        client: &deadpool_postgres::Object,
        key: Option<&[u8]>,
    ) -> Result<Verified, DatabaseError> {
        let head = client
            .query_opt("SELECT seq, hash, anchor_seq, anchor_hash FROM akritas_heads WHERE store = $1", &[&self.store])
            .await
            .map_err(statement("read the store's head"))?;
        let Some(head) = head else {
            return Ok(Verified { last_hash: GENESIS_PREV.to_string(), ..Verified::default() });
        };
        let (head_seq, head_hash): (u64, String) = (seq_of(head.get(0)), head.get(1));
        let mut last = (seq_of(head.get(2)), head.get::<_, String>(3));
        let mut verified = Verified::default();
        let broken = |seq: u64, reason: &str| DatabaseError::Broken {
            store: self.store.to_string(),
            seq,
            reason: reason.to_string(),
        };
        loop {
            let rows = client
                .query(
                    "SELECT seq, time, kind, data, prev, hash, mac FROM akritas_records WHERE store = $1 AND seq > $2 ORDER BY seq LIMIT 10000",
                    &[&self.store, &db_seq(last.0)],
                )
                .await
                .map_err(statement("read the store's records"))?;
            if rows.is_empty() {
                break;
            }
            for row in &rows {
                let (prev, record, sealed) = self.record_of(row, 0, key)?;
                if record.seq != last.0 + 1 || prev != last.1 {
                    return Err(broken(record.seq, "it does not follow the record before it (or the chain's anchor)"));
                }
                if verified.records == 0 {
                    verified.first_seq = record.seq;
                }
                verified.records += 1;
                verified.sealed += u64::from(sealed);
                last = (record.seq, record.hash);
            }
        }
        if last.0 != head_seq || last.1 != head_hash {
            return Err(broken(head_seq, "the head names a record the chain does not end with (records were deleted)"));
        }
        verified.last_seq = last.0;
        verified.last_hash = last.1;
        Ok(verified)
    }
}
