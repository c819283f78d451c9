//! Derived-state store: one snapshot file (serde_json, tmp + fsync + rename) against redb.
//!
//! Size: one self-contained file on purpose (the bench must not share code with the product it informs); the
//! model, the two approaches and the driver read best together.
//!
//! Self-contained (serde_json + redb + std + tempfile; no akritas code). It models the state Akritas keeps
//! across restarts — incidents (~600-byte JSON each), the event index, the dedup window, the Run index and the
//! journal checkpoint they reflect — and prints what each approach costs to write, to load or reopen, on disk,
//! in memory and per alert delivery. Prints numbers only; no assertions on timings.
//!
//! Run with `cargo bench --locked --bench state_store`. Sizes come from the environment (defaults in brackets):
//! STORE_BENCH_INCIDENTS [50000], STORE_BENCH_EVENTS [100000], STORE_BENCH_DEDUP [100000],
//! STORE_BENCH_RUNS [100000], STORE_BENCH_DELIVERIES [20000] per redb mode, STORE_BENCH_BATCH [1000] deliveries
//! per Immediate commit in batched mode, STORE_BENCH_SNAPSHOT_EVERY [100000] deliveries per snapshot,
//! STORE_BENCH_LOOKUPS [1000] point lookups per table, STORE_BENCH_REDB_CACHE_MIB [redb's default, 1024].
//!
//! Each load and reopen runs in a fresh child process of this binary (`STORE_BENCH_PHASE`), so its VmRSS and
//! VmHWM (read from /proc/self/status) start from a process that holds nothing but the binary.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::{Deserialize, Serialize};

const PHASE_ENV: &str = "STORE_BENCH_PHASE";
const DIR_ENV: &str = "STORE_BENCH_DIR";
const SNAPSHOT_FILE: &str = "state.json";
const REDB_FILE: &str = "state.redb";
/// redb cache for the second reopen-and-iterate child, to show how far the cache bounds RSS.
const SMALL_CACHE_MIB: usize = 16;
/// First-seen/updated times start here (2026-11-30T00:00:00Z) and move one second per record.
const EPOCH: i64 = 1_795_996_800;

const INCIDENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("incidents");
/// Event id -> (segment, offset, len, incident id).
const EVENTS: TableDefinition<&str, (u64, u64, u32, &str)> = TableDefinition::new("events");
/// `ns/name\0<hash>` -> (event id, incident id, first seen unix s).
const DEDUP: TableDefinition<&str, (&str, &str, u64)> = TableDefinition::new("dedup");
const RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("runs");
/// "checkpoint" -> (seq, hash, segment, offset) of the journal record the store reflects.
const META: TableDefinition<&str, (u64, &str, u64, u64)> = TableDefinition::new("meta");

struct Sizes {
    incidents: u64,
    events: u64,
    dedup: u64,
    runs: u64,
    deliveries: u64,
    batch: u64,
    snapshot_every: u64,
    lookups: u64,
    cache_mib: Option<usize>,
}

impl Sizes {
    fn from_env() -> Self {
        let get = |name: &str, default: u64| {
            std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|&v: &u64| v > 0).unwrap_or(default)
        };
        Sizes {
            incidents: get("STORE_BENCH_INCIDENTS", 50_000),
            events: get("STORE_BENCH_EVENTS", 100_000),
            dedup: get("STORE_BENCH_DEDUP", 100_000),
            runs: get("STORE_BENCH_RUNS", 100_000),
            deliveries: get("STORE_BENCH_DELIVERIES", 20_000),
            batch: get("STORE_BENCH_BATCH", 1_000),
            snapshot_every: get("STORE_BENCH_SNAPSHOT_EVERY", 100_000),
            lookups: get("STORE_BENCH_LOOKUPS", 1_000),
            cache_mib: std::env::var("STORE_BENCH_REDB_CACHE_MIB").ok().and_then(|v| v.parse().ok()),
        }
    }
}

#[derive(Serialize, Deserialize, Clone)]
struct Entity {
    kind: String,
    id: String,
}

#[derive(Serialize, Deserialize, Clone)]
struct Incident {
    id: String,
    correlation_key: String,
    source: String,
    state: String,
    name: String,
    severity: String,
    entity: Entity,
    opened_at: String,
    updated_at: String,
    firing_members: BTreeSet<String>,
    last_job: String,
}

/// (segment, offset, len, incident id)
type EventLoc = (u64, u64, u32, String);
/// (event id, incident id, first seen unix s)
type DedupEntry = (String, String, u64);

