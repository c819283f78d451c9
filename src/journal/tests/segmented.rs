//! Segments: sealing, the chain across segments, checkpoints, reads by location, retention and its anchor.

use super::*;

/// Options sealing a segment every `bytes`.
fn small_segments(bytes: u64) -> JournalOptions {
    JournalOptions { segment_bytes: bytes, segment_age: None, ..test_options() }
}

fn fill(path: &Path, options: JournalOptions, n: usize) -> Vec<Record> {
    let (j, _) = Journal::open(path, options).unwrap();
    (0..n).map(|i| j.append_blocking("audit.tool_call", &sample_data(i)).unwrap()).collect()
}

fn segment_files(path: &Path) -> Vec<PathBuf> {
    let layout = Layout::new(path);
    layout.list().unwrap().iter().map(|s| layout.segment_path(s.id)).collect()
}

#[test]
fn a_full_segment_is_sealed_and_the_chain_runs_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let written = fill(&path, small_segments(1024), 60);
    let files = segment_files(&path);
    assert!(files.len() > 3, "{files:?}");
    assert_eq!(files[0], path, "the first segment is the configured path");
    // Each later segment is named after its first record and starts with the record after the one before.
    for file in &files[1..] {
        let first = lines(file).remove(0);
        let record: serde_json::Value = serde_json::from_str(&first).unwrap();
        let seq = record["seq"].as_u64().unwrap();
        assert!(file.to_string_lossy().ends_with(&format!("{seq:020}")), "{file:?} starts at {seq}");
        assert_eq!(record["prev"], written[seq as usize - 2].hash.as_str());
    }
    let report = verify(&path).unwrap();
    assert_eq!((report.records, report.last_seq, report.segments), (60, 60, files.len() as u64));
    assert_eq!(report.last_hash, written[59].hash);
    // Reopening continues the chain in the active segment.
    let more = fill(&path, small_segments(1024), 5);
    assert_eq!(more[0].seq, 61);
    let (_, replay) = read(&path).unwrap();
    assert_eq!(replay.records.len(), 65);
    assert_eq!(replay.records[..60], written[..]);
}

#[test]
fn a_record_is_read_back_by_its_location_in_any_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let (j, _) = Journal::open(&path, small_segments(2048)).unwrap();
    let written: Vec<Record> = (0..40).map(|i| j.append_blocking("audit.chat", &sample_data(i)).unwrap()).collect();
    assert!(written.iter().any(|r| r.location.segment > 1), "several segments");
    for record in &written {
        assert_eq!(&j.read_at(record.location).unwrap(), record);
        assert_eq!(&read_record(&path, record.location).unwrap(), record);
    }
    let mut wrong = written[3].location;
    wrong.offset += 1;
    assert!(matches!(j.read_at(wrong), Err(JournalError::Corrupt { .. })));
}

#[test]
fn a_tampered_sealed_segment_fails_verification_and_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fill(&path, small_segments(1024), 30);
    let files = segment_files(&path);
    let sealed = &files[1];
    let mut text = lines(sealed);
    text[0] = text[0].replace("\"n\":", "\"n\":1");
    write_lines(sealed, &text);
    assert!(matches!(verify(&path), Err(JournalError::Corrupt { .. })));
    assert!(matches!(Journal::open(&path, small_segments(1024)), Err(JournalError::Corrupt { .. })));
}

#[test]
fn a_missing_middle_segment_breaks_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fill(&path, small_segments(1024), 30);
    let files = segment_files(&path);
    fs::remove_file(&files[1]).unwrap();
    let err = verify(&path).unwrap_err();
    assert!(err.to_string().contains("the one before ends at seq"), "{err}");
    // Deleting the first segment without an anchor is refused too.
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fill(&path, small_segments(1024), 30);
    fs::remove_file(&path).unwrap();
    let err = Journal::open(&path, small_segments(1024)).unwrap_err();
    assert!(err.to_string().contains("the chain starts at seq 1"), "{err}");
}

#[test]
fn a_torn_line_in_a_sealed_segment_is_corrupt_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fill(&path, small_segments(1024), 30);
    let files = segment_files(&path);
    let mut file = OpenOptions::new().append(true).open(&files[0]).unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":").unwrap();
    let err = verify(&path).unwrap_err();
    assert!(err.to_string().contains("a sealed segment ends with a partial record"), "{err}");
}

#[test]
fn opening_from_a_checkpoint_replays_only_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let written = fill(&path, small_segments(1024), 50);
    let checkpoint = written[34].checkpoint();
    let mut seen = Vec::new();
    let mut visit = |r: Record| -> Result<(), std::convert::Infallible> {
        seen.push(r);
        Ok(())
    };
    let (j, opened) = Journal::open_from(&path, small_segments(1024), Some(&checkpoint), &mut visit).unwrap();
    assert_eq!(seen, written[35..].to_vec());
    let mut visit = |_: Record| -> Result<(), std::convert::Infallible> { Ok(()) };
    assert_eq!(opened.report.records, 15);
    assert_eq!(j.append_blocking("audit.chat", &json!({})).unwrap().seq, 51);
    drop(j);
    // A checkpoint the journal does not hold is refused, so the caller replays everything.
    let mut forged = checkpoint.clone();
    forged.hash = written[33].hash.clone();
    let err = Journal::open_from(&path, small_segments(1024), Some(&forged), &mut visit).unwrap_err();
    assert!(matches!(err, ScanError::Journal(JournalError::CheckpointMismatch { seq: 35, .. })), "{err}");
}

