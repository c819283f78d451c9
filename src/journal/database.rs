//! The database backend of the journal-backed stores: PostgreSQL holds each store's records as
//! one hash chain of rows (the same `seq`, `time`, `kind`, `prev`, `data` and `hash` as a journal
//! line, hashed the same way), a head row per store and its newest snapshot.
//!
//! Several replicas share one database. A writer locks its store's head row (`FOR UPDATE`), so
//! decisions of one store are taken one at a time across every replica; under that lock it
//! first applies the records other replicas wrote since its state's last one, then decides,
//! then appends. A record is durable when its transaction commits, before anything answers.
//!
//! The schema is versioned; [`Database::migrate`] applies the missing versions at start under an
//! advisory lock, so replicas starting together migrate once, and refuses a database migrated by
//! a newer version.

mod compact;
mod group;
mod health;
mod import;
mod leader;
mod migrate;
mod replica;
mod tx;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};

pub use compact::Retained;
pub use group::{AppendFailed, Group, Pending};
pub use health::{DatabaseHealth, HealthWatch, PoolHealth};
pub use import::{Imported, Position};
pub use leader::lead;
pub use migrate::Migrated;
pub use replica::Replica;
use tx::Tx;
pub use verify::Verified;

pub(crate) use super::format::GENESIS_PREV;
use super::format::{check_app_kind, record_hash, record_mac};
use super::{Checkpoint, Clock, JournalError, Location, Record};

/// Run on a pooled connection before it is used again.
const RECYCLE: &str = "ROLLBACK; RESET ALL; SELECT pg_advisory_unlock_all()";
/// Longest wait for a new connection (TCP, TLS and the start-up exchange).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a free connection of the pool.
const POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest statement.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// A transaction left idle this long is ended by the server, releasing its locks.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

/// What the database backend could not do. Messages never carry the connection string.
#[derive(Clone, Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The connection string could not be read.
    #[error("the database connection string is not valid: {0}")]
    Config(String),
    /// No connection could be made or kept.
    #[error("the database is unreachable: {0}")]
    Unreachable(String),
    /// A statement failed.
    #[error("the database refused to {doing}: {message}")]
    Statement {
        /// What was being done.
        doing: &'static str,
        /// The server's message.
        message: String,
    },
    /// A record does not match its hash: it was changed after it was written.
    #[error("record {seq} of store {store:?} does not match its hash (it was changed after it was written)")]
    Changed {
        /// The store.
        store: String,
        /// The record.
        seq: u64,
    },
    /// The chain is broken: a record is missing, out of place, or its seal does not match.
    #[error("record {seq} of store {store:?}: {reason}")]
    Broken {
        /// The store.
        store: String,
        /// The record.
        seq: u64,
        /// What is wrong.
        reason: String,
    },
    /// A newer version migrated this database.
    #[error(
        "the database schema is at version {found} but this version of Akritas knows only up to {known}; run a version at least as new as the one that migrated it"
    )]
    NewerSchema {
        /// The database's version.
        found: i32,
        /// This version's newest.
        known: i32,
    },
}

/// An error and its sources, `: `-joined.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        let more = next.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = next.source();
    }
    text
}

pub(crate) fn statement(doing: &'static str) -> impl Fn(tokio_postgres::Error) -> DatabaseError {
    move |error| {
        let message = match error.as_db_error() {
            Some(db) => db.message().to_string(),
            None => chain(&error),
        };
        if error.is_closed() || error.as_db_error().is_none() && message.contains("connection") {
            DatabaseError::Unreachable(message)
        } else {
            DatabaseError::Statement { doing, message }
        }
    }
}

/// A pool of connections to the shared database. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    pool: Pool,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("max_connections", &self.pool.status().max_size).finish_non_exhaustive()
    }
}