#[derive(Serialize, Deserialize, Clone)]
struct RunEntry {
    namespace: String,
    status: String,
    started_at: u64,
    event_count: u32,
    locations: Vec<(u64, u64, u32)>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Checkpoint {
    seq: u64,
    hash: String,
    segment: u64,
    offset: u64,
}

#[derive(Serialize, Deserialize, Clone)]
struct State {
    checkpoint: Checkpoint,
    incidents: HashMap<String, Incident>,
    events: HashMap<String, EventLoc>,
    dedup: HashMap<String, DedupEntry>,
    runs: HashMap<String, RunEntry>,
}

// ---- deterministic data: every key is a pure function of (table, index), so any phase can rebuild it ----

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn hex(tag: u64, i: u64, nibbles: usize) -> String {
    let mut out = String::with_capacity(nibbles + 16);
    let mut word = 0;
    while out.len() < nibbles {
        out.push_str(&format!("{:016x}", mix(tag << 48 ^ i << 8 ^ word)));
        word += 1;
    }
    out.truncate(nibbles);
    out
}

fn pick<'a>(options: &[&'a str], tag: u64, i: u64) -> &'a str {
    options[(mix(tag << 48 ^ i) % options.len() as u64) as usize]
}

fn rfc3339(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map(|t| t.to_string()).unwrap_or_default()
}

fn incident_id(i: u64) -> String {
    format!("inc_{}", hex(1, i, 32))
}

fn event_id(i: u64) -> String {
    format!("evt_{}", hex(2, i, 32))
}

fn run_id(i: u64) -> String {
    hex(4, i, 32)
}

fn namespace(tag: u64, i: u64) -> String {
    format!("{}-{}", pick(&["payments", "checkout", "search", "platform", "observability"], tag, i), i % 40)
}

fn dedup_key(i: u64) -> String {
    format!("{}/alertmanager-main\0{}", namespace(5, i), hex(3, i, 64))
}

fn incident(i: u64) -> Incident {
    let ns = namespace(6, i);
    let members = 1 + mix(7 << 48 ^ i) % 3;
    let names = ["KubePodCrashLooping", "KubeDeploymentReplicasMismatch", "NodeFilesystemSpaceFillingUp"];
    let kinds = ["Pod", "Deployment", "StatefulSet", "Node"];
    Incident {
        id: incident_id(i),
        correlation_key: hex(8, i, 64),
        source: format!("{ns}/alertmanager-main"),
        state: pick(&["open", "investigating", "resolved"], 9, i).to_string(),
        name: pick(&names, 10, i).to_string(),
        severity: pick(&["critical", "warning", "info"], 11, i).to_string(),
        entity: Entity {
            kind: pick(&kinds, 12, i).to_string(),
            id: format!("{ns}/checkout-api-{}-{}", hex(13, i, 10), hex(14, i, 5)),
        },
        opened_at: rfc3339(EPOCH + i as i64),
        updated_at: rfc3339(EPOCH + i as i64 + 60),
        firing_members: (0..members).map(|m| hex(15, i * 4 + m, 64)).collect(),
        last_job: format!("job_{}", hex(16, i, 32)),
    }
}

fn event_loc(s: &Sizes, i: u64) -> EventLoc {
    (i / 10_000, (i % 10_000) * 2_048, 600 + (i % 900) as u32, incident_id(i % s.incidents))
}

fn dedup_entry(s: &Sizes, i: u64) -> DedupEntry {
    (event_id(i % s.events), incident_id(i % s.incidents), EPOCH as u64 + i)
}

fn run_entry(i: u64) -> RunEntry {
    RunEntry {
        namespace: namespace(17, i),
        status: pick(&["succeeded", "failed", "running"], 18, i).to_string(),
        started_at: EPOCH as u64 + i,
        event_count: 20 + (i % 200) as u32,
        locations: (0..8).map(|k| (i / 1_000, (i % 1_000) * 65_536 + k * 4_096, 1_024 + k as u32 * 300)).collect(),
    }
}

fn checkpoint(seq: u64) -> Checkpoint {
    Checkpoint { seq, hash: hex(19, seq, 64), segment: seq / 100_000, offset: (seq % 100_000) * 700 }
}

