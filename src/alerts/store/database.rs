//! The alert store on the database replicas share (`storage: postgres`).
//!
//! Every replica keeps the state in memory, as on the embedded journal, and follows the
//! `alerts` chain in the database. A write takes the store's head lock, first applies the records
//! other replicas wrote since its state's last one (the same replay a start runs, correlation
//! included), then decides on that state, writes its records and commits. So decisions (dedup,
//! correlation, admission, job steps) are taken one at a time across every replica, each on
//! everything written before it, and a job step taken elsewhere first makes a stale one fail.
//! Reads and the worker follow the chain too ([`AlertStore::follow`]). A record's location is
//! its seq ([`crate::journal::database::located`]).
//!
//! When a write fails after deciding (the database went away, a commit whose outcome is
//! unknown), the state is rebuilt from the database before the store decides again, as after a
//! failed journal write. A snapshot of the state is kept in the database without deleting the
//! records it stands for; retention deletes the records older than `alert_retention` that
//! neither the snapshot, an open incident nor a job that can still run needs. A replica whose
//! next records retention deleted rebuilds from the snapshot.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::alerts::intake::admission::Limits;
use crate::alerts::intake::event::Event;
use crate::alerts::store::error::inconsistent;
use crate::alerts::store::ingest::{Made, refuse_replay};
use crate::alerts::store::record::{BatchRecord, split};
use crate::alerts::store::saved::{FORMAT, Loaded, Saved};
use crate::alerts::store::state::{Bounds, DELIVERY, State, apply, apply_batch};
use crate::alerts::store::{AlertStore, AlertStoreError, Backing, ItemOutcome, Opened, Storage};
use crate::journal::database::{Database, DatabaseError, GENESIS_PREV, Locked, Log};

/// The alert store's chain in the database.
/// The alert store's name in the database.
pub const STORE: &str = "alerts";
/// What messages name the store by.
const NAME: &str = "database:alerts";

/// The alert store's place in the database.
pub(in crate::alerts) struct DbBacking {
    pub(super) log: Log,
    /// Held while the state follows the database or a write goes through, so a record is
    /// applied once in this process.
    turn: tokio::sync::Mutex<()>,
    /// Deliveries waiting for the turn; whoever gets it writes them all.
    queue: std::sync::Mutex<Vec<Queued>>,
    /// Set while decisions taken on the state wait for their write: a caller that goes away
    /// then leaves it set, and the next turn rebuilds the state from the database first.
    deciding: std::sync::atomic::AtomicBool,
}

/// A delivery waiting to be decided.
struct Queued {
    made: Made,
    events: Vec<Event>,
    reply: tokio::sync::oneshot::Sender<Result<Vec<ItemOutcome>, AlertStoreError>>,
}

fn lock_queue(queue: &std::sync::Mutex<Vec<Queued>>) -> std::sync::MutexGuard<'_, Vec<Queued>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

fn legacy(_: &str) -> String {
    crate::tenancy::DEFAULT_NAMESPACE.to_string()
}

impl AlertStore {
    /// Opens the alert store on `db` (its schema migrated): the snapshot kept there, then the
    /// records after it. Records are stamped, bounded and sealed as `storage.journal` says.
    pub async fn open_database(db: &Database, limits: Limits, storage: Storage) -> Result<AlertStore, AlertStoreError> {
        let options = &storage.journal;
        let log = Log::new(db, STORE, options.clock.clone(), options.max_record_bytes, options.mac_key.clone());
        let bounds = Bounds { resolved_kept: storage.resolved_kept };
        let (state, loaded) = load(&log, bounds).await?;
        let backing = Backing::Database(DbBacking {
            log,
            turn: tokio::sync::Mutex::new(()),
            queue: Default::default(),
            deciding: Default::default(),
        });
        let opened = Opened { state, loaded, limits, legacy: BTreeMap::new() };
        Ok(AlertStore::assemble(backing, PathBuf::from(NAME), storage, opened))
    }

    /// Whether the store is on the database.
    pub fn on_database(&self) -> bool {
        matches!(self.backing, Backing::Database(_))
    }