impl Database {
    /// A pool of at most `max_connections` connections to `url` (a `postgres://` URL or a
    /// `key=value` string). `sslmode=require` (or `prefer`) uses TLS verified against the
    /// system's roots and `ca_pem`; `sslmode=disable` sends in the clear.
    pub fn connect(url: &str, ca_pem: Option<&[u8]>, max_connections: usize) -> Result<Self, DatabaseError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| DatabaseError::Config(chain(&e)))?;
        // Nothing waits on the database without a bound: a connection attempt, a statement, and
        // a transaction a stalled replica left open (which would hold a store's head lock).
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.keepalives_idle(Duration::from_secs(30));
        let options = format!(
            "{} -c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            config.get_options().unwrap_or_default(),
            STATEMENT_TIMEOUT.as_millis(),
            IDLE_IN_TRANSACTION_TIMEOUT.as_millis()
        );
        config.options(options.trim_start());
        // A connection handed back in the middle of something (a caller that went away) is made
        // clean before its next use: no open transaction, no session setting, no advisory lock.
        let recycling_method = RecyclingMethod::Custom(RECYCLE.to_string());
        let manager_config = ManagerConfig { recycling_method };
        let manager = match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable => {
                Manager::from_config(config, tokio_postgres::NoTls, manager_config)
            }
            _ => Manager::from_config(config, tls(ca_pem)?, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| DatabaseError::Config(e.to_string()))?;
        Ok(Database { pool })
    }

    pub(crate) async fn client(&self) -> Result<Object, DatabaseError> {
        let started = std::time::Instant::now();
        let idle = self.pool.status().available > 0;
        let client = self.pool.get().await.map_err(|e| DatabaseError::Unreachable(chain(&e)))?;
        if !idle {
            crate::telemetry::observe(
                "akritas_database_pool_wait_seconds",
                "Time a caller waited for a database connection when none was idle (a new one opened, or the pool was full).",
                &[],
                started.elapsed(),
            );
        }
        Ok(client)
    }
}

