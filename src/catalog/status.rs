//! Per-object outcomes of loading resources, what live components observed about
//! each object, and the conditions derived from both. The board is the one place
//! conditions are derived: standalone mode serves them at `/api/v1/resources`, the
//! operator writes the same ones into each object's status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use serde::Serialize;
use serde_json::{Map, Value};

use super::ObjectKey;
use super::facts::{Facts, KindFacts};
use super::readiness::{Check, CheckState, Needs, conditions, reasons};
use crate::resources::Kind;
use crate::resources::common::{Condition, ConditionStatus, find_condition, now_rfc3339, set_condition};
use crate::text::{ELLIPSIS, truncate_chars};

/// Longest condition message (the full list of problems is in the report's errors).
pub const MAX_MESSAGE_CHARS: usize = 1024;

/// Which version of an object is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum InForce {
    /// The version on disk.
    Current,
    /// An earlier good version; the one on disk is invalid.
    Previous,
    /// None: the object has never been valid.
    None,
}

/// The outcome for one object.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceReport {
    /// Kind, namespace and name; flattened, so they are top-level fields of the report's JSON.
    #[serde(flatten)]
    pub key: ObjectKey,
    /// Where the newest version was read (`file:doc-index`).
    pub source: String,
    /// Which version is in force.
    pub in_force: InForce,
    /// `Ready` and the conditions it is derived from, kept up to date by the
    /// [`StatusBoard`] (empty until the report is on a board).
    pub conditions: Vec<Condition>,
    /// Spec of the version in force (secrets appear only as references).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<Value>,
    /// Every problem of the newest version (absent when there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(default)]
    pub errors: Vec<String>,
    /// What must be observed about the version in force before it is `Ready`.
    #[serde(skip)]
    pub needs: Needs,
}

impl ResourceReport {
    /// The `Ready` condition when the object does not work for a known reason: `None`
    /// when it is `Ready`, and while the check that decides it is still under way.
    pub fn problem(&self) -> Option<&Condition> {
        let ready = find_condition(&self.conditions, conditions::READY)?;
        let pending = self
            .conditions
            .iter()
            .any(|c| c.type_ != conditions::READY && c.status == ConditionStatus::Unknown && c.reason == ready.reason);
        (ready.status != ConditionStatus::True && !pending).then_some(ready)
    }
}

/// A problem that cannot be attributed to a named object (unreadable file,
/// document without kind or name).
#[derive(Clone, Debug, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Problem {
    /// `file` or `file:doc-index`.
    pub location: String,
    /// What could be read of the identity (`kind/name`), if anything.
    pub object: Option<String>,
    /// The problem.
    pub error: String,
}

/// Everything the last load reported.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BoardSnapshot {
    /// Catalog version after the load.
    pub catalog_version: u64,
    /// RFC 3339 time of the load.
    pub loaded_at: String,
    /// One report per object.
    pub resources: Vec<ResourceReport>,
    /// Problems not tied to an object.
    pub problems: Vec<Problem>,
}

/// What live components observed about one object.
#[derive(Clone, Debug, Default, PartialEq)]
struct Observed {
    /// Facts shown in its status (tools, content hash, head commit, index size, …).
    facts: Option<Facts>,
    /// Whether its secret references resolve (`None`: not resolved yet); why not.
    secrets: Option<Result<(), (&'static str, String)>>,
    /// The outcome of its live check (`None`: none reported yet).
    check: Option<Check>,
    /// The state of its connection to its provider (`None`: no `Connected` condition).
    connection: Option<Check>,
    /// Whether it is suspended (`None`: no `Suspended` condition).
    suspended: Option<bool>,
}

#[derive(Default)]
struct Board {
    snapshot: Arc<BoardSnapshot>,
    observed: BTreeMap<ObjectKey, Observed>,
}

/// Shared, replaceable view of the latest load outcome and of what live components
/// observed about each object; every report's conditions are derived from both.
#[derive(Clone, Default)]
pub struct StatusBoard {
    inner: Arc<RwLock<Board>>,
    write_failures: Arc<Mutex<BTreeMap<Kind, u64>>>,
    /// Moves whenever a snapshot is set or a condition may have changed.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl StatusBoard {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Board> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Board> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the snapshot; conditions whose status did not change keep their
    /// transition time.
    pub fn set(&self, mut snapshot: BoardSnapshot) {
        let mut board = self.write();
        let mut previous: BTreeMap<&ObjectKey, &Vec<Condition>> = BTreeMap::new();
        for report in &board.snapshot.resources {
            previous.entry(&report.key).or_insert(&report.conditions);
        }
        for report in &mut snapshot.resources {
            report.conditions = previous.get(&report.key).map(|c| (*c).clone()).unwrap_or_default();
            refresh(report, board.observed.get(&report.key));
        }
        board.snapshot = Arc::new(snapshot);
        drop(board);
        self.changed();
    }