fn generate(s: &Sizes) -> State {
    State {
        checkpoint: checkpoint(s.events),
        incidents: (0..s.incidents).map(|i| (incident_id(i), incident(i))).collect(),
        events: (0..s.events).map(|i| (event_id(i), event_loc(s, i))).collect(),
        dedup: (0..s.dedup).map(|i| (dedup_key(i), dedup_entry(s, i))).collect(),
        runs: (0..s.runs).map(|i| (run_id(i), run_entry(i))).collect(),
    }
}

/// What one alert delivery `d` changes: its incident's members and time, a new event, a new dedup key.
struct Delivery {
    incident: String,
    event: String,
    loc: EventLoc,
    dedup_key: String,
    dedup: DedupEntry,
    checkpoint: Checkpoint,
}

fn delivery(s: &Sizes, d: u64) -> Delivery {
    let incident = incident_id(mix(20 << 48 ^ d) % s.incidents);
    let event = event_id(s.events + d);
    let seq = s.events + d + 1;
    Delivery {
        loc: (seq / 10_000, (seq % 10_000) * 2_048, 700, incident.clone()),
        dedup_key: dedup_key(s.dedup + d),
        dedup: (event.clone(), incident.clone(), EPOCH as u64 + s.dedup + d),
        checkpoint: checkpoint(seq),
        incident,
        event,
    }
}

fn touch(incident: &mut Incident, d: u64) {
    if incident.firing_members.len() >= 3 {
        incident.firing_members.pop_first();
    }
    incident.firing_members.insert(hex(21, d, 64));
    incident.updated_at = rfc3339(EPOCH + 100_000 + d as i64);
}

// ---- measurement helpers ----

/// (VmRSS, VmHWM) of this process in KiB.
fn memory_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    (field("VmRSS:").unwrap_or(0), field("VmHWM:").unwrap_or(0))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn file_mib(path: &Path) -> f64 {
    std::fs::metadata(path).map(|m| m.len() as f64 / (1024.0 * 1024.0)).unwrap_or(0.0)
}

/// MiB of blocks actually allocated on disk: redb's file is sparse, so its length overstates its use.
fn disk_mib(path: &Path) -> f64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map(|m| (m.blocks() * 512) as f64 / (1024.0 * 1024.0)).unwrap_or(0.0)
}

fn file_sizes(path: &Path) -> String {
    format!("file {:.1} MiB ({:.1} MiB allocated on disk)", file_mib(path), disk_mib(path))
}

/// redb's own account of the file: pages allocated, bytes of keys and values stored, free and fragmented bytes.
fn redb_stats(db: &Database) -> Result<String, redb::Error> {
    let txn = db.begin_write()?;
    let st = txn.stats()?;
    txn.abort()?;
    let m = |b: u64| b as f64 / 1048576.0;
    Ok(format!(
        "allocated {:.1} MiB, stored {:.1} MiB, metadata {:.1} MiB, free+fragmented {:.1} MiB, tree height {}",
        m(st.allocated_pages() * st.page_size() as u64),
        m(st.stored_bytes()),
        m(st.metadata_bytes()),
        m(st.fragmented_bytes()),
        st.tree_height()
    ))
}

/// What one small append + fdatasync costs on this disk right now: the journal already pays it per delivery.
fn fsync_baseline(dir: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let path = dir.join("fsync-baseline.log");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    let mut lat = Vec::with_capacity(1_000);
    for _ in 0..1_000 {
        let t = Instant::now();
        file.write_all(&[b'x'; 700])?;
        file.sync_data()?;
        lat.push(t.elapsed());
    }
    let mean = lat.iter().sum::<Duration>() / lat.len() as u32;
    let p50 = percentile(&mut lat, 0.5);
    println!(
        "baseline append 700 B + fdatasync (1000 times): mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms",
        secs(mean) * 1e3,
        secs(p50) * 1e3,
        secs(percentile(&mut lat, 0.99)) * 1e3
    );
    result("fsync_mean_ms", format!("{:.3}", secs(mean) * 1e3));
    std::fs::remove_file(path)
}

/// A line the parent keeps for the summary table.
fn result(key: &str, value: impl std::fmt::Display) {
    println!("RESULT {key} {value}");
}

