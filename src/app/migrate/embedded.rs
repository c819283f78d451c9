//! `akritas storage migrate --to embedded`: the database's stores written back as journals in the
//! data directory (a backup to keep, or a return to one replica), each record verbatim, then
//! the snapshot a start loads: the alert state rewritten to find its records by location in the
//! new files, the approvals', bot sessions' and schedules' state as of their last record.
//!
//! Each store is written into `<dir>.migrating` and moved into place once it verifies: the
//! chain read back to the database's head with as many records, then loaded as `serve` loads it.
//! An interrupted run leaves only that staging directory, which the next run writes again; a
//! store already written (its journal ends at the database's head) is verified and left alone,
//! and a journal that is not a copy of the database is refused.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Result, anyhow, bail};

use super::{Moved, Shape, Source, alone, sources};
use crate::alerts::store::Moving;
use crate::config::Settings;
use crate::journal::database::{Database, Log};
use crate::journal::{self, Checkpoint, Line, Location, Verbatim};
use crate::schedules::ScheduleStore;

/// Records read from the database at a time.
const PAGE: i64 = 5_000;

/// Writes every store of `db` as journals into `settings.data_dir` and verifies each; `progress`
/// hears of each store as it is done.
pub async fn to_journals(settings: &Settings, db: &Database, progress: &mut dyn FnMut(&Moved)) -> Result<Vec<Moved>> {
    alone(settings, db).await?;
    let mut moved = Vec::new();
    for source in sources(settings) {
        let store = write_store(settings, db, &source)
            .await
            .map_err(|e| anyhow!("writing the {} store to {}: {e:#}", source.store, source.path.display()))?;
        progress(&store);
        moved.push(store);
    }
    Ok(moved)
}