    /// A receiver that sees every change of the snapshot or of its conditions.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|count| *count = count.wrapping_add(1));
    }

    /// The latest snapshot.
    pub fn get(&self) -> Arc<BoardSnapshot> {
        self.read().snapshot.clone()
    }

    /// Changes what is observed about an object and derives its conditions again.
    fn observe(&self, key: &ObjectKey, change: impl FnOnce(&mut Observed)) {
        let mut board = self.write();
        let Board { snapshot, observed } = &mut *board;
        let entry = observed.entry(key.clone()).or_default();
        let before = entry.clone();
        change(entry);
        if before == *entry {
            return;
        }
        let entry = observed.get(key);
        for report in Arc::make_mut(snapshot).resources.iter_mut().filter(|r| &r.key == key) {
            refresh(report, entry);
        }
        drop(board);
        self.changed();
    }

    /// Replaces the facts a live component observed about an object (its `status`
    /// fields: tools, index size, …), typed by the object's kind.
    pub fn set_facts<F: KindFacts>(&self, key: &ObjectKey, facts: F) {
        debug_assert_eq!(key.kind, F::KIND, "{key}: facts of another kind");
        self.observe(key, |observed| observed.facts = Some(facts.wrap()));
    }

    /// Changes some of an object's facts, keeping the others (several components report
    /// facts about the same object).
    pub fn update_facts<F: KindFacts>(&self, key: &ObjectKey, change: impl FnOnce(&mut F)) {
        debug_assert_eq!(key.kind, F::KIND, "{key}: facts of another kind");
        self.observe(key, |observed| {
            let mut facts = observed.facts.as_ref().and_then(F::of).cloned().unwrap_or_default();
            change(&mut facts);
            observed.facts = Some(facts.wrap());
        });
    }

