//! The Workspaces the Catalog declares, kept usable: a `path` workspace is checked
//! in place (its HEAD commit), a `git` workspace is cloned into
//! `<data_dir>/workspaces/<namespace>/<name>` and fetched every
//! `fetchIntervalSeconds` and on demand. Each publishes `headCommit`, `lastFetch`
//! and `lastError` and its `Checked` condition on the status board.
//!
//! Readiness: a git workspace is `Ready` only after a successful clone. A later
//! failed fetch keeps the previous checkout in use: it stays `Ready`, with
//! `Checked` reason `FetchFailed` and the error in its message and in `lastError`.
//!
//! Readers of a working tree (previews) hold [`LocalWorkspace::lock`] for reading;
//! a fetch holds it for writing while it resets the tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, RwLock};
use tokio_util::sync::CancellationToken;

use crate::catalog::policy::ResourcePolicy;
use crate::catalog::readiness::{Check, reasons};
use crate::catalog::secrets::SecretResolver;
use crate::catalog::status::StatusBoard;
use crate::catalog::{Catalog, CatalogStore, ObjectKey};
use crate::change::git::{self, Credentials, GitError, Head, Remote};
use crate::resources::common::{SecretRef, now_rfc3339};
use crate::resources::workspace::WorkspaceStatus;
use crate::resources::{Kind, Resource};

/// How often `path` workspaces are checked again for a new HEAD.
pub const PATH_RECHECK: Duration = Duration::from_secs(60);

/// A workspace as the change pipeline uses it.
#[derive(Clone, Debug)]
pub struct LocalWorkspace {
    /// The working tree (the path, or the clone in the data directory).
    pub dir: PathBuf,
    /// The commit checked out, once known.
    pub head: Option<Head>,
    /// The remote with resolved credentials (git workspaces, after a successful sync).
    pub remote: Option<Remote>,
    /// Read by previews while they read the tree; written by a fetch while it resets it.
    pub lock: Arc<RwLock<()>>,
}

/// What a Workspace declares, as far as keeping it usable goes.
#[derive(Clone, Debug, PartialEq)]
enum Source {
    /// A path on the host (`standalone`: declared in a manifest directory).
    Path {
        standalone: bool,
    },
    Git {
        url: String,
        reference: String,
        auth: Option<(String, SecretRef)>,
        interval: Duration,
    },
}

/// What is known about a workspace now.
#[derive(Clone, Debug, Default)]
struct Observed {
    head: Option<Head>,
    /// A path workspace: its tree, symlinks resolved, as the policy allowed it.
    resolved: Option<PathBuf>,
    remote: Option<Remote>,
    last_fetch: Option<String>,
    last_error: Option<String>,
}

struct Slot {
    source: Source,
    dir: PathBuf,
    lock: Arc<RwLock<()>>,
    /// One sync at a time per workspace (schedule and on-demand fetches).
    syncing: Arc<tokio::sync::Mutex<()>>,
    observed: Arc<Mutex<Observed>>,
    wake: Arc<Notify>,
    cancel: CancellationToken,
}

struct Inner {
    data_dir: PathBuf,
    policy: Arc<ResourcePolicy>,
    secrets: Arc<dyn SecretResolver>,
    board: StatusBoard,
    slots: Mutex<BTreeMap<ObjectKey, Slot>>,
}

/// The declared Workspaces and their working trees (cheap to clone).
#[derive(Clone)]
pub struct Workspaces {
    inner: Arc<Inner>,
}