async fn write_store(settings: &Settings, db: &Database, source: &Source) -> Result<Moved> {
    let started = Instant::now();
    let mut moved = Moved { store: source.store, into: "the journal", ..Moved::default() };
    let clock: journal::Clock = std::sync::Arc::new(String::new);
    let log = Log::new(db, source.store, clock, journal::DEFAULT_MAX_RECORD_BYTES, None);
    let Some(position) = log.position().await? else { return Ok(moved) };
    if journal::exists(&source.path)? {
        let path = source.path.clone();
        let report = tokio::task::spawn_blocking(move || journal::verify(&path)).await??;
        if report.last_seq != position.head_seq || report.last_hash != position.head_hash {
            bail!(
                "a journal is already there, ending at record {} where the database's chain ends at {}; move it aside",
                report.last_seq,
                position.head_seq
            );
        }
        moved.already = report.records;
        fill(&mut moved, &report, "the journal already ends at the database's head".to_string(), started);
        return Ok(moved);
    }
    let (dir, name) = (source.path.parent().unwrap_or(Path::new(".")), source.path.file_name().unwrap_or_default());
    let staging = PathBuf::from(format!("{}.migrating", dir.display()));
    if staging.exists() {
        // Left by an interrupted run: written again.
        std::fs::remove_dir_all(&staging)?;
    }
    let staged = staging.join(name);
    let moving = match source.shape {
        Shape::Alerts => Some(Moving::in_database(db, settings.resolved_incidents_kept as usize).await?),
        _ => None,
    };
    let wanted: HashSet<u64> =
        moving.as_ref().map(|m| m.locations().iter().map(|l| l.segment).collect()).unwrap_or_default();
    let mut writer =
        Verbatim::create(&staged, (position.anchor_seq, &position.anchor_hash), settings.journal_segment_bytes)?;
    let mut located: HashMap<u64, Location> = HashMap::new();
    let mut last: Option<(u64, Location)> = None;
    let mut after = position.anchor_seq;
    loop {
        let page = log.export(after, PAGE).await?;
        let Some(end) = page.last().map(|record| record.seq) else { break };
        for record in &page {
            let line = Line {
                seq: record.seq,
                time: &record.time,
                kind: &record.kind,
                prev: &record.prev,
                data: &record.data,
                hash: &record.hash,
                mac: record.mac.as_deref(),
            };
            let location = writer.push(&line)?;
            if wanted.contains(&record.seq) {
                located.insert(record.seq, location);
            }
            last = Some((record.seq, location));
        }
        moved.copied += page.len() as u64;
        after = end;
    }
    let (last_seq, last_hash) = writer.finish()?;
    if (last_seq, &last_hash) != (position.head_seq, &position.head_hash) {
        bail!("the records end at {last_seq} but the store's head is record {}", position.head_seq);
    }
    let head_location = last.filter(|(seq, _)| *seq == last_seq).map(|(_, location)| location);
    let checked = match (source.shape, moving) {
        (Shape::Alerts, Some(moving)) => {
            let counts = moving.counts();
            let (format, data) =
                moving.snapshot(|location| located.get(&location.segment).copied()).map_err(|e| anyhow!(e))?;
            let checkpoint =
                Checkpoint { seq: last_seq, hash: last_hash.clone(), location: head_location.unwrap_or_default() };
            let state = serde_json::value::RawValue::from_string(data)?;
            journal::snapshot::write(&staged, &format, &checkpoint, &state)?;
            let path = staged.clone();
            let kept = settings.resolved_incidents_kept as usize;
            let loaded = tokio::task::spawn_blocking(move || Moving::load(&path, kept)).await??.counts();
            if loaded != counts {
                bail!("the alert state loaded from the journal ({loaded:?}) is not the database's ({counts:?})");
            }
            format!(
                "the alert state loads from the journal with {} events, {} incidents and {} jobs",
                counts.0, counts.1, counts.2
            )
        }
        (Shape::Durable(_), _) => {
            let locate = |seq: u64| head_location.filter(|_| seq == last_seq);
            let written = match source.store {
                crate::change::approvals::STORE => {
                    let store = crate::change::approvals::ApprovalStore::open_database(db, Default::default()).await?;
                    store.snapshot_to(&staged, locate)?
                }
                crate::schedules::store::STORE => {
                    let store =
                        ScheduleStore::open_database(db, super::schedule_clock(), super::SCHEDULE_SNAPSHOTS).await?;
                    store.snapshot_to(&staged, locate)?
                }
                _ => {
                    let store = crate::bots::sessions::SessionStore::open_database(db, Default::default()).await?;
                    store.snapshot_to(&staged, locate)?
                }
            };
            let path = staged.clone();
            let store = source.store;
            tokio::task::spawn_blocking(move || -> Result<()> {
                match store {
                    crate::change::approvals::STORE => {
                        crate::change::approvals::ApprovalStore::open(&path, Default::default())?;
                    }
                    crate::schedules::store::STORE => {
                        ScheduleStore::open(&path, journal::JournalOptions::default(), super::SCHEDULE_SNAPSHOTS)?;
                    }
                    _ => {
                        crate::bots::sessions::SessionStore::open(&path, Default::default())?;
                    }
                }
                Ok(())
            })
            .await??;
            match written {
                Some(seq) => format!("its state written as the snapshot at record {seq}, and the store opens"),
                None => "the store opens".to_string(),
            }
        }
        _ => {
            let path = staged.clone();
            let report = tokio::task::spawn_blocking(move || crate::audit::verify(&path)).await??;
            format!("the journal replays ({} records)", report.records)
        }
    };
    let path = staged.clone();
    let report = tokio::task::spawn_blocking(move || journal::verify(&path)).await??;
    if report.last_seq != position.head_seq || report.last_hash != position.head_hash || report.records != moved.copied
    {
        bail!("the journal written does not read back as the database's chain");
    }
    place(&staging, dir)?;
    fill(&mut moved, &report, checked, started);
    Ok(moved)
}

/// Moves what was written in `staging` into `dir`.
fn place(staging: &Path, dir: &Path) -> Result<()> {
    if !dir.exists() {
        std::fs::rename(staging, dir)?;
        return Ok(());
    }
    for entry in std::fs::read_dir(staging)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".lock") {
            continue;
        }
        std::fs::rename(entry.path(), dir.join(name))?;
    }
    std::fs::remove_dir_all(staging)?;
    Ok(())
}

fn fill(moved: &mut Moved, report: &journal::VerifyReport, checked: String, started: Instant) {
    moved.records = report.records;
    moved.first_seq = report.first_seq;
    moved.last_seq = report.last_seq;
    moved.last_hash = report.last_hash.clone();
    moved.checked = checked;
    moved.elapsed = started.elapsed();
}