#[tokio::test]
async fn retention_deletes_old_segments_counts_them_and_anchors_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let (j, _) = Journal::open(&path, small_segments(1024)).unwrap();
    let mut written = Vec::new();
    for i in 0..60 {
        written.push(j.append("audit.tool_call", &sample_data(i)).await.unwrap());
    }
    let before = segment_files(&path);
    let keep_from = written[30].seq;
    let removed = j.retain(Retention { max_age: Duration::ZERO, keep_from }).await.unwrap();
    let after = segment_files(&path);
    let gone = before.iter().filter(|f| !after.contains(f)).count();
    assert!(removed.segments > 0 && removed.segments as usize == gone, "{removed:?}");
    let first_kept = Layout::new(&path).list().unwrap()[0].id;
    assert!(first_kept <= keep_from, "what keep_from needs stays: first kept {first_kept}");
    assert_eq!(removed.records, first_kept - 1);
    assert!(!path.exists(), "the first segment went");
    // Nothing newer than the age goes.
    let none = j.retain(Retention { max_age: Duration::from_secs(3600), keep_from: u64::MAX }).await.unwrap();
    assert_eq!(none, Removed::default());
    drop(j);

    let anchor = Layout::new(&path).read_anchor().unwrap().unwrap();
    assert_eq!(anchor.first_seq, first_kept);
    assert_eq!(anchor.prev, written[first_kept as usize - 2].hash);
    assert_eq!((anchor.removed_segments, anchor.removed_records), (removed.segments, removed.records));
    let (report, replay) = read(&path).unwrap();
    assert_eq!(report.first_seq, first_kept);
    assert_eq!(replay.records[0], written[first_kept as usize - 1]);
    let retention: Vec<&Record> = replay.recovered.iter().filter(|r| r.kind == "journal.retention").collect();
    assert_eq!(retention.len(), 1);
    assert_eq!(retention[0].data["removed_records"], removed.records);

    // The anchor is part of the chain: a forged one fails verification.
    let mut forged = anchor.clone();
    forged.prev = written[0].hash.clone();
    Layout::new(&path).write_anchor(&forged).unwrap();
    assert!(matches!(verify(&path), Err(JournalError::Corrupt { .. })));
    Layout::new(&path).write_anchor(&anchor).unwrap();

    // A retention interrupted after its anchor: the leftover segment is deleted at open.
    fs::write(Layout::new(&path).segment_path(1), "leftover\n").unwrap();
    let (j, _) = Journal::open(&path, small_segments(1024)).unwrap();
    assert!(!path.exists());
    drop(j);
    verify(&path).unwrap();
}

#[test]
fn a_segment_is_sealed_by_age() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    // The test clock advances one second per record.
    let options = JournalOptions { segment_bytes: 0, segment_age: Some(Duration::from_secs(10)), ..test_options() };
    fill(&path, options, 25);
    let ids: Vec<u64> = Layout::new(&path).list().unwrap().iter().map(|s| s.id).collect();
    assert!(ids.len() >= 2, "{ids:?}");
    verify(&path).unwrap();
}

#[test]
fn a_second_open_is_refused_even_after_a_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let (j, _) = Journal::open(&path, small_segments(512)).unwrap();
    for i in 0..20 {
        j.append_blocking("audit.chat", &sample_data(i)).unwrap();
    }
    assert!(Journal::open(&path, small_segments(512)).is_err());
}

#[test]
fn a_snapshot_reads_back_only_unchanged_and_of_its_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    let written = fill(&path, small_segments(1024), 5);
    let checkpoint = written[4].checkpoint();
    let state = json!({"incidents": ["inc_1", "inc_2"], "count": 12});
    snapshot::write(&path, "test.v1", &checkpoint, &state).unwrap();
    let (back, read): (Checkpoint, serde_json::Value) = snapshot::read(&path, "test.v1").unwrap();
    assert_eq!((back, read), (checkpoint.clone(), state.clone()));
    assert!(snapshot::read::<serde_json::Value>(&path, "test.v2").is_none(), "another format is ignored");
    // A changed digit still parses as JSON, but the hash finds it.
    let file = snapshot::snapshot_path(&path);
    let text = fs::read_to_string(&file).unwrap().replace("12", "13");
    fs::write(&file, text).unwrap();
    assert!(snapshot::read::<serde_json::Value>(&path, "test.v1").is_none());
    snapshot::discard(&path);
    assert!(!file.exists());
}

#[test]
fn a_record_respaced_outside_its_hashed_fields_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = journal_path(&dir);
    fill(&path, JournalOptions { segment_bytes: 0, ..test_options() }, 3);
    let mut text = lines(&path);
    text[1] = text[1].replacen(",\"time\":", ", \"time\":", 1);
    write_lines(&path, &text);
    let err = verify(&path).unwrap_err().to_string();
    assert!(err.contains("exact encoding"), "{err}");
}
