//! The audit on the shared database (`storage: postgres`). Every replica reads Runs from the
//! database itself, so a Run started on one replica is listed, read and continued on any
//! other, with no index to keep in step.
//!
//! Records are still one keyed hash chain (the `audit` store), each row carrying its Run's id
//! as its key. Appends of every task of this replica go through one writer task: it takes the
//! store's head lock (which also serialises the writers of every other replica), reads what the
//! database knows of the Runs its batch names, lets each append decide its record from that
//! (the event's sequence, whether the Run may still finish, the Run's own tool calls for a
//! result), checks it with the same lifecycle rules a replay applies, and writes the batch in
//! one transaction. So the head lock is the per-Run writer lock across replicas, and a batch
//! holds at most one append per Run (a second waits for the next batch).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::reads::READ;
use super::replay::{self, Facts};
use super::{AuditError, AuditStorage, Build, MAX_LIST, RunId, RunRecord, RunStatus};
use crate::journal::database::{Database, DatabaseError, Locked, Log, Replica, seq_of, statement};
use crate::journal::{Location, Record};

/// The audit's store in the database.
/// The audit's store in the database.
pub const STORE: &str = "audit";
/// Most appends decided and written in one transaction.
const MAX_BATCH: usize = 256;
/// Run starts read per page of a listing.
const LIST_PAGE: i64 = 500;

enum Append {
    Start(RunId, Value),
    Write { id: RunId, full: bool, build: Build },
    Read(Value),
}

impl Append {
    fn run(&self) -> Option<&RunId> {
        match self {
            Append::Start(id, _) | Append::Write { id, .. } => Some(id),
            Append::Read(_) => None,
        }
    }
}

struct Queued {
    append: Append,
    reply: oneshot::Sender<Result<Record, AuditError>>,
}

pub(super) struct DbAudit {
    log: Log,
    db: Database,
    queue: mpsc::UnboundedSender<Queued>,
    storage: AuditStorage,
    replica: Replica,
    /// Records this replica wrote since its last retention pass.
    written: Arc<AtomicU64>,
}

impl DbAudit {
    /// The audit of `db` (the schema migrated), written by `replica`; records are stamped, bounded
    /// and sealed as `storage.journal` says. Starts its writer task on the current runtime.
    pub(super) fn open(db: &Database, storage: AuditStorage, replica: Replica) -> DbAudit {
        let options = &storage.journal;
        let log = Log::new(db, STORE, options.clock.clone(), options.max_record_bytes, options.mac_key.clone());
        let (queue, receiver) = mpsc::unbounded_channel();
        let written = Arc::new(AtomicU64::new(0));
        let retention = storage.retention.map(|max_age| (max_age, storage.snapshot_records.max(1)));
        tokio::spawn(run(log.clone(), receiver, written.clone(), retention));
        DbAudit { log, db: db.clone(), queue, storage, replica, written }
    }