fn percentile(lat: &mut [Duration], q: f64) -> Duration {
    lat.sort();
    lat.get(((lat.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

fn open_db(s: &Sizes, path: &Path, create: bool) -> Result<Database, redb::Error> {
    let mut builder = Database::builder();
    if let Some(cache) = s.cache_mib {
        builder.set_cache_size(cache * 1024 * 1024);
    }
    Ok(if create { builder.create(path)? } else { builder.open(path)? })
}

// ---- phases ----

/// Builds the state in memory, writes it as one snapshot (tmp + fsync + rename + dir fsync) and measures the
/// in-memory cost of a delivery, which is all the snapshot approach pays between snapshots.
fn snapshot_write(dir: &Path, s: &Sizes) {
    let started = Instant::now();
    let mut state = generate(s);
    println!("generated state in {:.2}s", secs(started.elapsed()));
    let (rss, hwm) = memory_kib();
    println!("state in memory: VmRSS {:.1} MiB, VmHWM {:.1} MiB", mib(rss), mib(hwm));
    result("snapshot_state_rss_mib", format!("{:.1}", mib(rss)));

    let started = Instant::now();
    let copy = state.clone();
    let cloned = started.elapsed();
    drop(copy);
    println!("clone of the whole state (a consistent copy for a background writer): {:.3}s", secs(cloned));
    result("snapshot_clone_s", format!("{:.3}", secs(cloned)));

    let path = dir.join(SNAPSHOT_FILE);
    let tmp = dir.join(format!("{SNAPSHOT_FILE}.tmp"));
    let started = Instant::now();
    let file = File::create(&tmp).expect("create snapshot tmp");
    let mut out = BufWriter::with_capacity(1 << 20, file);
    serde_json::to_writer(&mut out, &state).expect("serialize snapshot");
    let file = out.into_inner().expect("flush snapshot");
    let serialized = started.elapsed();
    file.sync_all().expect("fsync snapshot");
    drop(file);
    std::fs::rename(&tmp, &path).expect("rename snapshot");
    File::open(dir).and_then(|d| d.sync_all()).expect("fsync dir");
    let total = started.elapsed();
    println!(
        "snapshot write: {:.3}s (serialize+write {:.3}s, fsync+rename+dir fsync {:.3}s), {:.1} MiB",
        secs(total),
        secs(serialized),
        secs(total - serialized),
        file_mib(&path)
    );
    result("snapshot_write_s", format!("{:.3}", secs(total)));
    result("snapshot_size_mib", format!("{:.1}", file_mib(&path)));
    let incident_bytes: usize = state.incidents.values().map(|i| serde_json::to_vec(i).map_or(0, |v| v.len())).sum();
    println!("average incident JSON: {} bytes", incident_bytes / state.incidents.len().max(1));

    let started = Instant::now();
    for d in 0..s.deliveries {
        let del = delivery(s, d);
        if let Some(inc) = state.incidents.get_mut(&del.incident) {
            touch(inc, d);
        }
        state.events.insert(del.event, del.loc);
        state.dedup.insert(del.dedup_key, del.dedup);
        state.checkpoint = del.checkpoint;
    }
    let per = started.elapsed() / s.deliveries as u32;
    let amortised = total / s.snapshot_every as u32;
    println!(
        "in-memory delivery updates: {:.2} µs/delivery ({} deliveries); one snapshot per {} deliveries adds {:.2} µs/delivery",
        per.as_secs_f64() * 1e6,
        s.deliveries,
        s.snapshot_every,
        amortised.as_secs_f64() * 1e6
    );
    result("snapshot_delivery_us", format!("{:.2}", per.as_secs_f64() * 1e6));
    result("snapshot_amortised_us", format!("{:.2}", amortised.as_secs_f64() * 1e6));
}

/// Loads the snapshot into the in-memory maps: `slice` reads the whole file then parses, `reader` streams it.
fn snapshot_load(dir: &Path, mode: &str) {
    let (rss0, _) = memory_kib();
    let started = Instant::now();
    let path = dir.join(SNAPSHOT_FILE);
    let state: State = if mode == "slice" {
        let bytes = std::fs::read(&path).expect("read snapshot");
        serde_json::from_slice(&bytes).expect("parse snapshot")
    } else {
        let file = File::open(&path).expect("open snapshot");
        serde_json::from_reader(BufReader::with_capacity(1 << 20, file)).expect("parse snapshot")
    };
    let took = started.elapsed();
    let (rss, hwm) = memory_kib();
    println!(
        "snapshot load ({mode}): {:.3}s, {} incidents/{} events/{} dedup/{} runs at seq {}; \
         VmRSS {:.1} -> {:.1} MiB, VmHWM {:.1} MiB (peak growth {:.1} MiB)",
        secs(took),
        state.incidents.len(),
        state.events.len(),
        state.dedup.len(),
        state.runs.len(),
        state.checkpoint.seq,
        mib(rss0),
        mib(rss),
        mib(hwm),
        mib(hwm.saturating_sub(rss0))
    );
    result(&format!("load_{mode}_s"), format!("{:.3}", secs(took)));
    result(&format!("load_{mode}_rss_mib"), format!("{:.1}", mib(rss)));
    result(&format!("load_{mode}_peak_growth_mib"), format!("{:.1}", mib(hwm.saturating_sub(rss0))));
}

fn redb_bulk_load(db: &Database, state: &State) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut incidents = txn.open_table(INCIDENTS)?;
        for (id, inc) in &state.incidents {
            incidents.insert(id.as_str(), serde_json::to_vec(inc).expect("incident json").as_slice())?;
        }
        let mut events = txn.open_table(EVENTS)?;
        for (id, (seg, off, len, inc)) in &state.events {
            events.insert(id.as_str(), (*seg, *off, *len, inc.as_str()))?;
        }
        let mut dedup = txn.open_table(DEDUP)?;
        for (key, (evt, inc, first)) in &state.dedup {
            dedup.insert(key.as_str(), (evt.as_str(), inc.as_str(), *first))?;
        }
        let mut runs = txn.open_table(RUNS)?;
        for (id, run) in &state.runs {
            runs.insert(id.as_str(), serde_json::to_vec(run).expect("run json").as_slice())?;
        }
        let c = &state.checkpoint;
        txn.open_table(META)?.insert("checkpoint", (c.seq, c.hash.as_str(), c.segment, c.offset))?;
    }
    txn.commit()?;
    Ok(())
}

/// One delivery as one write transaction: read-modify-write the incident, insert event and dedup entries, move
/// the checkpoint.
fn redb_delivery(db: &Database, s: &Sizes, d: u64, durability: Durability, quick: bool) -> Result<(), redb::Error> {
    let del = delivery(s, d);
    let mut txn = db.begin_write()?;
    txn.set_durability(durability)?;
    txn.set_quick_repair(quick);
    {
        let mut incidents = txn.open_table(INCIDENTS)?;
        let current = incidents.get(del.incident.as_str())?.map(|g| serde_json::from_slice::<Incident>(g.value()));
        let mut inc = current.expect("incident exists").expect("incident json");
        touch(&mut inc, d);
        incidents.insert(del.incident.as_str(), serde_json::to_vec(&inc).expect("incident json").as_slice())?;
        let (seg, off, len, inc_id) = &del.loc;
        txn.open_table(EVENTS)?.insert(del.event.as_str(), (*seg, *off, *len, inc_id.as_str()))?;
        let (evt, inc_id, first) = &del.dedup;
        txn.open_table(DEDUP)?.insert(del.dedup_key.as_str(), (evt.as_str(), inc_id.as_str(), *first))?;
        let c = &del.checkpoint;
        txn.open_table(META)?.insert("checkpoint", (c.seq, c.hash.as_str(), c.segment, c.offset))?;
    }
    txn.commit()?;
    Ok(())
}

fn redb_write(dir: &Path, s: &Sizes) -> Result<(), redb::Error> {
    fsync_baseline(dir)?;
    let state = generate(s);
    let (rss0, _) = memory_kib();
    let path = dir.join(REDB_FILE);
    let db = open_db(s, &path, true)?;
    let started = Instant::now();
    redb_bulk_load(&db, &state)?;
    let bulk = started.elapsed();
    drop(state);
    let (_, hwm) = memory_kib();
    println!(
        "redb bulk load (one Immediate transaction): {:.3}s, {}; VmHWM {:.1} MiB with the generated state \
         ({:.1} MiB) in memory",
        secs(bulk),
        file_sizes(&path),
        mib(hwm),
        mib(rss0)
    );
    println!("  redb stats: {}", redb_stats(&db)?);
    result("redb_bulk_s", format!("{:.3}", secs(bulk)));
    result("redb_bulk_size_mib", format!("{:.1}", file_mib(&path)));

    let modes = [("immediate", 0), ("batched", s.deliveries)];
    for (mode, first) in modes {
        let mut lat = Vec::with_capacity(s.deliveries as usize);
        let started = Instant::now();
        for d in first..first + s.deliveries {
            let batched = mode == "batched" && (d - first + 1) % s.batch != 0;
            let durability = if batched { Durability::None } else { Durability::Immediate };
            let t = Instant::now();
            redb_delivery(&db, s, d, durability, false)?;
            lat.push(t.elapsed());
        }
        let took = started.elapsed();
        let rate = s.deliveries as f64 / secs(took);
        let (p50, p99, max) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99), percentile(&mut lat, 1.0));
        println!(
            "redb deliveries ({mode}{}): {} in {:.2}s = {rate:.0}/s, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms, \
             {}",
            if mode == "batched" { format!(", Durability::None + Immediate every {}", s.batch) } else { String::new() },
            s.deliveries,
            secs(took),
            secs(p50) * 1e3,
            secs(p99) * 1e3,
            secs(max) * 1e3,
            file_sizes(&path)
        );
        println!("  redb stats: {}", redb_stats(&db)?);
        result(&format!("redb_{mode}_per_s"), format!("{rate:.0}"));
        result(&format!("redb_{mode}_us"), format!("{:.1}", 1e6 / rate));
    }
    drop(db);
    println!("redb closed: {}", file_sizes(&path));
    result("redb_size_mib", format!("{:.1}", file_mib(&path)));
    result("redb_disk_mib", format!("{:.1}", disk_mib(&path)));

    let copy = dir.join("compacted.redb");
    std::fs::copy(&path, &copy)?;
    let mut db = open_db(s, &copy, false)?;
    let started = Instant::now();
    let compacted = db.compact()?;
    let took = started.elapsed();
    println!("redb compact (on a copy): {:.3}s, compacted {compacted}, {}", secs(took), file_sizes(&copy));
    println!("  redb stats: {}", redb_stats(&db)?);
    drop(db);
    println!("redb compacted copy closed: {}", file_sizes(&copy));
    result("redb_compacted_disk_mib", format!("{:.1}", disk_mib(&copy)));
    std::fs::remove_file(&copy)?;
    Ok(())
}