    /// Applies the records other replicas wrote since this state's last one (nothing on the
    /// embedded journal, which only this process writes). Reads and the worker call it first.
    pub async fn follow(&self) -> Result<(), AlertStoreError> {
        let Backing::Database(db) = &self.backing else { return Ok(()) };
        let _turn = db.turn.lock().await;
        self.follow_locked(db, None).await
    }

    /// [`AlertStore::follow`] under the turn (and, for a write, the head lock).
    async fn follow_locked(&self, db: &DbBacking, locked: Option<&Locked>) -> Result<(), AlertStoreError> {
        if db.deciding.load(std::sync::atomic::Ordering::SeqCst) || self.lock().unavailable.is_some() {
            return self.rebuild_from_database_locked(db).await;
        }
        let last = self.lock().pace.last().map(|c| (c.seq, c.hash.clone()));
        let (last_seq, last_hash) = last.unwrap_or_else(|| (0, GENESIS_PREV.to_string()));
        let (head, records) = db.log.after(locked, last_seq).await?;
        if head < last_seq {
            return Err(AlertStoreError::Unavailable(format!(
                "the database's alert chain ends at record {head} but this replica has applied up to {last_seq}: \
                 the database was restored from an older backup; restart the replica to load what it holds"
            )));
        }
        let follows = records.first().is_none_or(|(prev, record)| record.seq == last_seq + 1 && *prev == last_hash);
        if !follows {
            // Retention deleted records this replica had not applied yet: start from the snapshot.
            return self.rebuild_from_database_locked(db).await;
        }
        let mut state = self.lock();
        for (_, record) in &records {
            if let Err(reason) = apply(&mut state, record, &legacy) {
                let error = inconsistent(&self.path, (record.seq, reason));
                state.unavailable = Some(error.to_string());
                return Err(error);
            }
            state.pace.followed(record);
        }
        let woke = !records.is_empty();
        drop(state);
        if woke {
            self.wake();
        }
        Ok(())
    }

    /// Rebuilds the state from the database after a failed write (the recovery of a store on
    /// the database).
    pub(super) async fn rebuild_from_database(&self, db: &DbBacking) -> Result<(), AlertStoreError> {
        let _turn = db.turn.lock().await;
        self.rebuild_from_database_locked(db).await
    }

    async fn rebuild_from_database_locked(&self, db: &DbBacking) -> Result<(), AlertStoreError> {
        let bounds = Bounds { resolved_kept: self.storage.resolved_kept };
        let (fresh, loaded) = load(&db.log, bounds).await?;
        self.install_rebuilt(fresh, loaded);
        // Cleared only once the rebuilt state is in place: a rebuild whose caller went away
        // leaves it set for the next turn.
        db.deciding.store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Records a delivery: under the head lock, on the state caught up with every replica. The
    /// deliveries that arrive while a transaction is in flight wait for the turn together, and
    /// the first of them to get it decides and writes them all in one transaction, in arrival
    /// order (one lock and one commit for the group instead of one each).
    pub(super) async fn ingest_database(
        &self,
        db: &DbBacking,
        made: Made,
        events: Vec<Event>,
    ) -> Result<Vec<ItemOutcome>, AlertStoreError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        lock_queue(&db.queue).push(Queued { made, events, reply });
        let turn = db.turn.lock().await;
        let mut answer = answer;
        match answer.try_recv() {
            // A group written while this delivery waited for the turn held it.
            Ok(decided) => return decided,
            // Its group's writer went away (its caller gave up) before answering.
            Err(tokio::sync::oneshot::error::TryRecvError::Closed) => {
                return Err(Self::unavailable("the delivery's group was interrupted before it was answered; retry"));
            }
            Err(tokio::sync::oneshot::error::TryRecvError::Empty) => {}
        }
        let batch = std::mem::take(&mut *lock_queue(&db.queue));
        self.ingest_batch_locked(db, batch).await;
        drop(turn);
        answer.await.unwrap_or_else(|_| Err(Self::unavailable("the delivery was dropped before it was decided")))
    }

