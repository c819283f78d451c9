//! `NotificationReceiver`: where alert investigations are delivered (webhook, Telegram,
//! Mattermost) and, for the bots, who may talk to Akritas.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::{Condition, MAX_VALUE_BYTES, SecretRef};

/// A delivery target configured by the operator. Targets never come from alerts,
/// runbooks or the model.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "akritas.io",
    version = "v1alpha1",
    kind = "NotificationReceiver",
    namespaced,
    doc = "A webhook, Telegram or Mattermost target for investigations, and bot access rules.",
    status = "NotificationReceiverStatus",
    shortname = "aknr",
    category = "akritas",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Inbound", type_ = "string", json_path = ".spec.inbound.mode"),
    printcolumn(name = "Last delivery", type_ = "string", json_path = ".status.lastDelivery.outcome"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.webhook) == (self.type == 'webhook') && has(self.telegram) == (self.type == 'telegram') && has(self.mattermost) == (self.type == 'mattermost')").message("set exactly the settings block named by type (webhook, telegram or mattermost)"))]
#[x_kube(validation = Rule::new("!has(self.inbound) || self.type != 'webhook'").message("inbound is only for telegram and mattermost receivers"))]
#[x_kube(validation = Rule::new("!has(self.inbound) || self.type != 'mattermost' || (self.inbound.mode == 'webhook' && size(self.inbound.allowedUserIds) > 0)").message("mattermost inbound needs mode webhook and a non-empty allowedUserIds"))]
pub struct NotificationReceiverSpec {
    /// Receiver type.
    #[serde(rename = "type")]
    pub type_: ReceiverType,
    /// Settings for `type: webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookReceiver>,
    /// Settings for `type: telegram`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramReceiver>,
    /// Settings for `type: mattermost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mattermost: Option<MattermostReceiver>,
    /// Inbound bot settings (Telegram or Mattermost); absent means outbound only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound: Option<InboundBot>,
}

/// Receiver types.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReceiverType {
    /// JSON POST to a URL.
    Webhook,
    /// Telegram Bot API.
    Telegram,
    /// Mattermost REST API with a bot account.
    Mattermost,
}

/// JSON POST of each finished investigation.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.url) != has(self.urlFrom)").message("set exactly one of url or urlFrom"))]
pub struct WebhookReceiver {
    /// Target URL (http or https, no credentials in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_VALUE_BYTES))]
    pub url: Option<String>,
    /// Target URL kept in a secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_from: Option<SecretRef>,
    /// Sent as `Authorization: Bearer <token>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<SecretRef>,
    /// Signs the body: `X-Akritas-Signature: sha256=<hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac_secret: Option<SecretRef>,
}

/// A Telegram chat reached through a bot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("has(self.chatId) != has(self.chatIdFrom)").message("set exactly one of chatId or chatIdFrom"))]
pub struct TelegramReceiver {
    /// Bot token.
    pub bot_token: SecretRef,
    /// Chat id (numeric or `@channel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub chat_id: Option<String>,
    /// Chat id kept in a secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_id_from: Option<SecretRef>,
    /// Forum topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub message_thread_id: Option<i64>,
    /// Bot API base URL; default `https://api.telegram.org`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub base_url: Option<String>,
}

/// A Mattermost channel reached through a bot account.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MattermostReceiver {
    /// Server URL.
    #[schemars(length(min = 1, max = 2048))]
    pub base_url: String,
    /// Bot account token (not an incoming-webhook token).
    pub bot_token: SecretRef,
    /// Channel id.
    #[schemars(length(min = 1, max = 64))]
    pub channel_id: String,
}

/// How a bot receives messages and who may use it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.mode == 'webhook' ? has(self.secret) : !has(self.secret)").message("mode webhook needs secret; mode polling must not set it"))]
#[x_kube(validation = Rule::new("size(self.allowedConversationIds) > 0 || size(self.allowedUserIds) > 0").message("set at least one of allowedConversationIds or allowedUserIds"))]
pub struct InboundBot {
    /// `webhook` (the provider calls Akritas) or `polling` (Telegram only).
    pub mode: InboundMode,
    /// Secret the provider sends with each webhook call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretRef>,
    /// Conversations (chats, channels) the bot answers in.
    #[serde(default)]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allowed_conversation_ids: Vec<String>,
    /// Users the bot answers.
    #[serde(default)]
    #[schemars(length(max = 256), inner(length(min = 1, max = 256)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub allowed_user_ids: Vec<String>,
}

/// Inbound transport of a bot.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InboundMode {
    /// The provider posts updates to Akritas.
    Webhook,
    /// Akritas long-polls the provider (Telegram).
    Polling,
}

/// Observed state of a NotificationReceiver.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationReceiverStatus {
    /// `Ready` and friends.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Outcome of the newest delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery: Option<DeliveryRecord>,
}

/// One delivery attempt.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryRecord {
    /// RFC 3339 time.
    pub time: String,
    /// `delivered` or `failed`.
    pub outcome: String,
    /// Short explanation (never a secret or a URL with credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
