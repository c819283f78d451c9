//! `akritas storage migrate`. `--to postgres` copies the embedded journals of a data directory
//! (the audit, alerts, change approvals, bot sessions and schedules) into the PostgreSQL database that
//! replicas share, record by record and verbatim (the same seq, time, data, hash and seal), so
//! the chains verify there as they did on disk.
//!
//! - **Resumable.** Records go in batches, each committed with the store's head; a second run
//!   continues after the head, once the head's record is found unchanged in the journal.
//! - **Idempotent.** A store already copied copies nothing and is verified again.
//! - **Verified.** Each store's chain is read back from the database and must end at the
//!   journal's last record with as many records; the audit's Runs are replayed and counted,
//!   the alert state is loaded as a replica loads it and its events, incidents and jobs
//!   counted, and the approvals, bot sessions and schedules are opened as `serve` opens them.
//! - **Alone.** It refuses while a process holds a journal (a running `serve`) or while a
//!   replica heartbeats on the database: neither may write while the copy is made.
//!
//! `--to embedded` ([`to_journals`]) writes the database's stores back as journals.

mod embedded;

pub use embedded::to_journals;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::alerts::store::Moving;
use crate::config::Settings;
use crate::journal::database::{Database, Imported, Log, Replica, located};
use crate::journal::{self, Location, Seen};

/// Records per transaction.
const BATCH_RECORDS: usize = 2_000;
/// Data bytes per transaction.
const BATCH_BYTES: usize = 8 << 20;

/// What a store holds besides its records.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    /// Records read by Run: each is filed under its Run's id.
    Audit,
    /// A state that points at records by location: its snapshot is rewritten for the copy.
    Alerts,
    /// A snapshot copied as it is, of this format.
    Durable(&'static str),
}

/// One store of the data directory.
pub(super) struct Source {
    store: &'static str,
    path: PathBuf,
    shape: Shape,
}

/// The stores of the data directory, in `serve`'s places.
pub(super) fn sources(settings: &Settings) -> Vec<Source> {
    let dir = &settings.data_dir;
    vec![
        Source { store: crate::audit::STORE, path: super::assemble::audit_path(settings), shape: Shape::Audit },
        Source {
            store: crate::alerts::store::STORE,
            path: dir.join("alerts").join("alerts.jsonl"),
            shape: Shape::Alerts,
        },
        Source {
            store: crate::change::approvals::STORE,
            path: dir.join("change").join("approvals.jsonl"),
            shape: Shape::Durable(crate::change::approvals::FORMAT),
        },
        Source {
            store: crate::bots::sessions::STORE,
            path: dir.join("bots").join("sessions.jsonl"),
            shape: Shape::Durable(crate::bots::sessions::FORMAT),
        },
        Source {
            store: crate::schedules::store::STORE,
            path: dir.join("schedules").join("schedules.jsonl"),
            shape: Shape::Durable(crate::schedules::store::FORMAT),
        },
    ]
}

/// What the copy of one store did and found.
#[derive(Clone, Debug, Default)]
pub struct Moved {
    /// The store.
    pub store: &'static str,
    /// Where it went: `the database` or `the journal`.
    pub into: &'static str,
    /// Records written by this run.
    pub copied: u64,
    /// Records the database held already (an earlier, interrupted or finished run).
    pub already: u64,
    /// Records of the chain in the database, verified.
    pub records: u64,
    /// Its first kept record and its last.
    pub first_seq: u64,
    /// The last record.
    pub last_seq: u64,
    /// The last record's hash.
    pub last_hash: String,
    /// What else was checked, in words.
    pub checked: String,
    /// Time taken.
    pub elapsed: Duration,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.records == 0 && self.copied == 0 {
            return write!(f, "{}: nothing to copy", self.store);
        }
        write!(
            f,
            "{}: {} record(s) copied, {} already there, in {:.1} s; {} record(s) from seq {} to {} verified in {}, last hash {}; {}",
            self.store,
            self.copied,
            self.already,
            self.elapsed.as_secs_f64(),
            self.records,
            self.first_seq,
            self.last_seq,
            self.into,
            self.last_hash,
            self.checked
        )
    }
}

/// Copies every store of `settings.data_dir` into `db` and verifies each; `progress` hears of
/// each store as it is done.
pub async fn to_database(settings: &Settings, db: &Database, progress: &mut dyn FnMut(&Moved)) -> Result<Vec<Moved>> {
    alone(settings, db).await?;
    let key = super::assemble::audit_key(settings)?;
    let mut moved = Vec::new();
    for source in sources(settings) {
        let store = copy_store(db, &source, key.as_deref(), settings.resolved_incidents_kept as usize)
            .await
            .with_context(|| format!("copying the {} journal {}", source.store, source.path.display()))?;
        progress(&store);
        moved.push(store);
    }
    Ok(moved)
}

