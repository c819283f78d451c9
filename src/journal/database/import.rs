//! Records copied verbatim into a store's chain (`akritas storage migrate`): the same seq,
//! time, kind, data, prev, hash and seal as where they were written, so the chain and its
//! seals verify in the database as they did in the journal.

use super::{DatabaseError, GENESIS_PREV, Log, db_seq, seq_of, statement};
use crate::journal::format::record_hash;

/// One record as written elsewhere.
#[derive(Clone, Debug)]
pub struct Imported {
    /// Its seq.
    pub seq: u64,
    /// Its time.
    pub time: String,
    /// Its kind.
    pub kind: String,
    /// Its data exactly as hashed.
    pub data: String,
    /// The hash of the record before it.
    pub prev: String,
    /// Its hash.
    pub hash: String,
    /// Its keyed seal, if any.
    pub mac: Option<String>,
    /// What it is about (a Run's id), for reads by key.
    pub key: Option<String>,
}

/// Where a store's chain is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The last record (0 when none was ever written).
    pub head_seq: u64,
    /// Its hash (the genesis hash when none).
    pub head_hash: String,
    /// The last record deleted, which the first kept one follows (0 when none).
    pub anchor_seq: u64,
    /// Its hash (the genesis hash when none).
    pub anchor_hash: String,
}

impl Log {
    /// Where the store's chain is (`None` when it has no head: nothing was ever written).
    pub async fn position(&self) -> Result<Option<Position>, DatabaseError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt("SELECT seq, hash, anchor_seq, anchor_hash FROM akritas_heads WHERE store = $1", &[&self.store])
            .await
            .map_err(statement("read the store's head"))?;
        Ok(row.map(|row| Position {
            head_seq: seq_of(row.get(0)),
            head_hash: row.get(1),
            anchor_seq: seq_of(row.get(2)),
            anchor_hash: row.get(3),
        }))
    }

    /// At most `limit` records after `seq`, in order, as stored (each checked against its hash).
    pub async fn export(&self, seq: u64, limit: i64) -> Result<Vec<Imported>, DatabaseError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT seq, time, kind, data, prev, hash, mac, key FROM akritas_records WHERE store = $1 AND seq > $2 \
                 ORDER BY seq LIMIT $3",
                &[&self.store, &db_seq(seq), &limit],
            )
            .await
            .map_err(statement("read the store's records"))?;
        rows.iter()
            .map(|row| {
                let record = Imported {
                    seq: seq_of(row.get(0)),
                    time: row.get(1),
                    kind: row.get(2),
                    data: row.get(3),
                    prev: row.get(4),
                    hash: row.get(5),
                    mac: row.get(6),
                    key: row.get(7),
                };
                match record_hash(&record.prev, record.seq, &record.time, &record.kind, &record.data) == record.hash {
                    true => Ok(record),
                    false => Err(DatabaseError::Changed { store: self.store.to_string(), seq: record.seq }),
                }
            })
            .collect()
    }

    /// Appends `records` after the head, verbatim, in one transaction: the first must follow the
    /// head (on a store with no record yet, it may start later: its `prev` becomes the chain's
    /// anchor, as after a retention), each the one before it, and each must match its hash.
    pub async fn import(&self, records: &[Imported]) -> Result<(), DatabaseError> {
        let Some(first) = records.first() else { return Ok(()) };
        let broken = |seq: u64, reason: String| DatabaseError::Broken { store: self.store.to_string(), seq, reason };
        let mut before = (first.seq.saturating_sub(1), first.prev.clone());
        for record in records {
            if record.seq != before.0 + 1 || record.prev != before.1 {
                return Err(broken(record.seq, "it does not follow the record before it".to_string()));
            }
            if record_hash(&record.prev, record.seq, &record.time, &record.kind, &record.data) != record.hash {
                return Err(broken(record.seq, "it does not match its hash".to_string()));
            }
            before = (record.seq, record.hash.clone());
        }
        let locked = self.lock().await?;
        let client = locked.tx.client();
        let empty = locked.head.seq == 0 && locked.head.hash == GENESIS_PREV;
        if empty && first.seq > 1 {
            client
                .execute(
                    "UPDATE akritas_heads SET seq = $2, hash = $3, anchor_seq = $2, anchor_hash = $3 WHERE store = $1",
                    &[&self.store, &db_seq(first.seq - 1), &first.prev],
                )
                .await
                .map_err(statement("anchor the store's chain"))?;
        } else if first.seq != locked.head.seq + 1 || first.prev != locked.head.hash {
            return Err(broken(first.seq, format!("it does not follow the store's head (record {})", locked.head.seq)));
        }
        let column = |field: fn(&Imported) -> String| records.iter().map(field).collect::<Vec<String>>();
        let seqs: Vec<i64> = records.iter().map(|r| db_seq(r.seq)).collect();
        let macs: Vec<Option<String>> = records.iter().map(|r| r.mac.clone()).collect();
        let keys: Vec<Option<String>> = records.iter().map(|r| r.key.clone()).collect();
        client
            .execute(
                "WITH written AS (INSERT INTO akritas_records (store, seq, time, kind, data, prev, hash, mac, key) \
                 SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $11::text[])) \
                 UPDATE akritas_heads SET seq = $9, hash = $10 WHERE store = $1",
                &[
                    &self.store,
                    &seqs,
                    &column(|r| r.time.clone()),
                    &column(|r| r.kind.clone()),
                    &column(|r| r.data.clone()),
                    &column(|r| r.prev.clone()),
                    &column(|r| r.hash.clone()),
                    &macs,
                    &db_seq(before.0),
                    &before.1,
                    &keys,
                ],
            )
            .await
            .map_err(statement("copy records"))?;
        locked.tx.commit().await.map_err(statement("commit the copied records"))
    }

    /// Puts `data` in place as the store's snapshot at record `seq` (whose hash is `hash`) unless
    /// a newer one is there, keeping every record.
    pub async fn import_snapshot(&self, seq: u64, hash: &str, format: &str, data: &str) -> Result<(), DatabaseError> {
        let checkpoint = crate::journal::Checkpoint { seq, hash: hash.to_string(), location: super::located(seq) };
        self.keep_snapshot(&checkpoint, format, data).await
    }

    /// The store's snapshot: its record's seq, its format and data.
    pub async fn stored_snapshot(&self) -> Result<Option<(u64, String, String)>, DatabaseError> {
        Ok(self.snapshot(None).await?.map(|s| (s.checkpoint.seq, s.format, s.data)))
    }
}