impl Workspaces {
    /// Manages workspaces with clones under `data_dir/workspaces`; a path workspace is
    /// used only where `policy` allows it (`workspace_roots`, never the data directory).
    pub fn new(
        data_dir: PathBuf,
        secrets: Arc<dyn SecretResolver>,
        board: StatusBoard,
        policy: Arc<ResourcePolicy>,
    ) -> Self {
        let inner = Inner { data_dir, policy, secrets, board, slots: Mutex::new(BTreeMap::new()) };
        Workspaces { inner: Arc::new(inner) }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjectKey, Slot>> {
        self.inner.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The working tree of a declared workspace, if it is declared.
    pub fn local(&self, namespace: &str, name: &str) -> Option<LocalWorkspace> {
        let slots = self.slots();
        let slot = slots.get(&key(namespace, name))?;
        let observed = slot.observed.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Some(LocalWorkspace {
            dir: observed.resolved.clone().unwrap_or_else(|| slot.dir.clone()),
            head: observed.head,
            remote: observed.remote,
            lock: slot.lock.clone(),
        })
    }

    /// Fetches a git workspace now (or checks a path workspace's HEAD again).
    pub async fn fetch_now(&self, namespace: &str, name: &str) -> Result<Head, GitError> {
        self.sync_once(&key(namespace, name)).await
    }

    /// Keeps the workspaces in line with the Catalog until cancelled; then stops every
    /// scheduled fetch.
    pub async fn run(
        self,
        store: CatalogStore,
        mut secrets_changed: tokio::sync::watch::Receiver<u64>,
        cancel: CancellationToken,
    ) {
        let mut catalog_changes = store.subscribe();
        let mut followers = tokio::task::JoinSet::new();
        let mut recheck = tokio::time::interval(PATH_RECHECK);
        recheck.tick().await;
        let mut secrets_open = true;
        loop {
            let catalog = store.current();
            self.reconcile(&catalog, &mut followers, &cancel);
            self.check_paths().await;
            self.inner.board.retain_observed(|key| key.kind != Kind::Workspace || catalog.entries.contains_key(key));
            while followers.try_join_next().is_some() {}
            tokio::select! {
                _ = cancel.cancelled() => break,
                changed = catalog_changes.changed() => if changed.is_err() { break; },
                _ = recheck.tick() => {}
                changed = secrets_changed.changed(), if secrets_open => match changed {
                    // A rotated token: workspaces whose last sync failed try again now.
                    Ok(()) => self.wake_failed(),
                    Err(_) => secrets_open = false,
                },
            }
        }
        for slot in self.slots().values() {
            slot.cancel.cancel();
        }
        while followers.join_next().await.is_some() {}
    }

    /// Replaces the slots whose declaration changed and starts their schedules.
    fn reconcile(&self, catalog: &Catalog, followers: &mut tokio::task::JoinSet<()>, cancel: &CancellationToken) {
        let mut slots = self.slots();
        let mut declared = Vec::new();
        for (key, entry) in catalog.of_kind(Kind::Workspace) {
            let Resource::Workspace(workspace) = entry.resource.as_ref() else { continue };
            declared.push(key.clone());
            let (source, dir) = match (&workspace.spec.source.path, &workspace.spec.source.git) {
                (Some(path), _) => {
                    let dir = entry.base_dir.as_deref().map(|base| base.join(path)).unwrap_or_else(|| path.into());
                    (Source::Path { standalone: entry.base_dir.is_some() }, dir)
                }
                (None, Some(git)) => (
                    Source::Git {
                        url: git.url.clone(),
                        reference: git.reference.clone(),
                        auth: git.auth.as_ref().map(|a| (a.username.clone(), a.token.clone())),
                        interval: Duration::from_secs(u64::from(git.fetch_interval_seconds)),
                    },
                    self.inner.data_dir.join("workspaces").join(&key.namespace).join(&key.name),
                ),
                (None, None) => continue,
            };
            if slots.get(key).is_some_and(|slot| slot.source == source && slot.dir == dir) {
                continue;
            }
            let previous = slots.remove(key);
            if let Some(previous) = &previous {
                previous.cancel.cancel();
            }
            let slot = Slot {
                source: source.clone(),
                dir,
                // Readers of the old declaration still hold the tree's lock.
                lock: previous.as_ref().map(|p| p.lock.clone()).unwrap_or_default(),
                syncing: previous.as_ref().map(|p| p.syncing.clone()).unwrap_or_default(),
                observed: Arc::default(),
                wake: Arc::default(),
                cancel: cancel.child_token(),
            };
            match &source {
                Source::Git { url, interval, .. } => {
                    self.inner.board.set_check(key, Check::pending(reasons::CHECKING, format!("cloning {url}")));
                    followers.spawn(self.clone().follow(
                        key.clone(),
                        *interval,
                        slot.wake.clone(),
                        slot.cancel.clone(),
                    ));
                }
                // Not ready at its new path until that tree is checked.
                Source::Path { .. } => {
                    self.inner.board.set_check(key, Check::pending(reasons::CHECKING, "checking the tree"));
                }
            }
            slots.insert(key.clone(), slot);
        }
        slots.retain(|key, slot| {
            let keep = declared.contains(key);
            if !keep {
                slot.cancel.cancel();
            }
            keep
        });
    }

    /// Syncs one git workspace now and then every `interval` (or when woken).
    async fn follow(self, key: ObjectKey, interval: Duration, wake: Arc<Notify>, cancel: CancellationToken) {
        loop {
            if let Err(error) = self.sync_once(&key).await {
                tracing::warn!(workspace = %key, %error, "workspace sync failed");
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
                _ = wake.notified() => {}
            }
        }
    }

    fn wake_failed(&self) {
        for slot in self.slots().values() {
            if slot.observed.lock().unwrap_or_else(|p| p.into_inner()).last_error.is_some() {
                slot.wake.notify_one();
            }
        }
    }

    /// Checks every path workspace's HEAD.
    async fn check_paths(&self) {
        let paths: Vec<ObjectKey> = self
            .slots()
            .iter()
            .filter(|(_, s)| matches!(s.source, Source::Path { .. }))
            .map(|(k, _)| k.clone())
            .collect();
        for key in paths {
            let _ = self.sync_once(&key).await;
        }
    }

    /// One sync of one workspace: the clone or fetch of a git workspace, the HEAD of
    /// a path workspace; the outcome goes to the status board.
    async fn sync_once(&self, key: &ObjectKey) -> Result<Head, GitError> {
        let unknown = || GitError::UnknownWorkspace { namespace: key.namespace.clone(), name: key.name.clone() };
        let (source, dir, lock, syncing, observed) = {
            let slots = self.slots();
            let slot = slots.get(key).ok_or_else(unknown)?;
            (slot.source.clone(), slot.dir.clone(), slot.lock.clone(), slot.syncing.clone(), slot.observed.clone())
        };
        let _one_at_a_time = syncing.lock().await;
        let (url, reference, auth) = match source {
            Source::Git { url, reference, auth, .. } => (url, reference, auth),
            Source::Path { standalone } => return self.check_path(key, &dir, standalone, &observed).await,
        };
        // Nothing is sent, credentials least of all, to a remote the egress policy refuses.
        let policy = crate::egress::Egress::current();
        let checked = if auth.is_some() { policy.check_credential_url(&url) } else { policy.check_url(&url) };
        if let Err(error) = checked {
            let reason = error.reason();
            let error = GitError::from(error);
            self.inner.board.set_check(key, Check::failed(reason, error.to_string()));
            return Err(error);
        }
        let credentials = match &auth {
            None => Ok(None),
            Some((username, token)) => self
                .inner
                .secrets
                .resolve(&key.namespace, token)
                .map(|value| Some(Credentials { username: username.clone(), token: value.expose().to_string() }))
                .map_err(|error| GitError::Credentials(error.to_string())),
        };
        let outcome = match credentials {
            Err(error) => Err(error),
            Ok(credentials) => {
                let remote = Remote { url, reference, credentials };
                let _writing = lock.write().await;
                let (target, clone) = (dir.clone(), remote.clone());
                tokio::task::spawn_blocking(move || git::sync(&clone, &target))
                    .await
                    .unwrap_or_else(|e| {
                        Err(GitError::Io { dir: dir.clone(), message: format!("the git task failed: {e}") })
                    })
                    .map(|head| (head, remote))
            }
        };
        let snapshot = {
            let mut observed = observed.lock().unwrap_or_else(|p| p.into_inner());
            match &outcome {
                Ok((head, remote)) => {
                    observed.head = Some(head.clone());
                    observed.remote = Some(remote.clone());
                    observed.last_fetch = Some(now_rfc3339());
                    observed.last_error = None;
                }
                Err(error) => observed.last_error = Some(error.to_string()),
            }
            observed.clone()
        };
        self.publish_git(key, &snapshot);
        outcome.map(|(head, _)| head)
    }

    /// A path workspace: where the policy allows its tree (symlinks resolved), and the
    /// HEAD there. The tree is used at its resolved location until the next check.
    async fn check_path(
        &self,
        key: &ObjectKey,
        declared: &Path,
        standalone: bool,
        observed: &Mutex<Observed>,
    ) -> Result<Head, GitError> {
        let board = &self.inner.board;
        let refuse = |reason, message: String| {
            let mut observed = observed.lock().unwrap_or_else(|p| p.into_inner());
            observed.head = None;
            observed.resolved = None;
            board.set_facts(key, WorkspaceStatus::default());
            board.set_check(key, Check::failed(reason, message.clone()));
            Err(GitError::Io { dir: declared.to_path_buf(), message })
        };
        let dir = match self.inner.policy.workspace_dir(declared, standalone) {
            Ok(dir) => dir,
            Err(error) => return refuse(error.reason(), error.at("spec.source.path")),
        };
        let checked = dir.clone();
        let outcome = tokio::task::spawn_blocking(move || git::head(&checked))
            .await
            .unwrap_or_else(|e| Err(GitError::Io { dir: dir.clone(), message: format!("the git task failed: {e}") }));
        match &outcome {
            Ok(head) => {
                let mut observed = observed.lock().unwrap_or_else(|p| p.into_inner());
                observed.head = Some(head.clone());
                observed.resolved = Some(dir);
                board.set_facts(key, WorkspaceStatus { head_commit: Some(head.commit.clone()), ..Default::default() });
                board.set_check(key, Check::passed(reasons::HEAD_FOUND, format!("HEAD at {}", head.commit)));
            }
            Err(error) => return refuse(reasons::NOT_A_REPOSITORY, error.to_string()),
        }
        outcome
    }

    fn publish_git(&self, key: &ObjectKey, observed: &Observed) {
        let facts = WorkspaceStatus {
            head_commit: observed.head.as_ref().map(|h| h.commit.clone()),
            last_fetch: observed.last_fetch.clone(),
            last_error: observed.last_error.clone(),
            ..Default::default()
        };
        self.inner.board.set_facts(key, facts);
        let check = match (&observed.head, &observed.last_error) {
            (Some(head), None) => {
                Check::passed(reasons::CLONED, format!("{} checked out at {}", head.reference, head.commit))
            }
            (Some(head), Some(error)) => Check::passed(
                reasons::FETCH_FAILED,
                format!("the last fetch failed, {} stays at {}: {error}", head.reference, head.commit),
            ),
            (None, error) => Check::failed(reasons::CLONE_FAILED, error.clone().unwrap_or_default()),
        };
        self.inner.board.set_check(key, check);
    }
}

fn key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey { kind: Kind::Workspace, namespace: namespace.to_string(), name: name.to_string() }
}
