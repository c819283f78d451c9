//! The audit anchor: the audit journal's head (seq, hash and seal) written to a file
//! outside the data directory at least every [`INTERVAL`], and once more at shutdown. A
//! journal that was cut behind the anchor, or rewritten, fails `akritas audit verify
//! --anchor`; at start, a journal that ends before the anchor is refused.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tokio_util::sync::CancellationToken;

use crate::audit::AuditLog;
use crate::journal::Head;

/// Longest time between two anchor writes while records are appended.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// The anchor as written: the head and when it was written.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct AnchorFile {
    /// The audit journal's last record when the anchor was written.
    pub head: Head,
    /// RFC 3339 time of the write.
    pub written_at: String,
}

/// Reads an anchor file.
pub fn read(path: &Path) -> Result<AnchorFile> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the audit anchor {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not an audit anchor", path.display()))
}

/// Refuses a journal that ends before its anchor (records were removed from its end).
pub fn check_at_start(audit: &AuditLog, path: &Path) -> Result<()> {
    if !path.exists() {
        return Ok(());
    }
    let anchored = read(path)?.head;
    let head = audit.head();
    if head.seq < anchored.seq {
        bail!(
            "the audit journal ends at seq {} but its anchor {} records seq {}: records were removed from its end. \
             Keep the data for investigation; `akritas audit verify --anchor` shows what is missing. To start anyway \
             from this journal, move the anchor file away",
            head.seq,
            path.display(),
            anchored.seq
        );
    }
    Ok(())
}

/// Writes the head whenever it moved, at most [`INTERVAL`] apart, until `cancel`.
pub async fn keep(audit: Arc<AuditLog>, path: PathBuf, cancel: CancellationToken) {
    let mut written: Option<Head> = None;
    loop {
        let head = audit.head();
        if written.as_ref() != Some(&head) {
            match write(&path, &head) {
                Ok(()) => written = Some(head),
                Err(error) => tracing::error!(path = %path.display(), %error, "could not write the audit anchor"),
            }
        }
        tokio::select! {
            () = cancel.cancelled() => {
                let head = audit.head();
                if written.as_ref() != Some(&head)
                    && let Err(error) = write(&path, &head)
                {
                    tracing::error!(path = %path.display(), %error, "could not write the audit anchor at shutdown");
                }
                return;
            }
            () = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

/// Replaces the anchor atomically: a temporary file, fsynced, renamed over it.
fn write(path: &Path, head: &Head) -> std::io::Result<()> {
    let anchor = AnchorFile { head: head.clone(), written_at: jiff::Timestamp::now().to_string() };
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(serde_json::to_string(&anchor).map_err(std::io::Error::other)?.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