    async fn append(&self, append: Append) -> Result<Record, AuditError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Queued { append, reply }).map_err(|_| AuditError::Interrupted)?;
        answer.await.map_err(|_| AuditError::Interrupted)?
    }

    /// Writes a Run's first record, naming this replica as the one executing it.
    pub(super) async fn start(&self, id: &RunId, mut data: Value) -> Result<(), AuditError> {
        data["replica"] = Value::String(self.replica.id().to_string());
        self.append(Append::Start(id.clone(), data)).await.map(|_| ())
    }

    pub(super) async fn append_read(&self, data: Value) -> Result<(), AuditError> {
        self.append(Append::Read(data)).await.map(|_| ())
    }

    pub(super) async fn write(&self, id: &RunId, full: bool, build: Build) -> Result<Record, AuditError> {
        self.append(Append::Write { id: id.clone(), full, build }).await
    }

    /// Whether the Run is kept.
    pub(super) async fn contains(&self, id: &RunId) -> Result<bool, AuditError> {
        Ok(self.namespace_of(id).await?.is_some())
    }

    /// One Run with its raw tool payloads.
    pub(super) async fn get(&self, id: &RunId) -> Result<Option<RunRecord>, AuditError> {
        Ok(load_runs(&self.log, None, std::slice::from_ref(id)).await?.remove(id))
    }

    /// The namespace of a Run, from its start record.
    pub(super) async fn namespace_of(&self, id: &RunId) -> Result<Option<String>, AuditError> {
        let keys = [id.to_string()];
        let starts = self.log.keyed(None, &keys, Some(&["run_started"])).await?;
        Ok(starts.first().and_then(|(_, record)| record.data["run"]["namespace"].as_str().map(str::to_string)))
    }

    /// The newest `limit` Runs (at most [`MAX_LIST`]) of the namespaces `visible` accepts.
    pub(super) async fn list_where(
        &self,
        limit: usize,
        visible: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<Vec<RunRecord>, AuditError> {
        let limit = limit.min(MAX_LIST);
        let client = self.db.client().await?;
        let mut ids = Vec::new();
        let mut before = i64::MAX;
        while ids.len() < limit {
            let rows = client
                .query(
                    "SELECT seq, key, data FROM akritas_records WHERE store = $1 AND kind = 'run_started' AND seq < $2 \
                     ORDER BY seq DESC LIMIT $3",
                    &[&STORE, &before, &LIST_PAGE],
                )
                .await
                .map_err(statement("list Runs"))?;
            let Some(last) = rows.last() else { break };
            before = last.get(0);
            for row in &rows {
                let data: String = row.get(2);
                let namespace = serde_json::from_str::<Value>(&data)
                    .ok()
                    .and_then(|v| v["run"]["namespace"].as_str().map(str::to_string))
                    .unwrap_or_default();
                if visible(&namespace) && ids.len() < limit {
                    ids.push(run_id(&row.get::<_, String>(1))?);
                }
            }
        }
        let mut runs = load_runs(&self.log, None, &ids).await?;
        Ok(ids.iter().filter_map(|id| runs.remove(id)).map(|run| run.summary()).collect())
    }

    /// The Runs made for these alert jobs, oldest first, with their raw tool payloads.
    pub(super) async fn runs_of_jobs(&self, jobs: &BTreeSet<&str>) -> Result<Vec<RunRecord>, AuditError> {
        let jobs: Vec<String> = jobs.iter().map(|job| job.to_string()).collect();
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT key FROM akritas_records WHERE store = $1 AND kind IN ('run_started', 'run_finished') \
                 AND COALESCE(data::jsonb #>> '{run,metadata,job_id}', data::jsonb #>> '{metadata,job_id}') = ANY($2) \
                 GROUP BY key ORDER BY min(seq)",
                &[&STORE, &jobs],
            )
            .await
            .map_err(statement("find the Runs of jobs"))?;
        let ids = rows.iter().map(|row| run_id(&row.get::<_, String>(0))).collect::<Result<Vec<_>, _>>()?;
        let mut runs = load_runs(&self.log, None, &ids).await?;
        // A Run's job is in its start or its finish: both were matched, the Run's own is kept.
        Ok(ids
            .iter()
            .filter_map(|id| runs.remove(id))
            .filter(|run| {
                run.metadata.get("job_id").and_then(Value::as_str).is_some_and(|job| jobs.iter().any(|j| j == job))
            })
            .collect())
    }

    /// Runs by status, counting only Runs whose start is kept.
    pub(super) async fn status_counts(&self) -> Result<BTreeMap<&'static str, u64>, AuditError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT COALESCE(f.data::jsonb ->> 'status', 'running'), count(*) FROM akritas_records s \
                 LEFT JOIN akritas_records f ON f.store = s.store AND f.key = s.key AND f.kind = 'run_finished' \
                 WHERE s.store = $1 AND s.kind = 'run_started' GROUP BY 1",
                &[&STORE],
            )
            .await
            .map_err(statement("count Runs"))?;
        let mut counts = BTreeMap::from([("running", 0), ("succeeded", 0), ("failed", 0)]);
        for row in &rows {
            let status: String = row.get(0);
            let name = match status.as_str() {
                "succeeded" => "succeeded",
                "failed" => "failed",
                _ => "running",
            };
            *counts.entry(name).or_default() += seq_of(row.get(1));
        }
        Ok(counts)
    }

    /// Number of Runs kept.
    pub(super) async fn len(&self) -> Result<usize, AuditError> {
        let client = self.db.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM akritas_records WHERE store = $1 AND kind = 'run_started'", &[&STORE])
            .await
            .map_err(statement("count Runs"))?;
        Ok(seq_of(row.get(0)) as usize)
    }

    /// Runs still running whose replica stopped (its heartbeat is older than the lease): no
    /// replica will finish them.
    pub(super) async fn orphaned(&self) -> Result<Vec<RunId>, AuditError> {
        let client = self.db.client().await?;
        let rows = client
            .query(
                "SELECT s.key FROM akritas_records s WHERE s.store = $1 AND s.kind = 'run_started' \
                 AND NOT EXISTS (SELECT 1 FROM akritas_records f WHERE f.store = s.store AND f.key = s.key AND f.kind = 'run_finished') \
                 AND NOT EXISTS (SELECT 1 FROM akritas_replicas r WHERE r.id = s.data::jsonb ->> 'replica' \
                 AND r.heartbeat_at > now() - make_interval(secs => $2)) ORDER BY s.seq",
                &[&STORE, &self.replica.lease().as_secs_f64()],
            )
            .await
            .map_err(statement("find Runs of stopped replicas"))?;
        rows.iter().map(|row| run_id(&row.get::<_, String>(0))).collect()
    }

    /// Deletes the records older than the retention, up to the oldest Run still running (now).
    pub(super) async fn retain(&self) -> Result<u64, AuditError> {
        let Some(max_age) = self.storage.retention else { return Ok(0) };
        self.written.store(0, Ordering::Relaxed);
        Ok(retain(&self.log, max_age).await?)
    }
}

