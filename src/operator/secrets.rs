//! Operator-mode secret resolution: `{secretKeyRef}` reads a Secret the resource
//! references, by name (`get`, never `list` or `watch`: the operator reads only the
//! Secrets resources reference), through a small cache refreshed every
//! [`REFRESH`] so that a rotated value is used from the next resolution on;
//! `{env: NAME}` reads the process environment as in standalone mode.
//!
//! Resolution is synchronous, so a reference not read yet is reported unavailable
//! and queued; the [`KubeSecrets::refresh`] task reads it at once and moves the
//! change counter, and the components that use secrets resolve again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::catalog::secrets::{EnvSecrets, MAX_SECRET_BYTES, SecretError, SecretResolver, SecretValue};
use crate::resources::common::SecretRef;

/// How often a cached Secret is read again (rotation takes effect within this).
pub const REFRESH: Duration = Duration::from_secs(3);
/// A Secret no resolution asked for in this long is dropped from the cache.
pub const IDLE: Duration = Duration::from_secs(600);
/// Most Secrets cached; beyond it the least recently used are dropped.
pub const MAX_CACHED: usize = 1024;

/// A Secret as last read: its keys, or why it could not be read.
#[derive(Clone, Debug, PartialEq)]
enum Read {
    Pending,
    Missing,
    Failed(String),
    Data(BTreeMap<String, Vec<u8>>),
}

#[derive(Debug)]
struct Entry {
    read: Read,
    fetched: Option<Instant>,
    used: Instant,
}

/// Secrets from the API server (read by name), environment variables otherwise.
pub struct KubeSecrets {
    cache: Mutex<BTreeMap<(String, String), Entry>>,
    wanted: Notify,
    env: EnvSecrets,
}

impl Default for KubeSecrets {
    fn default() -> Self {
        KubeSecrets { cache: Mutex::new(BTreeMap::new()), wanted: Notify::new(), env: EnvSecrets::process() }
    }
}

impl KubeSecrets {
    fn cache(&self) -> MutexGuard<'_, BTreeMap<(String, String), Entry>> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Number of Secrets cached.
    #[cfg(test)]
    fn cached(&self) -> usize {
        self.cache().len()
    }

    /// Reads every referenced Secret that is new or older than [`REFRESH`], by name,
    /// until cancelled; `changed` moves when any of them changed.
    pub async fn refresh(
        self: Arc<Self>,
        client: Client,
        changed: tokio::sync::watch::Sender<u64>,
        cancel: CancellationToken,
    ) {
        loop {
            let now = Instant::now();
            let due = self.due(now);
            let mut moved = false;
            for (namespace, name) in due {
                let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                let read = match cancel.run_until_cancelled(api.get_opt(&name)).await {
                    None => return,
                    Some(Ok(Some(secret))) => Read::Data(data(secret)),
                    Some(Ok(None)) => Read::Missing,
                    Some(Err(kube::Error::Api(status))) if status.code == 403 => Read::Missing,
                    Some(Err(error)) => {
                        tracing::warn!(%namespace, secret = %name, %error, "cannot read the Secret; retrying");
                        Read::Failed("the API server did not answer; retrying".into())
                    }
                };
                moved |= self.store(&namespace, &name, read, Instant::now());
            }
            if moved {
                changed.send_modify(|n| *n += 1);
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.wanted.notified() => {}
                _ = tokio::time::sleep(REFRESH) => {}
            }
        }
    }

    /// Drops idle (and the least recently used beyond [`MAX_CACHED`]) entries;
    /// returns those to read now.
    fn due(&self, now: Instant) -> Vec<(String, String)> {
        let mut cache = self.cache();
        cache.retain(|_, entry| now.saturating_duration_since(entry.used) < IDLE);
        if cache.len() > MAX_CACHED {
            let mut used: Vec<Instant> = cache.values().map(|e| e.used).collect();
            used.sort_unstable();
            let oldest_kept = used[used.len() - MAX_CACHED];
            cache.retain(|_, entry| entry.used >= oldest_kept);
        }
        cache
            .iter()
            .filter(|(_, e)| e.fetched.is_none_or(|at| now.saturating_duration_since(at) >= REFRESH))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Stores what was read; whether it differs from before.
    fn store(&self, namespace: &str, name: &str, read: Read, now: Instant) -> bool {
        let mut cache = self.cache();
        let Some(entry) = cache.get_mut(&(namespace.to_string(), name.to_string())) else { return false };
        entry.fetched = Some(now);
        // A transient failure keeps the last value read.
        if matches!(read, Read::Failed(_)) && matches!(entry.read, Read::Data(_)) {
            return false;
        }
        let changed = entry.read != read;
        entry.read = read;
        changed
    }

    /// The Secret as cached (queued for reading when new).
    fn lookup(&self, namespace: &str, name: &str) -> Read {
        let mut cache = self.cache();
        let now = Instant::now();
        let key = (namespace.to_string(), name.to_string());
        if let Some(entry) = cache.get_mut(&key) {
            entry.used = now;
            return entry.read.clone();
        }
        cache.insert(key, Entry { read: Read::Pending, fetched: None, used: now });
        drop(cache);
        self.wanted.notify_one();
        Read::Pending
    }
}

fn data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut all: BTreeMap<String, Vec<u8>> =
        secret.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
    for (key, value) in secret.string_data.unwrap_or_default() {
        all.entry(key).or_insert_with(|| value.into_bytes());
    }
    all
}

