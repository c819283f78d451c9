//! A keyed audit chain: whoever can write the volume can rewrite a record and re-chain
//! every hash after it, or cut the journal's end; with `audit_key_env` set, every record
//! carries an HMAC seal of its hash and the head is anchored outside the journal, so
//! `akritas audit verify --key-env --anchor` fails on both. A journal written before the
//! key was set verifies under the unkeyed rule up to its first sealed record.

use akritas_testkit as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use akritas::audit::{AuditLog, AuditStorage};
use akritas::journal::{JournalOptions, SealError, verify_seals};
use sha2::{Digest, Sha256};
use support::host;

const KEY: &str = "c0ffee0123456789abcdef0123456789c0ffee0123456789abcdef0123456789";

fn storage(key: Option<&str>) -> AuditStorage {
    AuditStorage {
        journal: JournalOptions {
            mac_key: key.map(|k| Arc::from(k.as_bytes().to_vec())),
            segment_age: None,
            ..JournalOptions::default()
        },
        ..AuditStorage::default()
    }
}

/// A journal with `unkeyed` Runs written before the key was set and `keyed` after; the
/// anchor written by the service's anchor task at the end.
async fn journal(dir: &Path, unkeyed: usize, keyed: usize) -> (PathBuf, PathBuf) {
    let path = dir.join("audit/akritas.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if unkeyed > 0 {
        let audit = AuditLog::open_with(&path, storage(None)).unwrap();
        for n in 0..unkeyed {
            host::finished_run(&audit, &format!("before-{n}")).await;
        }
    }
    let audit = Arc::new(AuditLog::open_with(&path, storage(Some(KEY))).unwrap());
    for n in 0..keyed {
        host::finished_run(&audit, &format!("db-7 operator {n}")).await;
    }
    let anchor = dir.join("anchor/audit-anchor.json");
    std::fs::create_dir_all(anchor.parent().unwrap()).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    akritas::app::anchor::keep(audit.clone(), akritas::app::anchor::Target::File(anchor.clone()), cancel).await;
    (path, anchor)
}

fn anchored(anchor: &Path) -> akritas::journal::Head {
    akritas::app::anchor::read(anchor).unwrap().head
}

/// The attacker's tool: changes `from` to `to` in the first record holding it and
/// recomputes every hash from there on (the unkeyed rule), keeping or dropping the seals.
fn rewrite_and_rechain(path: &Path, from: &str, to: &str, keep_seals: bool) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut prev = String::new();
    let mut changed = false;
    let mut out = String::new();
    for line in text.lines() {
        let (head, rest) = line.split_at(line.find(",\"prev\":\"").unwrap());
        let data_at = rest.find("\",\"data\":").unwrap();
        let hash_at = rest.rfind(",\"hash\":\"").unwrap();
        let mut data = rest[data_at + "\",\"data\":".len()..hash_at].to_string();
        let tail = &rest[hash_at + ",\"hash\":\"".len()..];
        let (old_hash, mac) = (&tail[..64], &tail[64..]);
        if !changed && data.contains(from) {
            data = data.replacen(from, to, 1);
            changed = true;
        }
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        if prev.is_empty() {
            prev = record["prev"].as_str().unwrap().to_string();
        }
        let hash = if changed {
            let mut h = Sha256::new();
            let seq = record["seq"].as_u64().unwrap().to_string();
            for part in
                [prev.as_str(), seq.as_str(), record["time"].as_str().unwrap(), record["kind"].as_str().unwrap()]
            {
                h.update(part.as_bytes());
                h.update(b"\n");
            }
            h.update(data.as_bytes());
            hex::encode(h.finalize())
        } else {
            old_hash.to_string()
        };
        let mac = if keep_seals { mac.to_string() } else { "\"}".to_string() };
        out.push_str(&format!("{head},\"prev\":\"{prev}\",\"data\":{data},\"hash\":\"{hash}{mac}\n"));
        prev = hash;
    }
    assert!(changed, "{from} is not in the journal");
    std::fs::write(path, out).unwrap();
}

/// `akritas audit verify PATH --key-env AKRITAS_AUDIT_KEY --anchor ANCHOR`.
fn verify_keyed(path: &Path, anchor: &Path) -> (bool, String) {
    let (path, anchor) = (path.to_str().unwrap(), anchor.to_str().unwrap());
    cli(&["audit", "verify", path, "--key-env", "AKRITAS_AUDIT_KEY", "--anchor", anchor])
}