/// Deletes the audit records older than `max_age` before the start of the oldest Run still
/// running; the Runs whose start went are no longer listed or read.
async fn retain(log: &Log, max_age: std::time::Duration) -> Result<u64, DatabaseError> {
    let client = log.database().client().await?;
    let row = client
        .query_one(
            "SELECT min(s.seq) FROM akritas_records s WHERE s.store = $1 AND s.kind = 'run_started' \
             AND NOT EXISTS (SELECT 1 FROM akritas_records f WHERE f.store = s.store AND f.key = s.key AND f.kind = 'run_finished')",
            &[&STORE],
        )
        .await
        .map_err(statement("find the oldest running Run"))?;
    drop(client);
    let keep_from = row.get::<_, Option<i64>>(0).map_or(u64::MAX, seq_of);
    let removed = log.retain(max_age, keep_from).await?.records;
    if removed > 0 {
        tracing::info!(component = "akritas_audit", removed, "audit retention deleted old records");
    }
    Ok(removed)
}

/// A Run id as a row's key holds it.
fn run_id(key: &str) -> Result<RunId, AuditError> {
    RunId::parse(key).ok_or_else(|| {
        AuditError::Database(DatabaseError::Broken {
            store: STORE.to_string(),
            seq: 0,
            reason: format!("a record is filed under {key:?}, which is not a Run id"),
        })
    })
}

/// The Runs rebuilt from their records (each record's hash checked, and its Run id against its
/// key), with the same [`replay::apply`] as a start of the embedded journal. A Run whose start
/// record retention deleted is not returned.
async fn load_runs(log: &Log, locked: Option<&Locked>, ids: &[RunId]) -> Result<HashMap<RunId, RunRecord>, AuditError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let keys: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    let records = log.keyed(locked, &keys, None).await?;
    let mut state = replay::State::default();
    let mut trimmed = HashSet::new();
    for (key, record) in records {
        let named = record.data.get("run_id").or_else(|| record.data.get("run").and_then(|run| run.get("id")));
        if named.and_then(Value::as_str) != Some(key.as_str()) {
            return Err(AuditError::Unreadable {
                run: run_id(&key)?,
                reason: format!("record {} is filed under another Run than the one it names", record.seq),
            });
        }
        if trimmed.contains(&key) {
            continue;
        }
        let started = state.runs.keys().any(|id| id.as_str() == key);
        if !started && record.kind != "run_started" {
            trimmed.insert(key);
            continue;
        }
        if let Err(error) = replay::apply(&mut state, &record) {
            return Err(AuditError::Unreadable {
                run: run_id(&key)?,
                reason: format!("record {}: {error}", record.seq),
            });
        }
    }
    Ok(state.runs)
}

/// What the database knows of these Runs, read under the head lock: each kept Run's status,
/// events and whether it has a result.
async fn facts_of(locked: &Locked, ids: &[String]) -> Result<HashMap<String, Facts>, DatabaseError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = locked
        .client()
        .query(
            "SELECT key, count(*) FILTER (WHERE kind = 'run_event'), max(data) FILTER (WHERE kind = 'run_finished'), \
             bool_or(kind = 'investigation_result'), bool_or(kind = 'run_started') FROM akritas_records \
             WHERE store = $1 AND key = ANY($2) GROUP BY key",
            &[&STORE, &ids],
        )
        .await
        .map_err(statement("read the Runs' state"))?;
    let mut facts = HashMap::new();
    for row in &rows {
        if !row.get::<_, bool>(4) {
            continue;
        }
        let finished: Option<String> = row.get(2);
        let status = match finished.and_then(|data| serde_json::from_str::<Value>(&data).ok()) {
            Some(data) => serde_json::from_value(data["status"].clone()).unwrap_or(RunStatus::Failed),
            None => RunStatus::Running,
        };
        let events = seq_of(row.get(1)) as usize;
        facts.insert(row.get(0), Facts { status, events, has_result: row.get(3) });
    }
    Ok(facts)
}