    /// Decides and writes `batch` in one transaction, answering each delivery.
    async fn ingest_batch_locked(&self, db: &DbBacking, batch: Vec<Queued>) {
        let fail_all = |batch: Vec<Queued>, error: &dyn Fn() -> AlertStoreError| {
            for queued in batch {
                let _ = queued.reply.send(Err(error()));
            }
        };
        let locked = match db.log.lock().await {
            Ok(locked) => locked,
            Err(error) => return fail_all(batch, &|| AlertStoreError::Database(error.clone())),
        };
        if let Err(error) = self.follow_locked(db, Some(&locked)).await {
            let message = error.to_string();
            return fail_all(batch, &|| Self::unavailable(&message));
        }
        let (decided, generation) = {
            let mut state = self.lock();
            if let Some(reason) = state.unavailable.clone() {
                drop(state);
                return fail_all(batch, &|| Self::unavailable(&reason));
            }
            let mut decided = Vec::with_capacity(batch.len());
            for Queued { made, events, reply } in batch {
                // A replay, of a delivery written before or earlier in this group, decides nothing.
                if let Err(replayed) = refuse_replay(&state, &made) {
                    let _ = reply.send(Err(replayed));
                    continue;
                }
                let record = self.decide(&mut state, &made, events);
                let parts: Vec<std::sync::Arc<BatchRecord>> = split(record, crate::journal::DEFAULT_MAX_RECORD_BYTES)
                    .into_iter()
                    .map(std::sync::Arc::new)
                    .collect();
                for part in &parts {
                    state.pace.queued();
                    apply_batch(&mut state, part, None);
                }
                decided.push((parts, reply));
            }
            db.deciding.store(true, std::sync::atomic::Ordering::SeqCst);
            (decided, state.generation)
        };
        let datas: Vec<Value> = decided
            .iter()
            .flat_map(|(parts, _)| parts.iter().map(|part| serde_json::to_value(&**part).unwrap_or_default()))
            .collect();
        let rows = datas.iter().map(|data| db.log.row(DELIVERY, data)).collect::<Result<Vec<_>, _>>();
        let written = match rows {
            Ok(rows) => db.log.write(locked, rows).await.map_err(|error| self.fail_database(generation, error)),
            Err(error) => Err(self.fail(generation, error)),
        };
        db.deciding.store(false, std::sync::atomic::Ordering::SeqCst);
        let records = match written {
            Ok(records) => records,
            Err(error) => {
                let message = error.to_string();
                for (_, reply) in decided {
                    let answer = match &error {
                        AlertStoreError::Database(error) => AlertStoreError::Database(error.clone()),
                        _ => Self::unavailable(&message),
                    };
                    let _ = reply.send(Err(answer));
                }
                return;
            }
        };
        let mut records = records.into_iter();
        for (parts, reply) in decided {
            let mut outcomes = Vec::new();
            for part in &parts {
                let Some(record) = records.next() else { break };
                self.settled(generation, &record, |state| state.settle_batch(part, record.location));
                outcomes.extend(part.items.iter().map(|item| item.outcome.clone()));
            }
            let _ = reply.send(Ok(outcomes));
        }
    }

    /// Appends one record decided on the state caught up with every replica.
    pub(super) async fn append_database(
        &self,
        db: &DbBacking,
        kind: &str,
        data: impl FnOnce(&State) -> Result<Value, AlertStoreError>,
        apply: impl FnOnce(&mut State),
        settle: impl FnOnce(&mut State, crate::journal::Location),
    ) -> Result<(), AlertStoreError> {
        let _turn = db.turn.lock().await;
        let locked = db.log.lock().await?;
        self.follow_locked(db, Some(&locked)).await?;
        let (value, generation) = {
            let mut state = self.lock();
            if let Some(reason) = &state.unavailable {
                return Err(Self::unavailable(reason));
            }
            let value = data(&state)?;
            // Checked before anything is applied: a refused record decides nothing.
            db.log.row(kind, &value)?;
            state.pace.queued();
            apply(&mut state);
            db.deciding.store(true, std::sync::atomic::Ordering::SeqCst);
            (value, state.generation)
        };
        let row = db.log.row(kind, &value)?;
        let written = db.log.write(locked, vec![row]).await;
        db.deciding.store(false, std::sync::atomic::Ordering::SeqCst);
        let mut records = written.map_err(|error| self.fail_database(generation, error))?;
        let record = records.pop().expect("one record written");
        self.settled(generation, &record, |state| settle(state, record.location));
        Ok(())
    }