fn cli(args: &[&str]) -> (bool, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(args)
        .env("AKRITAS_AUDIT_KEY", KEY)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

#[tokio::test]
async fn a_rewritten_and_rechained_journal_fails_with_the_key() {
    for keep_seals in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (path, anchor) = journal(dir.path(), 0, 4).await;
        let (ok, text) = verify_keyed(&path, &anchor);
        assert!(ok, "the untouched journal verifies: {text}");
        assert!(text.contains("sealed record(s)"), "{text}");

        rewrite_and_rechain(&path, "db-7 operator 1", "db-7 operator X", keep_seals);
        // The unkeyed rule cannot see it: the attacker re-chained every hash.
        let (ok, text) = cli(&["audit", "verify", path.to_str().unwrap()]);
        assert!(ok, "re-chained hashes pass the unkeyed check: {text}");
        let error = verify_seals(&path, KEY.as_bytes(), None).unwrap_err();
        match keep_seals {
            true => assert!(matches!(error, SealError::BadSeal { .. }), "{error}"),
            false => assert!(matches!(error, SealError::NoSeals), "stripping every seal is seen: {error}"),
        }
        let (ok, text) = verify_keyed(&path, &anchor);
        assert!(!ok, "the keyed check fails: {text}");
        assert!(text.contains("rewritten") || text.contains("stripped"), "{text}");
    }
}

#[tokio::test]
async fn a_journal_cut_behind_its_anchor_fails_and_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let (path, anchor) = journal(dir.path(), 0, 5).await;
    let head = anchored(&anchor);
    assert!(head.seq > 4 && head.mac.is_some(), "{head:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text.lines().collect();
    std::fs::write(&path, kept[..kept.len() - 3].iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    assert!(cli(&["audit", "verify", path.to_str().unwrap()]).0, "a clean cut passes the unkeyed check");
    let error = verify_seals(&path, KEY.as_bytes(), Some(&head)).unwrap_err();
    assert!(matches!(error, SealError::BehindAnchor { .. }), "{error}");
    let (ok, text) = verify_keyed(&path, &anchor);
    assert!(!ok && text.contains("removed from its end"), "{text}");
    // The service refuses to append to it.
    let audit = AuditLog::open_with(&path, storage(Some(KEY))).unwrap();
    let target = akritas::app::anchor::Target::File(anchor.clone());
    let refused = akritas::app::anchor::check_at_start(&audit, &target).await.unwrap_err();
    assert!(format!("{refused:#}").contains("move the anchor file away"), "{refused:#}");
}

#[tokio::test]
async fn an_old_journal_verifies_up_to_its_first_sealed_record() {
    let dir = tempfile::tempdir().unwrap();
    let (path, anchor) = journal(dir.path(), 3, 2).await;
    let report = verify_seals(&path, KEY.as_bytes(), Some(&anchored(&anchor))).unwrap();
    assert!(report.unsealed_before >= 3 && report.sealed >= 2, "{report:?}");
    assert_eq!(report.first_sealed, Some(report.unsealed_before + 1));
    // Seals stripped from the end only: the records after the first sealed one must be sealed.
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut cut = lines.clone();
    let last = cut.last_mut().unwrap();
    *last = format!("{}\"}}", &last[..last.find("\",\"mac\":\"").unwrap()]);
    std::fs::write(&path, cut.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let error = verify_seals(&path, KEY.as_bytes(), None).unwrap_err();
    assert!(matches!(error, SealError::Unsealed { .. }), "{error}");
    std::fs::write(&path, text).unwrap();
    // A wrong key fails on the first sealed record.
    let error = verify_seals(&path, b"another key of the right length 0123456789", None).unwrap_err();
    assert!(matches!(error, SealError::BadSeal { seq } if Some(seq) == report.first_sealed), "{error}");
}

/// The service seals its audit journal with the key and writes the anchor outside the
/// data directory; a short key, or an anchor inside the data directory, is refused at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_seals_and_anchors_its_journal_and_refuses_a_weak_setup() {
    let dir = tempfile::tempdir().unwrap();
    let (data, anchor) = (dir.path().join("data"), dir.path().join("anchor.json"));
    let start = |key: &str, anchor: &Path| {
        let mut command = support::serve_command(env!("CARGO_BIN_EXE_akritas"));
        command
            .env("AKRITAS_DATA_DIR", &data)
            .env("AKRITAS_AUDIT_KEY_ENV", "AKRITAS_AUDIT_KEY")
            .env("AKRITAS_AUDIT_KEY", key)
            .env("AKRITAS_AUDIT_ANCHOR_FILE", anchor);
        command
    };
    let server = support::Server::start(start(KEY, &anchor));
    let written = support::poll(std::time::Duration::from_secs(10), || async { anchor.exists().then_some(()) }).await;
    assert!(written.is_some(), "no anchor was written:\n{}", server.log_text());
    drop(server);
    let journal = data.join("audit/akritas.jsonl");
    let (ok, text) = verify_keyed(&journal, &anchor);
    assert!(ok, "{text}");
    for (key, anchor, expected) in
        [("short-key", anchor.clone(), "shorter than 32 bytes"), (KEY, data.join("anchor.json"), "lies inside")]
    {
        let output = start(key, &anchor).stderr(std::process::Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(expected), "{stderr}");
        assert!(!stderr.contains(KEY), "the key is never printed: {stderr}");
    }
}