/// Deliveries after which the crash phases end the process without closing the database.
const CRASH_DELIVERIES: u64 = 1_000;

/// Runs CRASH_DELIVERIES Immediate deliveries (with redb's quick-repair or without) and exits without closing the
/// database, as a SIGKILL would leave it; `redb_open_after_crash` then times the repair that `open` does.
fn redb_crash(dir: &Path, s: &Sizes, quick: bool) -> Result<(), redb::Error> {
    let db = open_db(s, &dir.join(REDB_FILE), false)?;
    let first = 2 * s.deliveries + if quick { CRASH_DELIVERIES } else { 0 };
    let started = Instant::now();
    for d in first..first + CRASH_DELIVERIES {
        redb_delivery(&db, s, d, Durability::Immediate, quick)?;
    }
    let per = started.elapsed() / CRASH_DELIVERIES as u32;
    let label = if quick { "quick_repair" } else { "full_repair" };
    println!(
        "redb {CRASH_DELIVERIES} Immediate deliveries with quick-repair {quick}: {:.1} µs/delivery, then exit \
         without closing",
        per.as_secs_f64() * 1e6
    );
    result(&format!("crash_{label}_us"), format!("{:.1}", per.as_secs_f64() * 1e6));
    std::mem::forget(db);
    std::process::exit(0);
}