    /// After a write of `generation` failed once the state had decided: stops every decision
    /// until the state is rebuilt from the database.
    fn fail_database(&self, generation: u64, error: DatabaseError) -> AlertStoreError {
        let mut state = self.lock();
        if state.generation == generation && state.unavailable.is_none() {
            tracing::error!(component = "akritas_alerts", event = "journal_write_failed", %error, "an alert write to the database failed; the state is rebuilt from the database before the next decision");
            state.unavailable = Some(error.to_string());
        }
        state.pace.lost();
        AlertStoreError::Database(error)
    }

    /// Writes the state as the store's snapshot in the database (the records stay), then
    /// applies retention up to `keep_from` (the oldest record still needed); returns the first
    /// record kept when retention deleted some (0 otherwise).
    pub(super) async fn save_database_snapshot(
        log: Log,
        checkpoint: crate::journal::Checkpoint,
        data: String,
        retention: Option<std::time::Duration>,
        keep_from: u64,
    ) -> Result<u64, DatabaseError> {
        log.keep_snapshot(&checkpoint, FORMAT, &data).await?;
        let Some(max_age) = retention else { return Ok(0) };
        // The checkpoint's own record stays: a start checks that the records follow it.
        let retained = log.retain(max_age, keep_from.min(checkpoint.seq)).await?;
        if retained.records > 0 {
            tracing::info!(
                component = "akritas_alerts",
                records = retained.records,
                "alert retention deleted old records from the database"
            );
        }
        Ok(retained.last_deleted.map_or(0, |seq| seq + 1))
    }
}

/// The state as the database holds it: the snapshot (when one of this format is there) and the
/// records after it, each following the one before.
async fn load(log: &Log, bounds: Bounds) -> Result<(State, Loaded), AlertStoreError> {
    let empty = || State { bounds, ..State::default() };
    let snapshot = log.snapshot(None).await?;
    let (mut state, from) = match snapshot {
        Some(stored) if stored.format == FORMAT => match serde_json::from_str::<Saved>(&stored.data) {
            Ok(saved) => {
                let checkpoint = stored.checkpoint;
                ((saved.restore(bounds, checkpoint.clone())), Some(checkpoint))
            }
            Err(error) => {
                tracing::warn!(component = "akritas_alerts", %error, "the alert snapshot in the database cannot be read; replaying the records");
                (empty(), None)
            }
        },
        _ => (empty(), None),
    };
    let (mut last_seq, mut last_hash) =
        from.as_ref().map_or_else(|| (0, GENESIS_PREV.to_string()), |c| (c.seq, c.hash.clone()));
    let (_, records) = log.after(None, last_seq).await?;
    let mut replayed = 0;
    for (prev, record) in records {
        if record.seq != last_seq + 1 || prev != last_hash {
            return Err(AlertStoreError::NoSnapshot { path: NAME.to_string(), first_seq: record.seq });
        }
        apply(&mut state, &record, &legacy)
            .map_err(|reason| inconsistent(std::path::Path::new(NAME), (record.seq, reason)))?;
        state.pace.replayed(&record);
        (last_seq, last_hash) = (record.seq, record.hash.clone());
        replayed += 1;
    }
    // What retention deleted since the snapshot was written is forgotten, as the replica that
    // deleted it did.
    let anchor = log.anchor().await?;
    if anchor > 0 {
        state.forget_before(anchor + 1);
    }
    Ok((state, Loaded { replayed, snapshot: from.map(|c| c.seq) }))
}

impl super::Moving {
    /// The state the database's alert store holds, loaded as a replica loads it (to compare with
    /// the state that was copied there).
    pub async fn in_database(db: &Database, resolved_kept: usize) -> Result<super::Moving, AlertStoreError> {
        let clock: crate::journal::Clock = std::sync::Arc::new(String::new);
        let log = Log::new(db, STORE, clock, crate::journal::DEFAULT_MAX_RECORD_BYTES, None);
        let (state, _) = load(&log, Bounds { resolved_kept }).await?;
        Ok(super::Moving { state })
    }
}