/// The writer task: batch by batch until every handle is gone.
async fn run(
    log: Log,
    mut receiver: mpsc::UnboundedReceiver<Queued>,
    written: Arc<AtomicU64>,
    retention: Option<(std::time::Duration, u64)>,
) {
    let mut carried: VecDeque<Queued> = VecDeque::new();
    loop {
        let first = match carried.pop_front() {
            Some(queued) => queued,
            None => match receiver.recv().await {
                Some(queued) => queued,
                None => return,
            },
        };
        let mut batch = vec![first];
        let mut runs: HashSet<RunId> = batch[0].append.run().cloned().into_iter().collect();
        let mut later = VecDeque::new();
        while batch.len() < MAX_BATCH {
            let Some(queued) = carried.pop_front().or_else(|| receiver.try_recv().ok()) else { break };
            // One append per Run in a batch: each decides from what the database holds.
            match queued.append.run() {
                Some(id) if !runs.insert(id.clone()) => later.push_back(queued),
                _ => batch.push(queued),
            }
        }
        later.extend(carried.drain(..));
        carried = later;
        let count = batch.len() as u64;
        decide_and_write(&log, batch).await;
        if let Some((max_age, every)) = retention
            && written.fetch_add(count, Ordering::Relaxed) + count >= every
        {
            written.store(0, Ordering::Relaxed);
            let log = log.clone();
            tokio::spawn(async move {
                if let Err(error) = retain(&log, max_age).await {
                    tracing::warn!(component = "akritas_audit", %error, "audit retention failed; it is retried later");
                }
            });
        }
    }
}

