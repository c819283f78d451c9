//! The audit anchor: the audit journal's head (seq, hash and seal) kept outside the data
//! directory, written at most [`INTERVAL`] after it moves and once more at shutdown: in a
//! file (`audit_anchor_file`), or in operator mode without one, in the ConfigMap
//! [`CONFIG_MAP`] of the pod's namespace (key [`CONFIG_MAP_KEY`], the same JSON as the
//! file). A journal that was cut behind the anchor, or rewritten, fails `akritas audit
//! verify --anchor`; at start, a journal that ends before the anchor is refused.

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
/// The ConfigMap that holds the anchor in operator mode.
pub const CONFIG_MAP: &str = "akritas-audit-anchor";
/// Its data key.
pub const CONFIG_MAP_KEY: &str = "anchor.json";

/// Where the anchor is kept.
#[derive(Clone)]
pub enum Target {
    /// A file outside the data directory.
    File(PathBuf),
    /// The [`CONFIG_MAP`] of a namespace.
    ConfigMap {
        /// The operator's client.
        client: kube::Client,
        /// The pod's namespace.
        namespace: String,
    },
}

impl Target {
    fn describe(&self) -> String {
        match self {
            Target::File(path) => path.display().to_string(),
            Target::ConfigMap { namespace, .. } => format!("ConfigMap {namespace}/{CONFIG_MAP}"),
        }
    }

    async fn load(&self) -> Result<Option<AnchorFile>> {
        match self {
            Target::File(path) => Ok(if path.exists() { Some(read(path)?) } else { None }),
            Target::ConfigMap { client, namespace } => {
                let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                    kube::Api::namespaced(client.clone(), namespace);
                let found = api.get_opt(CONFIG_MAP).await.with_context(|| format!("reading {}", self.describe()))?;
                let text = found.and_then(|cm| cm.data).and_then(|mut data| data.remove(CONFIG_MAP_KEY));
                text.map(|text| {
                    serde_json::from_str(&text).with_context(|| format!("{} holds no audit anchor", self.describe()))
                })
                .transpose()
            }
        }
    }

    async fn store(&self, head: &Head) -> std::result::Result<(), String> {
        let anchor = AnchorFile { head: head.clone(), written_at: jiff::Timestamp::now().to_string() };
        let text = serde_json::to_string(&anchor).map_err(|e| e.to_string())?;
        match self {
            Target::File(path) => write(path, &text).map_err(|e| e.to_string()),
            Target::ConfigMap { client, namespace } => {
                let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                    kube::Api::namespaced(client.clone(), namespace);
                let patch = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": CONFIG_MAP},
                    "data": {CONFIG_MAP_KEY: text},
                });
                let params = kube::api::PatchParams::apply(crate::operator::api::FIELD_MANAGER).force();
                api.patch(CONFIG_MAP, &params, &kube::api::Patch::Apply(&patch))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        }
    }
}

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
pub async fn check_at_start(audit: &AuditLog, target: &Target) -> Result<()> {
    let Some(anchored) = target.load().await? else { return Ok(()) };
    let anchored = anchored.head;
    // On the database the head row is the chain's own anchor.
    let Some(head) = audit.head() else { return Ok(()) };
    if head.seq < anchored.seq {
        bail!(
            "the audit journal ends at seq {} but its anchor {} records seq {}: records were removed from its end. \
             Keep the data for investigation; `akritas audit verify --anchor` shows what is missing. To start anyway \
             from this journal, move the anchor file away (or delete the ConfigMap)",
            head.seq,
            target.describe(),
            anchored.seq
        );
    }
    Ok(())
}

/// Writes the head whenever it moved, at most [`INTERVAL`] apart, until `cancel`.
pub async fn keep(audit: Arc<AuditLog>, target: Target, cancel: CancellationToken) {
    let mut written: Option<Head> = None;
    // On the database the head row is the chain's own anchor: nothing to keep outside it.
    if audit.on_database() {
        return;
    }
    loop {
        let Some(head) = audit.head() else { return };
        if written.as_ref() != Some(&head) {
            match target.store(&head).await {
                Ok(()) => written = Some(head),
                Err(error) => tracing::error!(anchor = %target.describe(), %error, "could not write the audit anchor"),
            }
        }
        tokio::select! {
            () = cancel.cancelled() => {
                let Some(head) = audit.head() else { return };
                if written.as_ref() != Some(&head)
                    && let Err(error) = target.store(&head).await
                {
                    tracing::error!(anchor = %target.describe(), %error, "could not write the audit anchor at shutdown");
                }
                return;
            }
            () = tokio::time::sleep(INTERVAL) => {}
        }
    }
}

/// Replaces the anchor file atomically: a temporary file, fsynced, renamed over it.
fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}
