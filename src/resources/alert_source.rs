//! `AlertSource`: a provider webhook (Alertmanager, Grafana, …) and how its callers authenticate.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, HEADER_NAME_PATTERN, SecretRef};

/// An alert provider that may post to `/api/v1/alerts/{namespace}/{name}/webhook` (or
/// `/api/v1/alerts/{name}/webhook` in the webhook namespace, `{namespace}.{name}` elsewhere).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "AlertSource",
    namespaced,
    doc = "An alert provider webhook (Alertmanager, Grafana, ...) and how its callers authenticate.",
    status = "AlertSourceStatus",
    shortname = "akas",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Provider", type_ = "string", json_path = ".spec.provider"),
    printcolumn(name = "Accepted", type_ = "integer", json_path = ".status.accepted"),
    printcolumn(name = "Rejected", type_ = "integer", json_path = ".status.rejected"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertSourceSpec {
    /// Payload format.
    pub provider: AlertProvider,
    /// How callers prove who they are. All configured mechanisms must pass.
    pub auth: AlertAuth,
}

/// Supported payload formats.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AlertProvider {
    /// Prometheus Alertmanager webhook (version 4).
    Alertmanager,
    /// Akritas' own generic JSON event.
    Generic,
    /// Grafana unified alerting webhook.
    Grafana,
    /// Uptime Kuma webhook.
    UptimeKuma,
    /// Pingdom webhook.
    Pingdom,
}

/// Authentication of a webhook. At least one mechanism, or an explicit opt-out.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new(
    "(has(self.bearerToken) || has(self.hmacSecret) || has(self.secretHeader)) != (has(self.allowUnauthenticated) && self.allowUnauthenticated)"
).message("configure at least one of bearerToken, hmacSecret or secretHeader, or set allowUnauthenticated: true, but not both"))]
#[x_kube(validation = Rule::new("!has(self.hmacTimestampHeader) || has(self.hmacSecret)")
    .message("hmacTimestampHeader names the timestamp an HMAC signature covers: set hmacSecret too"))]
pub struct AlertAuth {
    /// `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<SecretRef>,
    /// `X-Akritas-Signature: sha256=<hex HMAC-SHA256>` of the body, or of `{timestamp}:{body}`
    /// with `hmacTimestampHeader` (then the bare hex Grafana sends is accepted too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret: Option<SecretRef>,
    /// Header with the Unix time (seconds) the sender signed at, for example Grafana's
    /// `X-Grafana-Alerting-Timestamp`. The signature then covers `{timestamp}:{body}`; a delivery
    /// signed more than 5 minutes from the host's clock, or a signature already accepted, is
    /// refused (401), so a captured delivery cannot be replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128), regex(pattern = HEADER_NAME_PATTERN))]
    pub hmac_timestamp_header: Option<String>,
    /// A shared secret in a named header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_header: Option<SecretHeader>,
    /// Accept unauthenticated posts (only for a trusted network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_unauthenticated: Option<bool>,
}

/// How to fill in a missing `spec.auth`: its four mechanisms and a minimal example.
pub const AUTH_CHOICES: &str = "set at least one of bearerToken, hmacSecret, secretHeader (secrets a caller must \
     present), or allowUnauthenticated: true (trusted networks only), for example \
     `auth: {bearerToken: {env: ALERTMANAGER_TOKEN}}`";

/// A header that must carry a secret value.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretHeader {
    /// Header name, for example `X-Akritas-Source-Token`.
    #[schemars(length(min = 1, max = 128), regex(pattern = HEADER_NAME_PATTERN))]
    pub name: String,
    /// Expected value.
    pub value: SecretRef,
}

/// Observed state of an AlertSource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertSourceStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Path the provider posts to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_path: Option<String>,
    /// Deliveries accepted.
    #[serde(default)]
    pub accepted: u64,
    /// Deliveries recognised as duplicates.
    #[serde(default)]
    pub duplicate: u64,
    /// Deliveries rejected (authentication or payload).
    #[serde(default)]
    pub rejected: u64,
    /// Alerts the provider said it left out of its deliveries (Alertmanager's `truncatedAlerts`).
    #[serde(default)]
    pub truncated_alerts: u64,
    /// Events accepted but not stored, over the host's per-delivery bound.
    #[serde(default)]
    pub truncated_by_host: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The choices named for a missing `spec.auth` are exactly the mechanisms of `AlertAuth`
    /// (its fields but the timestamp an HMAC signature may cover).
    #[test]
    fn the_auth_choices_name_every_mechanism_of_alert_auth() {
        let auth = &crate::resources::Kind::AlertSource.schema()["properties"]["spec"]["properties"]["auth"];
        let fields: Vec<&str> = auth["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        let fields: Vec<&str> = fields.into_iter().filter(|field| *field != "hmacTimestampHeader").collect();
        assert_eq!(fields.len(), 4, "{fields:?}");
        for field in fields {
            assert!(AUTH_CHOICES.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| word == field), "{field}");
        }
    }
}