fn redb_open_after_crash(dir: &Path, s: &Sizes, label: &str) -> Result<(), redb::Error> {
    let (rss0, _) = memory_kib();
    let started = Instant::now();
    let db = open_db(s, &dir.join(REDB_FILE), false)?;
    let txn = db.begin_read()?;
    let seq = txn.open_table(META)?.get("checkpoint")?.map(|g| g.value().0).unwrap_or(0);
    let took = started.elapsed();
    let (rss, hwm) = memory_kib();
    println!(
        "redb open after a crash ({label}): {:.3}s to checkpoint seq {seq}; VmRSS {:.1} -> {:.1} MiB, VmHWM {:.1} MiB",
        secs(took),
        mib(rss0),
        mib(rss),
        mib(hwm)
    );
    result(&format!("crash_open_{label}_s"), format!("{:.3}", secs(took)));
    Ok(())
}

/// Reopens the store after a restart: `iterate` reads the checkpoint then parses every incident; `point` reads
/// the checkpoint then does point lookups in each table.
fn redb_reopen(dir: &Path, s: &Sizes, mode: &str) -> Result<(), redb::Error> {
    let (rss0, _) = memory_kib();
    let started = Instant::now();
    let db = open_db(s, &dir.join(REDB_FILE), false)?;
    let opened = started.elapsed();
    let txn = db.begin_read()?;
    let seq = txn.open_table(META)?.get("checkpoint")?.map(|g| g.value().0).unwrap_or(0);
    let mut lookup_lat = Vec::new();
    let count = if mode.starts_with("iterate") {
        let mut count = 0u64;
        for entry in txn.open_table(INCIDENTS)?.iter()? {
            let (_, value) = entry?;
            let inc: Incident = serde_json::from_slice(value.value()).expect("incident json");
            count += inc.firing_members.len().min(1) as u64;
        }
        count
    } else {
        let (incidents, events) = (txn.open_table(INCIDENTS)?, txn.open_table(EVENTS)?);
        let (dedup, runs) = (txn.open_table(DEDUP)?, txn.open_table(RUNS)?);
        let mut found = 0u64;
        for k in 0..s.lookups {
            let r = mix(22 << 48 ^ k);
            let t = Instant::now();
            found += incidents.get(incident_id(r % s.incidents).as_str())?.is_some() as u64;
            found += events.get(event_id(r % s.events).as_str())?.is_some() as u64;
            found += dedup.get(dedup_key(r % s.dedup).as_str())?.is_some() as u64;
            found += runs.get(run_id(r % s.runs).as_str())?.is_some() as u64;
            lookup_lat.push(t.elapsed());
        }
        println!("tables: {} incidents, {} events, {} dedup", incidents.len()?, events.len()?, dedup.len()?);
        found
    };
    let took = started.elapsed();
    let (rss, hwm) = memory_kib();
    let detail = if mode.starts_with("iterate") {
        format!("{count} incidents parsed")
    } else {
        let p50 = percentile(&mut lookup_lat, 0.5).as_secs_f64() * 1e6;
        let p99 = percentile(&mut lookup_lat, 0.99).as_secs_f64() * 1e6;
        format!("{count} of {} keys found, 4 lookups p50 {p50:.1} µs, p99 {p99:.1} µs", s.lookups * 4)
    };
    println!(
        "redb reopen ({mode}): open {:.3}s, total {:.3}s, checkpoint seq {seq}, {detail}; \
         VmRSS {:.1} -> {:.1} MiB, VmHWM {:.1} MiB",
        secs(opened),
        secs(took),
        mib(rss0),
        mib(rss),
        mib(hwm)
    );
    result(&format!("reopen_{mode}_s"), format!("{:.3}", secs(took)));
    result(&format!("reopen_{mode}_rss_mib"), format!("{:.1}", mib(rss)));
    Ok(())
}

