//! The Akritas custom resources (group `akritas.io`, version `v1alpha1`), their
//! generated CRDs and the validation every resource source runs.

// kube-derive's repeated `printcolumn(...)` arguments look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

pub(crate) mod alert_source;
pub(crate) mod common;
pub(crate) mod field_error;
pub(crate) mod incident;
pub(crate) mod knowledge_base;
pub mod mcp_adapter;
pub mod notification_receiver;
pub(crate) mod run;
pub mod run_schedule;
pub(crate) mod schema_check;
pub(crate) mod semantic;
pub(crate) mod skill;
pub mod validate;
pub(crate) mod validator_profile;
pub mod workspace;

use std::sync::OnceLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use kube::core::ObjectMeta;
use serde_json::Value;

pub(crate) use alert_source::AlertSource;
pub(crate) use incident::Incident;
pub(crate) use knowledge_base::KnowledgeBase;
pub(crate) use mcp_adapter::McpAdapter;
pub(crate) use notification_receiver::NotificationReceiver;
pub(crate) use run::Run;
pub(crate) use run_schedule::RunSchedule;
pub(crate) use skill::Skill;
pub(crate) use validator_profile::ValidatorProfile;
pub(crate) use workspace::Workspace;

/// API group of every Akritas resource.
pub const GROUP: &str = "akritas.io";
/// The one served version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Akritas resource.
pub const API_VERSION: &str = "akritas.io/v1alpha1";

macro_rules! kinds {
    ($($kind:ident),* $(,)?) => {
        /// Every resource kind.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Kind { $($kind),* }

        impl Kind {
            /// All kinds, in declaration order.
            pub const ALL: &'static [Kind] = &[$(Kind::$kind),*];

            /// The `kind` string.
            pub fn as_str(self) -> &'static str {
                match self { $(Kind::$kind => stringify!($kind)),* }
            }

            /// Parses a `kind` string (exact case, as Kubernetes does).
            pub fn parse(kind: &str) -> Option<Kind> {
                match kind { $(stringify!($kind) => Some(Kind::$kind),)* _ => None }
            }

            /// The generated CustomResourceDefinition.
            pub fn crd(self) -> CustomResourceDefinition {
                match self { $(Kind::$kind => $kind::crd()),* }
            }

            /// Lower-case plural, as in the CRD name.
            pub fn plural(self) -> String {
                match self { $(Kind::$kind => <$kind as kube::Resource>::plural(&()).into_owned()),* }
            }
        }

        /// Serialized as its `kind` string.
        impl schemars::JsonSchema for Kind {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                "Kind".into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({"type": "string", "enum": [$(stringify!($kind)),*]})
            }
        }

        /// A validated resource of any kind. Held behind `Arc` in the Catalog, so the
        /// size difference between kinds costs nothing.
        #[allow(clippy::large_enum_variant)]
        #[derive(Clone, Debug)]
        pub enum Resource { $($kind($kind)),* }

        impl Resource {
            /// Its kind.
            pub fn kind(&self) -> Kind {
                match self { $(Resource::$kind(_) => Kind::$kind),* }
            }

            /// Its metadata.
            pub fn metadata(&self) -> &ObjectMeta {
                match self { $(Resource::$kind(r) => &r.metadata),* }
            }

            /// Serialized form (status omitted when empty).
            pub fn to_value(&self) -> Value {
                match self { $(Resource::$kind(r) => serde_json::to_value(r).unwrap_or(Value::Null)),* }
            }

            pub(crate) fn from_value(kind: Kind, value: Value) -> Result<Resource, serde_path_to_error::Error<serde_json::Error>> {
                match kind { $(Kind::$kind => serde_path_to_error::deserialize(value).map(Resource::$kind)),* }
            }
        }
    };
}

kinds!(
    Skill,
    McpAdapter,
    Workspace,
    ValidatorProfile,
    NotificationReceiver,
    AlertSource,
    KnowledgeBase,
    RunSchedule,
    Run,
    Incident
);

impl Kind {
    /// Whether operators declare it (as opposed to the host writing it).
    pub fn is_declared(self) -> bool {
        !matches!(self, Kind::Run | Kind::Incident)
    }

    /// The `openAPIV3Schema` of the CRD, computed once.
    pub fn schema(self) -> &'static Value {
        static SCHEMAS: OnceLock<Vec<Value>> = OnceLock::new();
        let all = SCHEMAS.get_or_init(|| {
            Kind::ALL
                .iter()
                .map(|k| {
                    let crd = crd_for(*k);
                    crd.spec
                        .versions
                        .first()
                        .and_then(|v| v.schema.as_ref())
                        .and_then(|s| s.open_api_v3_schema.as_ref())
                        .and_then(|s| serde_json::to_value(s).ok())
                        .unwrap_or(Value::Null)
                })
                .collect()
        });
        let index = Kind::ALL.iter().position(|k| *k == self).unwrap_or(0);
        &all[index]
    }
}

/// The CRD of a kind as Akritas publishes it.
pub fn crd_for(kind: Kind) -> CustomResourceDefinition {
    kind.crd()
}

/// Every CRD, in a stable order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    Kind::ALL.iter().map(|k| crd_for(*k)).collect()
}

/// File name of a kind's CRD under `crds/`.
pub fn crd_file_name(kind: Kind) -> String {
    format!("{}.{}.yaml", kind.plural(), GROUP)
}