async fn decide_and_write(log: &Log, batch: Vec<Queued>) {
    let locked = match log.lock().await {
        Ok(locked) => locked,
        Err(error) => {
            for queued in batch {
                let _ = queued.reply.send(Err(error.clone().into()));
            }
            return;
        }
    };
    let decided = decide(log, &locked, batch).await;
    let (decided, replies) = match decided {
        Ok(decided) => decided,
        Err((error, replies)) => {
            for reply in replies {
                let _ = reply.send(Err(AuditError::Database(error.clone())));
            }
            return;
        }
    };
    let mut rows = Vec::new();
    let mut waiting = Vec::new();
    for ((outcome, reply), data) in replies.into_iter().zip(&decided) {
        match (outcome, data) {
            (Ok((kind, key)), Some(data)) => match log.row(kind, data) {
                Ok(mut row) => {
                    row.key = key;
                    rows.push(row);
                    waiting.push(reply);
                }
                Err(error) => {
                    let _ = reply.send(Err(error.into()));
                }
            },
            (Err(error), _) => {
                let _ = reply.send(Err(error));
            }
            (Ok(_), None) => {
                let _ = reply.send(Err(AuditError::Interrupted));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    match log.write(locked, rows).await {
        Ok(records) => {
            for (reply, record) in waiting.into_iter().zip(records) {
                let _ = reply.send(Ok(record));
            }
        }
        Err(error) => {
            for reply in waiting {
                let _ = reply.send(Err(AuditError::Database(error.clone())));
            }
        }
    }
}

type Outcome = Result<(&'static str, Option<String>), AuditError>;
type Reply = oneshot::Sender<Result<Record, AuditError>>;

/// Each append's record, decided from what the database holds under the head lock and checked
/// with the replay's lifecycle rules: its kind and key (or why there is none) and its data.
#[allow(clippy::type_complexity)]
async fn decide(
    log: &Log,
    locked: &Locked,
    batch: Vec<Queued>,
) -> Result<(Vec<Option<Value>>, Vec<(Outcome, Reply)>), (DatabaseError, Vec<Reply>)> {
    let ids: Vec<String> = batch
        .iter()
        .filter_map(|queued| match &queued.append {
            Append::Write { id, .. } | Append::Start(id, _) => Some(id.to_string()),
            Append::Read(_) => None,
        })
        .collect();
    let full: Vec<RunId> = batch
        .iter()
        .filter_map(|queued| match &queued.append {
            Append::Write { id, full: true, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    let facts = match facts_of(locked, &ids).await {
        Ok(facts) => facts,
        Err(error) => return Err((error, batch.into_iter().map(|q| q.reply).collect())),
    };
    // A Run that cannot be rebuilt fails its own append only.
    let mut runs = HashMap::new();
    for id in full {
        let loaded = load_runs(log, Some(locked), std::slice::from_ref(&id)).await;
        runs.insert(id.clone(), loaded.map(|mut runs| runs.remove(&id)));
    }
    let mut datas = Vec::with_capacity(batch.len());
    let mut outcomes = Vec::with_capacity(batch.len());
    for Queued { append, reply } in batch {
        let (key, built) = match append {
            Append::Read(data) => (None, Ok((READ, data))),
            Append::Start(id, data) => (Some(id.to_string()), Ok(("run_started", data))),
            Append::Write { id, build, .. } => {
                let built = match (facts.get(id.as_str()), runs.remove(&id)) {
                    (_, Some(Err(error))) => Err(error),
                    (Some(facts), run) => {
                        let run = run.and_then(Result::ok).flatten();
                        build(&id, *facts, run.as_ref())
                    }
                    (None, _) => Err(AuditError::UnknownRun(id.clone())),
                };
                (Some(id.to_string()), built)
            }
        };
        let checked = built.and_then(|(kind, data)| {
            let record = Record {
                seq: 0,
                time: String::new(),
                kind: kind.to_string(),
                data,
                hash: String::new(),
                location: Location::default(),
            };
            let op = replay::parse(&record).map_err(AuditError::Refused)?;
            let known = key.as_deref().and_then(|key| facts.get(key)).copied();
            replay::check(&op, known).map_err(AuditError::Refused)?;
            Ok((kind, record.data))
        });
        match checked {
            Ok((kind, data)) => {
                datas.push(Some(data));
                outcomes.push((Ok((kind, key)), reply));
            }
            Err(error) => {
                datas.push(None);
                outcomes.push((Err(error), reply));
            }
        }
    }
    Ok((datas, outcomes))
}

/// What `audit verify` found in the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseVerified {
    /// The chain from its anchor to its head.
    pub chain: crate::journal::database::Verified,
    /// Runs replayed (those whose start is kept).
    pub runs: u64,
}

/// Checks the audit in the database without changing it: the whole chain from its anchor to its
/// head (every hash, and every seal with `key`), that every Run record is filed under the Run it
/// names, then every kept Run replayed with the rules a start of the embedded journal applies
/// (event order, lifecycle, a result's evidence). Backs `akritas audit verify --database-env`.
pub async fn verify(db: &Database, key: Option<&[u8]>) -> Result<DatabaseVerified, AuditError> {
    let options = crate::journal::JournalOptions::default();
    let log = Log::new(db, STORE, options.clock, options.max_record_bytes, None);
    let chain = log.verify(key).await?;
    let client = db.client().await?;
    let unfiled = client
        .query_opt(
            "SELECT seq FROM akritas_records WHERE store = $1 AND key IS NULL \
             AND kind IN ('run_started', 'run_event', 'run_finished', 'investigation_result') ORDER BY seq LIMIT 1",
            &[&STORE],
        )
        .await
        .map_err(statement("check that every Run record is filed under its Run"))?;
    if let Some(row) = unfiled {
        return Err(AuditError::Database(DatabaseError::Broken {
            store: STORE.to_string(),
            seq: seq_of(row.get(0)),
            reason: "a Run record is filed under no Run (its key was removed)".to_string(),
        }));
    }
    let mut runs = 0;
    let mut after = String::new();
    loop {
        let rows = client
            .query(
                "SELECT key FROM akritas_records WHERE store = $1 AND kind = 'run_started' AND key > $2 ORDER BY key LIMIT 200",
                &[&STORE, &after],
            )
            .await
            .map_err(statement("list the Runs"))?;
        let Some(last) = rows.last() else { break };
        after = last.get(0);
        let ids = rows.iter().map(|row| run_id(&row.get::<_, String>(0))).collect::<Result<Vec<_>, _>>()?;
        runs += load_runs(&log, None, &ids).await?.len() as u64;
    }
    Ok(DatabaseVerified { chain, runs })
}