impl SecretResolver for KubeSecrets {
    fn resolve(&self, namespace: &str, reference: &SecretRef) -> Result<SecretValue, SecretError> {
        let Some(selector) = (match (&reference.env, &reference.secret_key_ref) {
            (None, Some(selector)) => Some(selector),
            (Some(_), None) => None,
            _ => return Err(SecretError::Invalid),
        }) else {
            return self.env.resolve(namespace, reference);
        };
        let unavailable = |reason: &str| SecretError::Unavailable {
            namespace: namespace.to_string(),
            name: selector.name.clone(),
            key: selector.key.clone(),
            reason: reason.to_string(),
        };
        let keys = match self.lookup(namespace, &selector.name) {
            Read::Data(keys) => keys,
            Read::Pending => return Err(unavailable("the Secret is being read; it resolves in a moment")),
            Read::Missing => return Err(unavailable("the Secret does not exist or Akritas may not read it")),
            Read::Failed(reason) => return Err(unavailable(&reason)),
        };
        let bytes = keys.get(&selector.key).cloned().ok_or_else(|| unavailable("the Secret has no such key"))?;
        if bytes.len() > MAX_SECRET_BYTES {
            return Err(SecretError::TooLarge(format!("secret {}/{}", selector.name, selector.key)));
        }
        let text = String::from_utf8(bytes).map_err(|_| unavailable("the value is not UTF-8"))?;
        let value = text.trim();
        if value.is_empty() {
            return Err(unavailable("the value is empty"));
        }
        Ok(SecretValue::new(value.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::json;

    use super::*;
    use crate::operator::mock::{api_server, status};

    fn reference(name: &str, key: &str) -> SecretRef {
        serde_json::from_value(json!({"secretKeyRef": {"name": name, "key": key}})).unwrap()
    }

    #[tokio::test]
    async fn only_referenced_secrets_are_read_by_name_and_rotation_is_seen() {
        let version = Arc::new(AtomicUsize::new(1));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (current, seen) = (version.clone(), requests.clone());
        let (client, server) = api_server(move |method, uri| {
            seen.lock().unwrap().push(format!("{method} {uri}"));
            let token = format!("token-{}", current.load(Ordering::SeqCst));
            match uri {
                "/api/v1/namespaces/ops/secrets/am-token" => Some((
                    200,
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "am-token", "namespace": "ops"},
                           "stringData": {"token": token}}),
                )),
                _ => Some((404, status(404, "NotFound"))),
            }
        });
        let secrets = Arc::new(KubeSecrets::default());
        let (tx, mut changed) = tokio::sync::watch::channel(0);
        let cancel = CancellationToken::new();
        let task = tokio::spawn(secrets.clone().refresh(client, tx, cancel.clone()));
        let first = secrets.resolve("ops", &reference("am-token", "token")).unwrap_err().to_string();
        assert!(first.contains("being read"), "{first}");
        assert!(secrets.resolve("ops", &reference("gone", "token")).is_err());
        tokio::time::timeout(Duration::from_secs(10), changed.changed()).await.unwrap().unwrap();
        let resolve = |name: &str| secrets.resolve("ops", &reference(name, "token")).map(|v| v.expose().to_string());
        assert_eq!(resolve("am-token").unwrap(), "token-1");
        let missing = resolve("gone").unwrap_err().to_string();
        assert!(missing.contains("does not exist"), "{missing}");
        version.store(2, Ordering::SeqCst);
        tokio::time::timeout(REFRESH * 3, changed.changed()).await.unwrap().unwrap();
        assert_eq!(resolve("am-token").unwrap(), "token-2", "a rotated value is used");
        cancel.cancel();
        task.await.unwrap();
        server.abort();
        let requests = requests.lock().unwrap();
        assert!(
            requests.iter().all(|r| r == "GET /api/v1/namespaces/ops/secrets/am-token"
                || r == "GET /api/v1/namespaces/ops/secrets/gone"),
            "only gets by name: {requests:?}"
        );
    }

    #[test]
    fn the_cache_forgets_secrets_no_one_asks_for() {
        let secrets = KubeSecrets::default();
        let _ = secrets.resolve("ops", &reference("a", "k"));
        assert_eq!(secrets.due(Instant::now()).len(), 1);
        assert!(secrets.due(Instant::now() + IDLE).is_empty());
        assert_eq!(secrets.cached(), 0);
    }
}
