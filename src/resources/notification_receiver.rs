//! `NotificationReceiver`: where alert investigations are delivered (webhook, Telegram,
//! Mattermost, Slack) and, for the bots, who may talk to Akritas.

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
    doc = "A webhook, Telegram, Mattermost or Slack target for investigations, and bot access rules.",
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
#[x_kube(validation = Rule::new("has(self.webhook) == (self.type == 'webhook') && has(self.telegram) == (self.type == 'telegram') && has(self.mattermost) == (self.type == 'mattermost') && has(self.slack) == (self.type == 'slack')").message("set exactly the settings block named by type (webhook, telegram, mattermost or slack)"))]
#[x_kube(validation = Rule::new("!has(self.inbound) || self.type != 'webhook'").message("inbound is only for telegram, mattermost and slack receivers"))]
#[x_kube(validation = Rule::new("!has(self.inbound) || self.type != 'slack' || self.inbound.mode != 'polling'").message("slack inbound takes mode webhook (the Events API, with the signing secret as inbound.secret) or socket (Socket Mode, with slack.appToken)"))]
#[x_kube(validation = Rule::new("!has(self.inbound) || self.inbound.mode != 'socket' || (self.type == 'slack' && has(self.slack.appToken))").message("inbound mode socket is Slack's Socket Mode: it needs type slack and slack.appToken"))]
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
    /// Settings for `type: slack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackReceiver>,
    /// Inbound bot settings (Telegram, Mattermost or Slack); absent means outbound only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbound: Option<InboundBot>,
    /// Which incidents this receiver is told about, and when not; absent means every
    /// incident its namespace sees, at any time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
}

/// `HH:MM`, 00:00 to 23:59.
pub const CLOCK_TIME_PATTERN: &str = "^([01][0-9]|2[0-3]):[0-5][0-9]$";
/// `+HH:MM` or `-HH:MM`, at most 14 hours.
pub const UTC_OFFSET_PATTERN: &str = "^[+-](0[0-9]|1[0-4]):[0-5][0-9]$";

/// Filters and quiet windows of a receiver. Every filter that is set must match; a
/// notification that a filter excludes, or that falls in a quiet window, is not sent
/// but recorded as `filtered` with the reason.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Routing {
    /// Alert severities (`critical`, `warning`, `info`, ...) told; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(min = 1, max = 64)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub severities: Vec<String>,
    /// Names of the AlertSources whose incidents are told; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 253)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub alert_sources: Vec<String>,
    /// Namespaces of the incidents told; empty means all the receiver sees.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(min = 1, max = 63)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,
    /// Labels every one of which the incident's alert must carry with this value.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub match_labels: std::collections::BTreeMap<String, String>,
    /// Times when nothing is sent to this receiver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub quiet_windows: Vec<QuietWindow>,
}

/// A daily stretch of time, in a fixed UTC offset, when the receiver is not notified.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuietWindow {
    /// Days the window starts on; empty means every day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 7))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub days: Vec<Weekday>,
    /// Start, `HH:MM` (inclusive).
    #[schemars(regex(pattern = CLOCK_TIME_PATTERN))]
    pub start: String,
    /// End, `HH:MM` (exclusive); earlier than `start` means the window runs past midnight.
    #[schemars(regex(pattern = CLOCK_TIME_PATTERN))]
    pub end: String,
    /// Offset from UTC the times are in, `+HH:MM` or `-HH:MM`; default `+00:00`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = UTC_OFFSET_PATTERN))]
    pub utc_offset: Option<String>,
}

/// A day of the week.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Weekday {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

/// Minutes since midnight of an `HH:MM` text.
pub fn clock_minutes(text: &str) -> Option<u16> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60).then_some(h * 60 + m)
}

/// Seconds east of UTC of a `+HH:MM` / `-HH:MM` text (at most 14 hours).
pub fn offset_seconds(text: &str) -> Option<i32> {
    let sign = match text.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let minutes = i32::from(clock_minutes(&text[1..])?);
    (minutes <= 14 * 60).then_some(sign * minutes * 60)
}

impl Routing {
    /// Problems the schema cannot express, as (field under `spec.routing`, reason).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        for (i, window) in self.quiet_windows.iter().enumerate() {
            let at = |field: &str| format!("quietWindows[{i}].{field}");
            for (field, value) in [("start", &window.start), ("end", &window.end)] {
                if clock_minutes(value).is_none() {
                    problems.push((at(field), format!("{value:?} is not a time of day; write HH:MM, 00:00 to 23:59")));
                }
            }
            if clock_minutes(&window.start).is_some() && window.start == window.end {
                problems.push((at("end"), "equals start: the window would be empty; widen it or remove it".into()));
            }
            if let Some(offset) = &window.utc_offset
                && offset_seconds(offset).is_none()
            {
                problems.push((
                    at("utcOffset"),
                    format!("{offset:?} is not a UTC offset; write +HH:MM or -HH:MM, at most 14 hours"),
                ));
            }
        }
        for key in self.match_labels.keys() {
            if key.is_empty() {
                problems.push(("matchLabels".into(), "a label name must not be empty".into()));
            }
        }
        problems
    }
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
    /// Slack Web API with a Slack app's bot token.
    Slack,
}

impl ReceiverType {
    /// The type as `spec.type` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReceiverType::Webhook => "webhook",
            ReceiverType::Telegram => "telegram",
            ReceiverType::Mattermost => "mattermost",
            ReceiverType::Slack => "slack",
        }
    }
}

impl std::fmt::Display for ReceiverType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
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

/// Slack channel and workspace ids: `C…`, `G…`, `D…`, `U…`, `T…`.
pub const SLACK_ID_PATTERN: &str = "^[A-Z0-9]{2,32}$";

/// A Slack channel reached through a Slack app's bot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SlackReceiver {
    /// The app's bot token (`xoxb-…`), for `chat.postMessage` and `auth.test`.
    pub bot_token: SecretRef,
    /// Channel id (`C…` or `G…`) incident notifications go to.
    #[schemars(regex(pattern = SLACK_ID_PATTERN))]
    pub channel_id: String,
    /// The app-level token (`xapp-…`, scope `connections:write`) for Socket Mode
    /// (`inbound.mode: socket`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_token: Option<SecretRef>,
    /// Web API base URL; default `https://slack.com/api`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub base_url: Option<String>,
}

/// How a bot receives messages and who may use it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[x_kube(validation = Rule::new("self.mode == 'webhook' ? has(self.secret) : !has(self.secret)").message("mode webhook needs secret; modes polling and socket must not set it"))]
#[x_kube(validation = Rule::new("size(self.allowedConversationIds) > 0 || size(self.allowedUserIds) > 0").message("set at least one of allowedConversationIds or allowedUserIds"))]
pub struct InboundBot {
    /// `webhook` (the provider calls Akritas), `polling` (Telegram only) or `socket` (Slack's
    /// Socket Mode: Akritas connects out).
    pub mode: InboundMode,
    /// Secret the provider sends with each webhook call (Slack: the app's signing secret).
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
    /// Akritas holds a Socket Mode WebSocket to the provider (Slack).
    Socket,
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