// ---- driver ----

fn run_phase(exe: &Path, dir: &Path, phase: &str, results: &mut HashMap<String, String>) {
    let out = Command::new(exe).env(PHASE_ENV, phase).env(DIR_ENV, dir).output().expect("run phase");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        match line.strip_prefix("RESULT ").and_then(|r| r.split_once(' ')) {
            Some((key, value)) => {
                results.insert(key.to_string(), value.to_string());
            }
            None => println!("  {line}"),
        }
    }
    if !out.status.success() {
        eprintln!("{}", String::from_utf8_lossy(&out.stderr));
        panic!("phase {phase} failed: {}", out.status);
    }
}

fn print_table(s: &Sizes, r: &HashMap<String, String>) {
    let g = |k: &str| r.get(k).cloned().unwrap_or_else(|| "?".into());
    let rows = [
        [
            "snapshot file, serde_json, load = read all + from_slice".to_string(),
            format!("{} s per snapshot", g("snapshot_write_s")),
            format!("{} s", g("load_slice_s")),
            format!("{} MiB", g("snapshot_size_mib")),
            format!("{} MiB (peak +{} MiB)", g("load_slice_rss_mib"), g("load_slice_peak_growth_mib")),
            format!(
                "{} µs in memory + {} µs snapshot share (1 per {})",
                g("snapshot_delivery_us"),
                g("snapshot_amortised_us"),
                s.snapshot_every
            ),
        ],
        [
            "snapshot file, serde_json, load = BufReader stream".to_string(),
            "same file".to_string(),
            format!("{} s", g("load_reader_s")),
            format!("{} MiB", g("snapshot_size_mib")),
            format!("{} MiB (peak +{} MiB)", g("load_reader_rss_mib"), g("load_reader_peak_growth_mib")),
            "as above".to_string(),
        ],
        [
            "redb, 1 txn/delivery, Durability::Immediate".to_string(),
            format!("{} s bulk load", g("redb_bulk_s")),
            format!("{} s open + iterate incidents", g("reopen_iterate_s")),
            format!(
                "{} MiB on disk ({} MiB long; {} MiB on disk after compact)",
                g("redb_disk_mib"),
                g("redb_size_mib"),
                g("redb_compacted_disk_mib")
            ),
            format!(
                "{} MiB after open + iterate ({} MiB with a {SMALL_CACHE_MIB} MiB cache)",
                g("reopen_iterate_rss_mib"),
                g("reopen_iterate_small_cache_rss_mib")
            ),
            format!("{} µs ({} deliveries/s)", g("redb_immediate_us"), g("redb_immediate_per_s")),
        ],
        [
            format!("redb, 1 txn/delivery, Durability::None + Immediate/{}", s.batch),
            "same".to_string(),
            format!("{} s open + checkpoint + lookups", g("reopen_point_s")),
            "same".to_string(),
            format!("{} MiB after open + lookups", g("reopen_point_rss_mib")),
            format!("{} µs ({} deliveries/s)", g("redb_batched_us"), g("redb_batched_per_s")),
        ],
    ];
    let header = ["approach", "write", "load/reopen", "size", "RSS", "per-delivery cost"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> =
            cells.iter().zip(widths).map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count()))).collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header.to_vec());
    println!("|{}|", widths.map(|w| "-".repeat(w + 2)).join("|"));
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    println!(
        "baseline on this disk during the run: append 700 B + fdatasync = {} ms mean (the journal pays this per \
         delivery in every approach); clone of the in-memory state = {} s; in-memory state RSS {} MiB",
        g("fsync_mean_ms"),
        g("snapshot_clone_s"),
        g("snapshot_state_rss_mib")
    );
    println!(
        "redb after a crash (no clean close): open {} s with full repair (deliveries at {} µs each before it); \
         open {} s with quick-repair commits (at {} µs each)",
        g("crash_open_full_repair_s"),
        g("crash_full_repair_us"),
        g("crash_open_quick_repair_s"),
        g("crash_quick_repair_us")
    );
}