/// Refuses while a replica heartbeats on the database: it could write while the copy is made.
pub(super) async fn alone(settings: &Settings, db: &Database) -> Result<()> {
    let running = Replica::running(db, settings.job_claim_timeout).await.context("reading the database's replicas")?;
    if running.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = running.into_iter().collect();
    names.sort();
    bail!(
        "{} replica(s) are running on this database ({}); stop them (scale the Deployment to 0) before a migration",
        names.len(),
        names.join(", ")
    )
}

/// What reading the journal found besides the records sent.
#[derive(Default)]
struct Read {
    report: journal::VerifyReport,
    /// Where the records the alert state points at are now.
    relocated: HashMap<Location, u64>,
    /// Records without a keyed seal.
    unsealed: u64,
    /// Runs started in the kept records.
    runs: u64,
}

async fn copy_store(db: &Database, source: &Source, key: Option<&[u8]>, resolved_kept: usize) -> Result<Moved> {
    let started = Instant::now();
    let mut moved = Moved { store: source.store, into: "the database", ..Moved::default() };
    if !journal::exists(&source.path)? {
        return Ok(moved);
    }
    // Held until the copy is verified: no `serve` writes the journal meanwhile.
    let _held = journal::hold(&source.path).map_err(|e| match e {
        journal::JournalError::Locked { .. } => anyhow!(
            "another process (a running `akritas serve`) holds the journal; stop it first so the copy is complete"
        ),
        other => other.into(),
    })?;
    let clock: journal::Clock = std::sync::Arc::new(String::new);
    let log = Log::new(db, source.store, clock, journal::DEFAULT_MAX_RECORD_BYTES, None);
    let head = log.position().await?.map_or((0, String::new()), |p| (p.head_seq, p.head_hash));
    let moving = match source.shape {
        Shape::Alerts => {
            let path = source.path.clone();
            Some(tokio::task::spawn_blocking(move || Moving::load(&path, resolved_kept)).await??)
        }
        _ => None,
    };
    let wanted = moving.as_ref().map(Moving::locations).unwrap_or_default();
    let (sender, mut batches) = tokio::sync::mpsc::channel::<Vec<Imported>>(2);
    let (path, shape, head_at, store) = (source.path.clone(), source.shape, head.clone(), source.store);
    let reading = tokio::task::spawn_blocking(move || -> Result<Read> {
        let mut read = Read::default();
        let mut batch = Vec::new();
        let mut bytes = 0;
        let mut visit = |seen: Seen| -> Result<(), String> {
            let Seen { record, prev, data, mac } = seen;
            if wanted.contains(&record.location) {
                read.relocated.insert(record.location, record.seq);
            }
            read.unsealed += u64::from(mac.is_none());
            read.runs += u64::from(matches!(shape, Shape::Audit) && record.kind == "run_started");
            if record.seq < head_at.0 {
                return Ok(());
            }
            if record.seq == head_at.0 {
                return match record.hash == head_at.1 {
                    true => Ok(()),
                    false => Err(format!(
                        "the database's {store} store ends at record {} with another hash than the journal's: \
                         it holds another chain; copy into an empty database",
                        record.seq
                    )),
                };
            }
            let key = match shape {
                Shape::Audit if !journal::is_internal(&record.kind) => crate::audit::run_of(&record)
                    .map_err(|e| format!("audit record {} cannot be filed under its Run: {e}", record.seq))?
                    .map(|id| id.to_string()),
                _ => None,
            };
            bytes += data.get().len();
            batch.push(Imported {
                seq: record.seq,
                time: record.time,
                kind: record.kind,
                data: data.get().to_string(),
                prev,
                hash: record.hash,
                mac,
                key,
            });
            if batch.len() >= BATCH_RECORDS || bytes >= BATCH_BYTES {
                bytes = 0;
                sender.blocking_send(std::mem::take(&mut batch)).map_err(|_| "the copy stopped".to_string())?;
            }
            Ok(())
        };
        let (report, _) = journal::copy_out(&path, &mut visit).map_err(|e| anyhow!("{e}"))?;
        if !batch.is_empty() {
            sender.blocking_send(batch).map_err(|_| anyhow!("the copy stopped"))?;
        }
        read.report = report;
        Ok(read)
    });
    let mut copied = 0;
    let mut failed = None;
    while let Some(batch) = batches.recv().await {
        if let Err(error) = log.import(&batch).await {
            failed = Some(error);
            break;
        }
        copied += batch.len() as u64;
    }
    drop(batches);
    let read = reading.await?;
    if let Some(error) = failed {
        return Err(error.into());
    }
    let read = read?;
    let report = &read.report;
    if head.0 > report.last_seq {
        bail!(
            "the database's {} store holds records up to {} but the journal ends at {}: it holds another chain; \
             copy into an empty database",
            source.store,
            head.0,
            report.last_seq
        );
    }
    moved.copied = copied;
    moved.already = report.records.saturating_sub(copied);
    let mut checked = Vec::new();
    // The state a replica starts from, written once the records are in.
    match source.shape {
        Shape::Alerts if report.records > 0 => {
            let moving = moving.expect("loaded for the alerts");
            let counts = moving.counts();
            let relocated = &read.relocated;
            let (format, data) = moving
                .snapshot(|location| relocated.get(&location).map(|seq| located(*seq)))
                .map_err(|e| anyhow!(e))?;
            log.import_snapshot(report.last_seq, &report.last_hash, &format, &data).await?;
            let there = Moving::in_database(db, resolved_kept).await?.counts();
            if there != counts {
                bail!(
                    "the alert state loaded from the database ({} events, {} incidents, {} jobs) is not the journal's \
                     ({} events, {} incidents, {} jobs)",
                    there.0,
                    there.1,
                    there.2,
                    counts.0,
                    counts.1,
                    counts.2
                );
            }
            checked.push(format!(
                "the alert state loads from the database with the journal's {} events, {} incidents and {} jobs",
                counts.0, counts.1, counts.2
            ));
        }
        Shape::Durable(format) => {
            if let Some((checkpoint, state)) =
                journal::snapshot::read::<Box<serde_json::value::RawValue>>(&source.path, format)
            {
                log.import_snapshot(checkpoint.seq, &checkpoint.hash, format, state.get()).await?;
                checked.push(format!("its snapshot at record {} copied", checkpoint.seq));
            }
        }
        _ => {}
    }
    let sealed = key.filter(|_| read.unsealed == 0 && report.records > 0);
    let verified = log.verify(sealed).await?;
    if verified.records != report.records
        || verified.last_seq != report.last_seq
        || verified.last_hash != report.last_hash
    {
        bail!(
            "the database's chain ({} records, last {} {}) is not the journal's ({} records, last {} {})",
            verified.records,
            verified.last_seq,
            verified.last_hash,
            report.records,
            report.last_seq,
            report.last_hash
        );
    }
    if sealed.is_some() {
        checked.push(format!("{} seal(s) checked with the audit key", verified.sealed));
    }
    match source.shape {
        Shape::Audit => {
            let audit = crate::audit::verify_database(db, sealed).await?;
            if audit.runs != read.runs {
                bail!(
                    "{} Run(s) replay from the database but the journal keeps {} Run start(s)",
                    audit.runs,
                    read.runs
                );
            }
            checked.push(format!("{} Run(s) replayed, as many as the journal starts", audit.runs));
        }
        Shape::Durable(_) => opens(db, source.store).await?,
        Shape::Alerts => {}
    }
    if checked.is_empty() {
        checked.push("nothing else to check".to_string());
    }
    moved.records = verified.records;
    moved.first_seq = verified.first_seq;
    moved.last_seq = verified.last_seq;
    moved.last_hash = verified.last_hash;
    moved.checked = checked.join("; ");
    moved.elapsed = started.elapsed();
    Ok(moved)
}

/// Opens the copied store as `serve` opens it: its snapshot and records replay.
pub(super) async fn opens(db: &Database, store: &str) -> Result<()> {
    match store {
        crate::change::approvals::STORE => {
            crate::change::approvals::ApprovalStore::open_database(db, Default::default()).await?;
        }
        crate::schedules::store::STORE => {
            crate::schedules::ScheduleStore::open_database(db, schedule_clock(), SCHEDULE_SNAPSHOTS).await?;
        }
        _ => {
            crate::bots::sessions::SessionStore::open_database(db, Default::default()).await?;
        }
    }
    Ok(())
}

/// Records between two snapshots of a schedule journal opened here (`serve` takes
/// `snapshot_records`; the state is the same either way).
pub(super) const SCHEDULE_SNAPSHOTS: u64 = 20_000;

/// The clock stamping records of a schedule store opened here.
pub(super) fn schedule_clock() -> crate::journal::Clock {
    std::sync::Arc::new(|| jiff::Timestamp::now().to_string())
}