    /// Records whether the object's secret references resolve (`None`: it has none);
    /// a failure carries its reason (one of [`reasons`]) and message.
    pub fn set_secrets(&self, key: &ObjectKey, outcome: Option<Result<(), (&'static str, String)>>) {
        self.observe(key, |observed| observed.secrets = outcome);
    }

    /// Records the outcome of the object's live check.
    pub fn set_check(&self, key: &ObjectKey, check: Check) {
        self.observe(key, |observed| observed.check = Some(check));
    }

    /// Records the state of the object's connection to its provider (a Slack receiver's
    /// Socket Mode WebSocket, or its bot token's `auth.test`), shown as the `Connected`
    /// condition that `Ready` then depends on; `None` removes the condition.
    pub fn set_connection(&self, key: &ObjectKey, connection: Option<Check>) {
        self.observe(key, |observed| observed.connection = connection);
    }

    /// Records whether a RunSchedule is suspended, shown as the `Suspended` condition (which
    /// `Ready` does not depend on); `None` removes the condition.
    pub fn set_suspended(&self, key: &ObjectKey, suspended: Option<bool>) {
        self.observe(key, |observed| observed.suspended = suspended);
    }

    /// Forgets what was observed about objects no longer present.
    pub fn retain_observed(&self, keep: impl Fn(&ObjectKey) -> bool) {
        self.write().observed.retain(|key, _| keep(key));
    }

    /// The facts observed about one object, as its status shows them (no conditions).
    pub fn facts(&self, key: &ObjectKey) -> Option<Map<String, Value>> {
        self.read().observed.get(key)?.facts.as_ref().map(Facts::to_map)
    }

    /// The facts observed about one object, typed.
    pub fn facts_of<F: KindFacts>(&self, key: &ObjectKey) -> Option<F> {
        self.read().observed.get(key)?.facts.as_ref().and_then(F::of).cloned()
    }

    /// Counts a status write that failed (operator mode), by kind.
    pub fn count_write_failure(&self, kind: Kind) {
        *self.write_failures.lock().unwrap_or_else(|p| p.into_inner()).entry(kind).or_default() += 1;
    }

    /// Failed status writes since start, for every kind (zero included).
    pub fn write_failures(&self) -> Vec<(Kind, u64)> {
        let counts = self.write_failures.lock().unwrap_or_else(|p| p.into_inner());
        Kind::ALL.iter().map(|kind| (*kind, counts.get(kind).copied().unwrap_or(0))).collect()
    }
}

/// Derives a report's conditions again, keeping the transition time of those whose
/// status did not change.
fn refresh(report: &mut ResourceReport, observed: Option<&Observed>) {
    let derived = derive(report, observed);
    report.conditions.retain(|old| derived.iter().any(|new| new.type_ == old.type_));
    for mut condition in derived {
        condition.message = truncate_chars(&condition.message, MAX_MESSAGE_CHARS, ELLIPSIS);
        set_condition(&mut report.conditions, condition);
    }
}

/// `Ready` first, then the conditions it depends on: `SecretsResolved` when the
/// object has secret references, and its kind's live check.
fn derive(report: &ResourceReport, observed: Option<&Observed>) -> Vec<Condition> {
    let mut parts = Vec::new();
    if report.needs.secrets {
        parts.push(match observed.and_then(|o| o.secrets.as_ref()) {
            Some(Ok(())) => condition(
                conditions::SECRETS_RESOLVED,
                ConditionStatus::True,
                reasons::SECRETS_RESOLVED,
                "every secret reference resolves",
            ),
            Some(Err((reason, error))) => {
                condition(conditions::SECRETS_RESOLVED, ConditionStatus::False, reason, error)
            }
            None => condition(
                conditions::SECRETS_RESOLVED,
                ConditionStatus::Unknown,
                reasons::RESOLVING,
                "the secret references have not been resolved yet",
            ),
        });
    }
    if let Some(live) = report.needs.check {
        parts.push(match observed.and_then(|o| o.check.as_ref()) {
            Some(check) => check_condition(live.condition, check),
            None => condition(live.condition, ConditionStatus::Unknown, live.pending, "not checked yet"),
        });
    }
    if let Some(connection) = observed.and_then(|o| o.connection.as_ref()) {
        parts.push(check_condition(conditions::CONNECTED, connection));
    }
    let errors = report.errors.join("; ");
    let ready = match report.in_force {
        InForce::None => Condition::ready(false, reasons::INVALID, errors, None),
        InForce::Previous => Condition::ready(
            false,
            reasons::INVALID,
            format!("{errors}; the previous valid version stays in force"),
            None,
        ),
        InForce::Current => {
            match (parts.iter().find(|c| c.status != ConditionStatus::True), report.needs.unavailable) {
                (Some(blocking), _) => Condition::ready(false, &blocking.reason, blocking.message.clone(), None),
                (None, Some(missing)) => Condition::ready(false, reasons::NOT_AVAILABLE, missing, None),
                (None, None) => Condition::ready(true, reasons::READY, format!("loaded from {}", report.source), None),
            }
        }
    };
    let suspended = observed.and_then(|o| o.suspended).map(|suspended| match suspended {
        true => condition(conditions::SUSPENDED, ConditionStatus::True, reasons::SUSPENDED, "no tick runs"),
        false => condition(conditions::SUSPENDED, ConditionStatus::False, reasons::ACTIVE, "ticks run"),
    });
    std::iter::once(ready).chain(parts).chain(suspended).collect()
}

fn check_condition(type_: &str, check: &Check) -> Condition {
    let status = match check.state {
        CheckState::Passed => ConditionStatus::True,
        CheckState::Failed => ConditionStatus::False,
        CheckState::Pending => ConditionStatus::Unknown,
    };
    condition(type_, status, check.reason, &check.message)
}

fn condition(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: now_rfc3339(),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::readiness::live_check;
    use crate::resources::common::{find_condition, is_ready};

    fn key(kind: Kind) -> ObjectKey {
        ObjectKey { kind, namespace: "ops".into(), name: "x".into() }
    }

    fn board_with(kind: Kind, needs: Needs) -> StatusBoard {
        let board = StatusBoard::default();
        board.set(BoardSnapshot {
            resources: vec![ResourceReport {
                key: key(kind),
                source: "x.yaml:0".into(),
                in_force: InForce::Current,
                conditions: Vec::new(),
                spec: None,
                errors: Vec::new(),
                needs,
            }],
            ..BoardSnapshot::default()
        });
        board
    }

    fn ready(board: &StatusBoard) -> (ConditionStatus, String, String) {
        let snapshot = board.get();
        let ready = find_condition(&snapshot.resources[0].conditions, conditions::READY).unwrap();
        (ready.status, ready.reason.clone(), ready.message.clone())
    }

    #[test]
    fn an_object_without_needs_is_ready_once_valid() {
        let board = board_with(Kind::Skill, Needs::default());
        assert_eq!(ready(&board), (ConditionStatus::True, "Ready".into(), "loaded from x.yaml:0".into()));
        assert_eq!(board.get().resources[0].conditions.len(), 1);
    }

    #[test]
    fn unresolved_secrets_make_it_not_ready_until_they_resolve() {
        let board = board_with(Kind::AlertSource, Needs { secrets: true, ..Needs::default() });
        assert_eq!(ready(&board).1, reasons::RESOLVING);
        let key = key(Kind::AlertSource);
        board.set_secrets(
            &key,
            Some(Err((
                reasons::SECRETS_UNRESOLVED,
                "spec.auth.bearerToken: environment variable AKRITAS_X is not set".into(),
            ))),
        );
        let (status, reason, message) = ready(&board);
        assert_eq!((status, reason.as_str()), (ConditionStatus::False, reasons::SECRETS_UNRESOLVED));
        assert!(message.contains("AKRITAS_X"), "{message}");
        let snapshot = board.get();
        let secrets = find_condition(&snapshot.resources[0].conditions, conditions::SECRETS_RESOLVED).unwrap();
        assert_eq!(secrets.status, ConditionStatus::False);
        board.set_secrets(&key, Some(Ok(())));
        assert!(is_ready(&board.get().resources[0].conditions));
    }

    #[test]
    fn what_this_version_does_not_do_is_never_ready() {
        const UNAVAILABLE: &str = "something this version does not do";
        let needs =
            Needs { check: live_check(Kind::ValidatorProfile), unavailable: Some(UNAVAILABLE), ..Needs::default() };
        let board = board_with(Kind::ValidatorProfile, needs);
        assert_eq!(ready(&board).1, reasons::CHECKING, "a pending check comes first");
        board.set_check(&key(Kind::ValidatorProfile), Check::passed(reasons::PROGRAM_FOUND, "yamllint 1.29"));
        let (status, reason, message) = ready(&board);
        assert_eq!(
            (status, reason.as_str(), message.as_str()),
            (ConditionStatus::False, reasons::NOT_AVAILABLE, UNAVAILABLE)
        );
        let snapshot = board.get();
        let found = find_condition(&snapshot.resources[0].conditions, conditions::PROGRAM_FOUND).unwrap();
        assert_eq!(found.status, ConditionStatus::True, "the check itself still says what it found");
    }

    #[test]
    fn a_live_check_decides_readiness_from_pending_to_passed_or_failed() {
        let board = board_with(Kind::McpAdapter, Needs { check: live_check(Kind::McpAdapter), ..Needs::default() });
        assert_eq!(ready(&board).1, reasons::CONNECTING, "no outcome yet");
        let key = key(Kind::McpAdapter);
        board.set_check(&key, Check::pending(reasons::CONNECTING, "starting the session"));
        assert_eq!(ready(&board).0, ConditionStatus::False);
        board.set_check(&key, Check::passed(reasons::CONNECTED, "5 tools, 5 authorized"));
        assert_eq!(ready(&board).0, ConditionStatus::True);
        let snapshot = board.get();
        let connected = find_condition(&snapshot.resources[0].conditions, conditions::CONNECTED).unwrap();
        assert_eq!((connected.status, connected.reason.as_str()), (ConditionStatus::True, reasons::CONNECTED));
        board.set_check(&key, Check::failed(reasons::NOT_CONNECTED, "connection refused"));
        assert_eq!(ready(&board), (ConditionStatus::False, reasons::NOT_CONNECTED.into(), "connection refused".into()));
    }

    #[test]
    fn a_missing_workspace_path_is_not_ready() {
        let board = board_with(Kind::Workspace, Needs { check: live_check(Kind::Workspace), ..Needs::default() });
        board.set_check(&key(Kind::Workspace), Check::failed(reasons::PATH_NOT_FOUND, "/srv/w does not exist"));
        assert_eq!(
            ready(&board),
            (ConditionStatus::False, reasons::PATH_NOT_FOUND.into(), "/srv/w does not exist".into())
        );
    }

    #[test]
    fn an_invalid_version_is_not_ready_whatever_was_observed() {
        let board = StatusBoard::default();
        board.set(BoardSnapshot {
            resources: vec![ResourceReport {
                key: key(Kind::Skill),
                source: "x.yaml:0".into(),
                in_force: InForce::Previous,
                conditions: Vec::new(),
                spec: None,
                errors: vec!["spec.description: required".into()],
                needs: Needs::default(),
            }],
            ..BoardSnapshot::default()
        });
        let (status, reason, message) = ready(&board);
        assert_eq!((status, reason.as_str()), (ConditionStatus::False, reasons::INVALID));
        assert!(message.ends_with("the previous valid version stays in force"), "{message}");
    }

    #[test]
    fn transition_times_move_only_when_a_status_changes() {
        let board = board_with(Kind::McpAdapter, Needs { check: live_check(Kind::McpAdapter), ..Needs::default() });
        let mut report = board.get().resources[0].clone();
        for condition in &mut report.conditions {
            condition.last_transition_time = "2026-01-01T00:00:00Z".into();
        }
        let mut observed =
            Observed { check: Some(Check::pending(reasons::CONNECTING, "starting")), ..Observed::default() };
        refresh(&mut report, Some(&observed));
        assert!(report.conditions.iter().all(|c| c.last_transition_time == "2026-01-01T00:00:00Z"));
        observed.check = Some(Check::passed(reasons::CONNECTED, "up"));
        refresh(&mut report, Some(&observed));
        assert!(report.conditions.iter().all(|c| c.last_transition_time != "2026-01-01T00:00:00Z"));

        // A reload keeps the conditions of the same object.
        let before = board.get().resources[0].conditions.clone();
        board.set(BoardSnapshot {
            resources: vec![ResourceReport { conditions: Vec::new(), ..board.get().resources[0].clone() }],
            ..BoardSnapshot::default()
        });
        assert_eq!(board.get().resources[0].conditions, before);
    }

    #[test]
    fn facts_are_kept_apart_from_conditions() {
        use crate::resources::alert_source::AlertSourceStatus;
        let board = board_with(Kind::AlertSource, Needs::default());
        let key = key(Kind::AlertSource);
        board.update_facts(&key, |s: &mut AlertSourceStatus| s.accepted = 1);
        board.update_facts(&key, |s: &mut AlertSourceStatus| s.rejected = 2);
        let shown = board.facts(&key).map(Value::Object).unwrap();
        assert_eq!((shown["accepted"].clone(), shown["rejected"].clone()), (1.into(), 2.into()));
        assert!(shown.get("conditions").is_none(), "{shown}");
        assert_eq!(board.facts_of::<AlertSourceStatus>(&key).map(|s| s.accepted), Some(1));
        board.retain_observed(|_| false);
        assert_eq!(board.facts(&key), None);
        board.count_write_failure(Kind::Run);
        assert!(board.write_failures().contains(&(Kind::Run, 1)));
        assert!(board.write_failures().contains(&(Kind::Skill, 0)));
    }

    #[test]
    fn a_connection_adds_connected_and_ready_follows_it() {
        let board = board_with(
            Kind::NotificationReceiver,
            Needs { check: live_check(Kind::NotificationReceiver), ..Needs::default() },
        );
        let key = key(Kind::NotificationReceiver);
        board.set_check(&key, Check::passed(reasons::EGRESS_ALLOWED, "reachable"));
        assert_eq!(ready(&board).0, ConditionStatus::True);
        board.set_connection(&key, Some(Check::failed(reasons::NOT_CONNECTED, "apps.connections.open: invalid_auth")));
        assert_eq!(
            ready(&board),
            (ConditionStatus::False, reasons::NOT_CONNECTED.into(), "apps.connections.open: invalid_auth".into())
        );
        board.set_connection(&key, Some(Check::passed(reasons::CONNECTED, "Socket Mode connection open")));
        let snapshot = board.get();
        let connected = find_condition(&snapshot.resources[0].conditions, conditions::CONNECTED).unwrap();
        assert_eq!(connected.status, ConditionStatus::True);
        assert_eq!(ready(&board).0, ConditionStatus::True);
        board.set_connection(&key, None);
        assert!(find_condition(&board.get().resources[0].conditions, conditions::CONNECTED).is_none());
    }
}
