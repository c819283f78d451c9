//! What live components observed about an object, typed by its kind: the fields of the
//! kind's status struct in `resources/` (the same struct the CRD's status schema is generated
//! from), never its conditions, which the [`super::status::StatusBoard`] derives. A fact
//! the CRD does not declare cannot be written, so none is dropped by the API server.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::resources::Kind;
use crate::resources::alert_source::AlertSourceStatus;
use crate::resources::knowledge_base::KnowledgeBaseStatus;
use crate::resources::mcp_adapter::McpAdapterStatus;
use crate::resources::notification_receiver::NotificationReceiverStatus;
use crate::resources::run_schedule::RunScheduleStatus;
use crate::resources::skill::SkillStatus;
use crate::resources::validator_profile::ValidatorProfileStatus;
use crate::resources::workspace::WorkspaceStatus;

/// The facts of one object, of its kind. One per object on the board, so the size
/// difference between kinds (a RunSchedule's result is the largest) costs little.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Facts {
    McpAdapter(McpAdapterStatus),
    KnowledgeBase(KnowledgeBaseStatus),
    Workspace(WorkspaceStatus),
    AlertSource(AlertSourceStatus),
    NotificationReceiver(NotificationReceiverStatus),
    Skill(SkillStatus),
    ValidatorProfile(ValidatorProfileStatus),
    RunSchedule(RunScheduleStatus),
}

/// A kind's status struct as facts about an object of that kind.
pub trait KindFacts: Clone + Default + Serialize + Sized {
    /// The kind whose status this is.
    const KIND: Kind;
    /// These facts, as the board keeps them.
    fn wrap(self) -> Facts;
    /// The facts, when they are this kind's.
    fn of(facts: &Facts) -> Option<&Self>;
    /// The facts, when they are this kind's, to change.
    fn of_mut(facts: &mut Facts) -> Option<&mut Self>;
}

macro_rules! kind_facts {
    ($($kind:ident: $status:ty),* $(,)?) => {
        $(impl KindFacts for $status {
            const KIND: Kind = Kind::$kind;
            fn wrap(self) -> Facts {
                Facts::$kind(self)
            }
            fn of(facts: &Facts) -> Option<&Self> {
                match facts {
                    Facts::$kind(status) => Some(status),
                    _ => None,
                }
            }
            fn of_mut(facts: &mut Facts) -> Option<&mut Self> {
                match facts {
                    Facts::$kind(status) => Some(status),
                    _ => None,
                }
            }
        })*

        impl Facts {
            /// The kind these facts are about.
            pub fn kind(&self) -> Kind {
                match self {
                    $(Facts::$kind(_) => Kind::$kind,)*
                }
            }

            /// The facts as the object's status shows them: its camelCase fields without
            /// `conditions`.
            pub fn to_map(&self) -> Map<String, Value> {
                let value = match self {
                    $(Facts::$kind(status) => serde_json::to_value(status),)*
                };
                let mut map = match value {
                    Ok(Value::Object(map)) => map,
                    _ => Map::new(),
                };
                map.remove("conditions");
                map
            }
        }

        /// The kinds that have facts, with their status schema (for the drift test).
        #[cfg(test)]
        fn typed_kinds() -> Vec<(Kind, Value)> {
            vec![$((Kind::$kind, serde_json::to_value(schemars::schema_for!($status)).unwrap()),)*]
        }
    };
}

kind_facts! {
    McpAdapter: McpAdapterStatus,
    KnowledgeBase: KnowledgeBaseStatus,
    Workspace: WorkspaceStatus,
    AlertSource: AlertSourceStatus,
    NotificationReceiver: NotificationReceiverStatus,
    Skill: SkillStatus,
    ValidatorProfile: ValidatorProfileStatus,
    RunSchedule: RunScheduleStatus,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every field of every declared kind's CRD status is a field of the typed status the
    /// board holds for that kind, and the other way round: a status field has a typed source.
    #[test]
    fn every_crd_status_field_has_a_typed_source() {
        let typed = typed_kinds();
        for kind in Kind::ALL {
            let crd = kind.schema();
            let declared: BTreeSet<String> = crd["properties"]["status"]["properties"]
                .as_object()
                .map(|p| p.keys().filter(|k| *k != "conditions").cloned().collect())
                .unwrap_or_default();
            match typed.iter().find(|(k, _)| k == kind) {
                Some((_, schema)) => {
                    let fields: BTreeSet<String> = schema["properties"]
                        .as_object()
                        .unwrap()
                        .keys()
                        .filter(|k| *k != "conditions")
                        .cloned()
                        .collect();
                    assert_eq!(declared, fields, "{kind:?}: the CRD status and the typed facts differ");
                }
                // Runs and Incidents are projections of the journals, not facts on the board.
                None => assert!(
                    matches!(kind, Kind::Run | Kind::Incident),
                    "{kind:?} has status fields {declared:?} but no typed facts"
                ),
            }
        }
    }

    #[test]
    fn facts_show_their_fields_without_conditions() {
        let facts = WorkspaceStatus { head_commit: Some("abc".into()), ..Default::default() }.wrap();
        assert_eq!(facts.kind(), Kind::Workspace);
        assert_eq!(Value::Object(facts.to_map()), serde_json::json!({"headCommit": "abc"}));
        assert!(SkillStatus::of(&facts).is_none());
    }
}
