//! Logs each resource problem once per change: a resource that is not `Ready` (its
//! reason and message), and a manifest that cannot be read, are logged when the
//! problem appears or its text changes, and once more when it is gone. Reloads that
//! find the same problem, and checks still under way, log nothing.

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;

use super::readiness::conditions;
use super::status::{BoardSnapshot, StatusBoard};
use crate::resources::common::{ConditionStatus, find_condition};

/// What the log says after a change of the board.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A resource is not `Ready`, newly or for another reason than logged before.
    NotReady {
        /// `kind`, `namespace`, `name`.
        object: (String, String, String),
        /// Where its newest version was read.
        source: String,
        /// The `Ready` reason.
        reason: String,
        /// The `Ready` message.
        message: String,
    },
    /// A resource logged as not `Ready` is `Ready` now.
    Ready {
        /// `kind`, `namespace`, `name`.
        object: (String, String, String),
        /// Where it was read.
        source: String,
    },
    /// A manifest (or a document of one) cannot be read, newly or differently.
    Unreadable {
        /// `file` or `file:doc-index`.
        location: String,
        /// What the loader reported (unreadable file, invalid YAML, no kind or name).
        error: String,
    },
    /// A problem logged before is gone: the file was fixed, or the object removed.
    Gone {
        /// The object (`Kind/namespace/name`) or location.
        subject: String,
        /// Where it was read.
        source: String,
    },
}

/// The problems last logged, by subject: an object where it was read (a duplicate
/// definition elsewhere is another subject), or a location.
#[derive(Default)]
pub struct ProblemLog {
    logged: BTreeMap<(String, String), String>,
}

impl ProblemLog {
    /// The notices for a new snapshot; remembers what they say.
    pub fn notices(&mut self, snapshot: &BoardSnapshot) -> Vec<Notice> {
        let mut notices = Vec::new();
        let mut current = BTreeMap::new();
        for report in &snapshot.resources {
            let subject = (report.key.to_string(), report.source.clone());
            let object = (report.key.kind.as_str().to_string(), report.key.namespace.clone(), report.key.name.clone());
            if find_condition(&report.conditions, conditions::READY).is_some_and(|c| c.status == ConditionStatus::True)
            {
                if self.logged.remove(&subject).is_some() {
                    notices.push(Notice::Ready { object, source: subject.1 });
                }
                continue;
            }
            let Some(ready) = report.problem() else {
                // A check still under way decides nothing yet: keep what was logged.
                if let Some(previous) = self.logged.remove(&subject) {
                    current.insert(subject, previous);
                }
                continue;
            };
            let text = format!("{}: {}", ready.reason, ready.message);
            if self.logged.remove(&subject).as_ref() != Some(&text) {
                notices.push(Notice::NotReady {
                    object,
                    source: subject.1.clone(),
                    reason: ready.reason.clone(),
                    message: ready.message.clone(),
                });
            }
            current.insert(subject, text);
        }
        for problem in &snapshot.problems {
            let subject = (problem.object.clone().unwrap_or_default(), problem.location.clone());
            if self.logged.remove(&subject).as_ref() != Some(&problem.error) {
                notices.push(Notice::Unreadable { location: problem.location.clone(), error: problem.error.clone() });
            }
            current.insert(subject, problem.error.clone());
        }
        for ((subject, source), _) in std::mem::replace(&mut self.logged, current) {
            let subject = if subject.is_empty() { source.clone() } else { subject };
            notices.push(Notice::Gone { subject, source });
        }
        notices
    }
}

/// Writes notices to the log: problems as warnings, their end as information.
pub fn emit(notices: &[Notice]) {
    for notice in notices {
        match notice {
            Notice::NotReady { object: (kind, namespace, name), source, reason, message } => {
                tracing::warn!(%kind, %namespace, %name, %source, %reason, error = %message, "resource not ready");
            }
            Notice::Ready { object: (kind, namespace, name), source } => {
                tracing::info!(%kind, %namespace, %name, %source, "resource ready");
            }
            Notice::Unreadable { location, error } => {
                tracing::warn!(%location, %error, "unreadable manifest");
            }
            Notice::Gone { subject, source } => {
                tracing::info!(%subject, %source, "resource problem gone");
            }
        }
    }
}