fn tls(ca_pem: Option<&[u8]>) -> Result<tokio_postgres_rustls::MakeRustlsConnect, DatabaseError> {
    crate::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(pem) = ca_pem {
        let mut added = 0;
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pem) {
            let cert: rustls::pki_types::CertificateDer<'static> =
                cert.map_err(|e| DatabaseError::Config(format!("the CA bundle is not PEM certificates: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| DatabaseError::Config(format!("the CA bundle holds a bad certificate: {e}")))?;
            added += 1;
        }
        if added == 0 {
            return Err(DatabaseError::Config("the CA bundle holds no certificate".to_string()));
        }
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The last record of a store's chain (seq 0 and the genesis hash when it has none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Head {
    pub seq: u64,
    pub hash: String,
}

/// A store's newest snapshot, as stored.
pub(crate) struct StoredSnapshot {
    pub checkpoint: Checkpoint,
    pub format: String,
    pub data: String,
}

/// One store's chain in the database.
#[derive(Clone)]
pub struct Log {
    db: Database,
    store: &'static str,
    clock: Clock,
    max_record_bytes: usize,
    mac_key: Option<Arc<[u8]>>,
}

/// A store's head row, locked by an open transaction.
pub(crate) struct Locked {
    tx: Tx,
    pub head: Head,
    /// When the lock was taken.
    since: std::time::Instant,
}

impl Locked {
    /// The connection holding the lock, for reads that must see the store as the lock holder
    /// decides.
    pub(crate) fn client(&self) -> &Object {
        self.tx.client()
    }
}

/// Where a record of the database is, for the stores that index records by location: its seq
/// as the segment, so each record is its own unit of retention (a location before another is
/// a record before it).
pub fn located(seq: u64) -> Location {
    Location { segment: seq, offset: 0, len: 0 }
}

pub(crate) fn seq_of(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(crate) fn db_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// A record to write: its kind, its data, and the data as hashed.
pub(crate) struct Row<'a> {
    pub kind: &'a str,
    pub data: &'a serde_json::Value,
    pub json: String,
    /// What the record is about (a Run's id), for reads by key; not hashed, so a reader checks
    /// it against the data.
    pub key: Option<String>,
}

impl Log {
    /// The chain of `store` in `db`; records are stamped by `clock` and sealed with `mac_key`.
    pub fn new(
        db: &Database,
        store: &'static str,
        clock: Clock,
        max_record_bytes: usize,
        mac_key: Option<Arc<[u8]>>,
    ) -> Self {
        Log { db: db.clone(), store, clock, max_record_bytes, mac_key }
    }

    /// The store's name in the database.
    pub fn store(&self) -> &'static str {
        self.store
    }

    /// The database.
    pub(crate) fn database(&self) -> &Database {
        &self.db
    }

    /// Begins a transaction and locks the store's head row.
    pub(crate) async fn lock(&self) -> Result<Locked, DatabaseError> {
        const SELECT: &str = "SELECT seq, hash FROM akritas_heads WHERE store = $1 FOR UPDATE";
        let started = std::time::Instant::now();
        let tx = Tx { client: Some(self.db.client().await?) };
        let client = tx.client();
        // One round trip: the two are pipelined, in this order, on the one connection.
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&self.store];
        let (begun, row) = tokio::join!(client.batch_execute("BEGIN"), client.query_opt(SELECT, &params));
        begun.map_err(statement("begin a transaction"))?;
        let row = match row.map_err(statement("lock the store's head"))? {
            Some(row) => row,
            None => {
                client
                    .execute(
                        "INSERT INTO akritas_heads (store, seq, hash, anchor_hash) VALUES ($1, 0, $2, $2) ON CONFLICT (store) DO NOTHING",
                        &[&self.store, &GENESIS_PREV],
                    )
                    .await
                    .map_err(statement("create the store's head"))?;
                client.query_one(SELECT, &[&self.store]).await.map_err(statement("lock the store's head"))?
            }
        };
        let head = Head { seq: seq_of(row.get(0)), hash: row.get(1) };
        crate::telemetry::observe(
            "akritas_database_lock_wait_seconds",
            "Time a writer waited for its store's head lock (other replicas' and this one's writes in turn).",
            &[("store", self.store)],
            started.elapsed(),
        );
        Ok(Locked { tx, head, since: std::time::Instant::now() })
    }

    /// A connection: the locked one, or one from the pool.
    async fn reader<'a>(
        &self,
        locked: Option<&'a Locked>,
        owned: &'a mut Option<Object>,
    ) -> Result<&'a Object, DatabaseError> {
        if let Some(locked) = locked {
            let client = locked.tx.client();
            return Ok(client);
        }
        Ok(owned.insert(self.db.client().await?))
    }

    /// The store's newest snapshot, if any.
    pub(crate) async fn snapshot(&self, locked: Option<&Locked>) -> Result<Option<StoredSnapshot>, DatabaseError> {
        let mut owned = None;
        let client = self.reader(locked, &mut owned).await?;
        let row = client
            .query_opt("SELECT seq, hash, format, data FROM akritas_snapshots WHERE store = $1", &[&self.store])
            .await
            .map_err(statement("read the store's snapshot"))?;
        Ok(row.map(|row| StoredSnapshot {
            checkpoint: Checkpoint { seq: seq_of(row.get(0)), hash: row.get(1), location: located(seq_of(row.get(0))) },
            format: row.get(2),
            data: row.get(3),
        }))
    }

    /// The store's head seq (0 when it has none) and its records after `seq`, in order, each
    /// with the hash it claims to follow, in one query; a record that does not match its own
    /// hash is an error.
    pub(crate) async fn after(
        &self,
        locked: Option<&Locked>,
        seq: u64,
    ) -> Result<(u64, Vec<(String, Record)>), DatabaseError> {
        let mut owned = None;
        let client = self.reader(locked, &mut owned).await?;
        let rows = client
            .query(
                "SELECT h.seq, r.seq, r.time, r.kind, r.data, r.prev, r.hash, r.mac FROM akritas_heads h \
                 LEFT JOIN akritas_records r ON r.store = h.store AND r.seq > $2 WHERE h.store = $1 ORDER BY r.seq",
                &[&self.store, &db_seq(seq)],
            )
            .await
            .map_err(statement("read the store's records"))?;
        let head = rows.first().map_or(0, |row| seq_of(row.get(0)));
        let records = rows
            .iter()
            .filter(|row| row.get::<_, Option<i64>>(1).is_some())
            .map(|row| self.record_of(row, 1, None).map(|(prev, record, _)| (prev, record)))
            .collect::<Result<_, _>>()?;
        Ok((head, records))
    }

    /// The record `seq`, if it is kept.
    pub async fn read(&self, seq: u64) -> Result<Option<Record>, DatabaseError> {
        let client = self.db.client().await?;
        let row = client
            .query_opt(
                "SELECT seq, time, kind, data, prev, hash, mac FROM akritas_records WHERE store = $1 AND seq = $2",
                &[&self.store, &db_seq(seq)],
            )
            .await
            .map_err(statement("read a record"))?;
        row.map(|row| self.record_of(&row, 0, None).map(|(_, record, _)| record)).transpose()
    }

    /// The records whose key is one of `keys` (of one of `kinds`, when given), in seq order,
    /// each with its key; a record that does not match its hash is an error.
    pub(crate) async fn keyed(
        &self,
        locked: Option<&Locked>,
        keys: &[String],
        kinds: Option<&[&str]>,
    ) -> Result<Vec<(String, Record)>, DatabaseError> {
        let mut owned = None;
        let client = self.reader(locked, &mut owned).await?;
        let kinds: Option<Vec<String>> = kinds.map(|kinds| kinds.iter().map(|k| k.to_string()).collect());
        let rows = client
            .query(
                "SELECT seq, time, kind, data, prev, hash, mac, key FROM akritas_records \
                 WHERE store = $1 AND key = ANY($2) AND ($3::text[] IS NULL OR kind = ANY($3)) ORDER BY seq",
                &[&self.store, &keys, &kinds],
            )
            .await
            .map_err(statement("read records by key"))?;
        rows.iter().map(|row| Ok((row.get(7), self.record_of(row, 0, None)?.1))).collect()
    }

    /// Checks a record's size and kind, and the data as it is hashed.
    pub(crate) fn row<'a>(&self, kind: &'a str, data: &'a serde_json::Value) -> Result<Row<'a>, JournalError> {
        check_app_kind(kind)?;
        let json = data.to_string();
        if json.len() > self.max_record_bytes {
            return Err(JournalError::RecordTooLarge { size: json.len(), limit: self.max_record_bytes });
        }
        Ok(Row { kind, data, json, key: None })
    }

    /// Appends a record after the locked head and commits: durable once this returns.
    pub(crate) async fn append(
        &self,
        locked: Locked,
        kind: &str,
        data: &serde_json::Value,
    ) -> Result<Record, AppendError> {
        let row = self.row(kind, data).map_err(AppendError::Journal)?;
        let mut records = self.write(locked, vec![row]).await.map_err(AppendError::Database)?;
        Ok(records.pop().expect("one record written"))
    }

    /// Writes `rows` after the locked head, in order, in one statement, and commits.
    pub(crate) async fn write(&self, locked: Locked, rows: Vec<Row<'_>>) -> Result<Vec<Record>, DatabaseError> {
        let mut records = Vec::with_capacity(rows.len());
        let (mut seqs, mut times, mut kinds, mut datas, mut prevs, mut hashes, mut macs, mut keys) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut prev = locked.head.hash.clone();
        for (n, row) in rows.into_iter().enumerate() {
            let seq = locked.head.seq + 1 + n as u64;
            let time = (self.clock)();
            let hash = record_hash(&prev, seq, &time, row.kind, &row.json);
            macs.push(self.mac_key.as_deref().map(|key| record_mac(key, &hash)));
            seqs.push(db_seq(seq));
            times.push(time.clone());
            kinds.push(row.kind.to_string());
            keys.push(row.key);
            datas.push(row.json);
            prevs.push(std::mem::replace(&mut prev, hash.clone()));
            hashes.push(hash.clone());
            records.push(Record {
                seq,
                time,
                kind: row.kind.to_string(),
                data: row.data.clone(),
                hash,
                location: located(seq),
            });
        }
        let last = records.last().map(|r| (db_seq(r.seq), r.hash.clone()));
        let (head_seq, head_hash) = last.unwrap_or((db_seq(locked.head.seq), locked.head.hash.clone()));
        // The rows and the head move in one statement (a data-modifying WITH always runs).
        locked
            .tx
            .client()
            .execute(
                "WITH written AS (INSERT INTO akritas_records (store, seq, time, kind, data, prev, hash, mac, key) \
                 SELECT $1, * FROM UNNEST($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $11::text[])) \
                 UPDATE akritas_heads SET seq = $9, hash = $10 WHERE store = $1",
                &[&self.store, &seqs, &times, &kinds, &datas, &prevs, &hashes, &macs, &head_seq, &head_hash, &keys],
            )
            .await
            .map_err(statement("append records"))?;
        let since = locked.since;
        locked.tx.commit().await.map_err(statement("commit records"))?;
        crate::telemetry::observe(
            "akritas_database_transaction_seconds",
            "Time a write held its store's head lock, from taking it to the commit.",
            &[("store", self.store)],
            since.elapsed(),
        );
        Ok(records)
    }

    /// A row as a record with the hash it claims to follow; checks its hash, and its seal
    /// when `key` is given (returning whether one was checked).
    fn record_of(
        &self,
        row: &tokio_postgres::Row,
        base: usize,
        key: Option<&[u8]>,
    ) -> Result<(String, Record, bool), DatabaseError> {
        let seq = seq_of(row.get(base));
        let data: String = row.get(base + 3);
        let changed = |seq| DatabaseError::Changed { store: self.store.to_string(), seq };
        let parsed = serde_json::from_str(&data).map_err(|_| changed(seq))?;
        let record = Record {
            seq,
            time: row.get(base + 1),
            kind: row.get(base + 2),
            data: parsed,
            hash: row.get(base + 5),
            location: located(seq),
        };
        let prev: String = row.get(base + 4);
        if record_hash(&prev, record.seq, &record.time, &record.kind, &data) != record.hash {
            return Err(changed(seq));
        }
        let sealed = match key {
            Some(key) => {
                let mac: Option<String> = row.get(base + 6);
                if mac.as_deref() != Some(record_mac(key, &record.hash).as_str()) {
                    return Err(DatabaseError::Broken {
                        store: self.store.to_string(),
                        seq,
                        reason: "its keyed seal is missing or does not match the key".to_string(),
                    });
                }
                true
            }
            None => false,
        };
        Ok((prev, record, sealed))
    }
}

/// Why an append failed.
#[derive(Debug)]
pub(crate) enum AppendError {
    /// The record itself is refused (kind, size).
    Journal(JournalError),
    /// The database failed; nothing was written.
    Database(DatabaseError),
}