fn main() {
    let s = Sizes::from_env();
    if let (Ok(phase), Ok(dir)) = (std::env::var(PHASE_ENV), std::env::var(DIR_ENV)) {
        let dir = PathBuf::from(dir);
        match phase.as_str() {
            "snapshot_write" => snapshot_write(&dir, &s),
            "load_slice" => snapshot_load(&dir, "slice"),
            "load_reader" => snapshot_load(&dir, "reader"),
            "redb_write" => redb_write(&dir, &s).expect("redb write phase"),
            "reopen_iterate" => redb_reopen(&dir, &s, "iterate").expect("redb reopen"),
            "reopen_iterate_small_cache" => {
                let s = Sizes { cache_mib: Some(SMALL_CACHE_MIB), ..s };
                redb_reopen(&dir, &s, "iterate_small_cache").expect("redb reopen")
            }
            "reopen_point" => redb_reopen(&dir, &s, "point").expect("redb reopen"),
            "crash_full_repair" => redb_crash(&dir, &s, false).expect("redb crash phase"),
            "open_full_repair" => redb_open_after_crash(&dir, &s, "full_repair").expect("redb open after crash"),
            "crash_quick_repair" => redb_crash(&dir, &s, true).expect("redb crash phase"),
            "open_quick_repair" => redb_open_after_crash(&dir, &s, "quick_repair").expect("redb open after crash"),
            other => panic!("unknown {PHASE_ENV} {other}"),
        }
        return;
    }
    println!(
        "state_store bench: {} incidents, {} event-index, {} dedup, {} Run-index entries; {} deliveries per redb \
         mode; redb cache {}",
        s.incidents,
        s.events,
        s.dedup,
        s.runs,
        s.deliveries,
        s.cache_mib.map_or("default (1024 MiB)".to_string(), |m| format!("{m} MiB"))
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("current exe");
    let (rss, hwm) = memory_kib();
    println!("bare process: VmRSS {:.1} MiB, VmHWM {:.1} MiB", mib(rss), mib(hwm));
    let mut results = HashMap::new();
    let started = Instant::now();
    let phases = [
        "snapshot_write",
        "load_slice",
        "load_reader",
        "redb_write",
        "reopen_iterate",
        "reopen_iterate_small_cache",
        "reopen_point",
        "crash_full_repair",
        "open_full_repair",
        "crash_quick_repair",
        "open_quick_repair",
    ];
    for phase in phases {
        println!("{phase}:");
        run_phase(&exe, tmp.path(), phase, &mut results);
    }
    println!("bench took {:.1}s", secs(started.elapsed()));
    print_table(&s, &results);
}