/// Logs the board's problems once per change until cancelled.
pub async fn run(board: StatusBoard, cancel: CancellationToken) {
    let mut changes = board.subscribe();
    let mut log = ProblemLog::default();
    loop {
        changes.mark_unchanged();
        emit(&log.notices(&board.get()));
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return; },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ObjectKey;
    use crate::catalog::readiness::{Check, Needs, live_check, reasons};
    use crate::catalog::status::{InForce, Problem, ResourceReport};
    use crate::resources::Kind;

    fn key() -> ObjectKey {
        ObjectKey { kind: Kind::McpAdapter, namespace: "ops".into(), name: "vm".into() }
    }

    fn report(in_force: InForce, errors: &[&str]) -> ResourceReport {
        ResourceReport {
            key: key(),
            source: "a.yaml:0".into(),
            in_force,
            conditions: Vec::new(),
            spec: None,
            errors: errors.iter().map(|e| e.to_string()).collect(),
            needs: Needs { check: live_check(Kind::McpAdapter), ..Needs::default() },
        }
    }

    fn snapshot(resources: Vec<ResourceReport>, problems: Vec<Problem>) -> BoardSnapshot {
        BoardSnapshot { resources, problems, ..BoardSnapshot::default() }
    }

    fn reasons_of(notices: &[Notice]) -> Vec<String> {
        notices
            .iter()
            .map(|n| match n {
                Notice::NotReady { reason, .. } => format!("not ready: {reason}"),
                Notice::Ready { .. } => "ready".into(),
                Notice::Unreadable { .. } => "unreadable".into(),
                Notice::Gone { subject, .. } => format!("gone: {subject}"),
            })
            .collect()
    }

    #[test]
    fn the_same_problem_is_logged_once_and_again_only_when_its_text_changes() {
        let board = StatusBoard::default();
        let mut log = ProblemLog::default();
        let invalid = |error: &str| snapshot(vec![report(InForce::None, &[error])], Vec::new());
        board.set(invalid("spec.allow: required field is missing"));
        assert_eq!(reasons_of(&log.notices(&board.get())), ["not ready: Invalid"]);
        for _ in 0..3 {
            board.set(invalid("spec.allow: required field is missing"));
            assert_eq!(log.notices(&board.get()), [], "a reload that finds the same problem");
        }
        board.set(invalid("spec.allow: must not be empty"));
        let notices = log.notices(&board.get());
        let [Notice::NotReady { message, .. }] = notices.as_slice() else { panic!("{notices:?}") };
        assert_eq!(message, "spec.allow: must not be empty");
        board.set(snapshot(Vec::new(), Vec::new()));
        assert_eq!(reasons_of(&log.notices(&board.get())), ["gone: McpAdapter/ops/vm"]);
        assert_eq!(log.notices(&board.get()), []);
    }

    #[test]
    fn checks_under_way_are_not_problems_and_a_fixed_one_is_logged_as_ready() {
        let board = StatusBoard::default();
        let mut log = ProblemLog::default();
        board.set(snapshot(vec![report(InForce::Current, &[])], Vec::new()));
        assert_eq!(log.notices(&board.get()), [], "connecting");
        board.set_check(&key(), Check::failed(reasons::COMMAND_NOT_ALLOWED, "command \"/bin/sh\" is not allowed"));
        let notices = log.notices(&board.get());
        assert_eq!(
            notices,
            [Notice::NotReady {
                object: ("McpAdapter".into(), "ops".into(), "vm".into()),
                source: "a.yaml:0".into(),
                reason: "CommandNotAllowed".into(),
                message: "command \"/bin/sh\" is not allowed".into(),
            }]
        );
        board.set_check(&key(), Check::pending(reasons::CONNECTING, "starting the session"));
        assert_eq!(log.notices(&board.get()), [], "a retry under way");
        board.set_check(&key(), Check::failed(reasons::COMMAND_NOT_ALLOWED, "command \"/bin/sh\" is not allowed"));
        assert_eq!(log.notices(&board.get()), [], "the same problem after the retry");
        board.set_check(&key(), Check::passed(reasons::CONNECTED, "1 tool"));
        assert_eq!(reasons_of(&log.notices(&board.get())), ["ready"]);
    }

    #[test]
    fn an_unreadable_manifest_is_logged_once_until_it_is_fixed() {
        let mut log = ProblemLog::default();
        let problem = Problem { location: "a.yaml:1".into(), object: None, error: "invalid YAML".into() };
        let broken = snapshot(Vec::new(), vec![problem]);
        assert_eq!(reasons_of(&log.notices(&broken)), ["unreadable"]);
        assert_eq!(log.notices(&broken), []);
        assert_eq!(reasons_of(&log.notices(&snapshot(Vec::new(), Vec::new()))), ["gone: a.yaml:1"]);
    }
}
