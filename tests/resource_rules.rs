//! Every validation rule of the resource kinds, through the one pipeline all
//! sources use (`parse_manifest`).

use akritas::resources::validate::parse_manifest;
use serde_json::{Value, json};

fn manifest(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "akritas.io/v1alpha1", "kind": kind, "metadata": {"name": "x", "namespace": "ops"}, "spec": spec})
}

fn errors(kind: &str, spec: Value) -> Vec<String> {
    match parse_manifest(manifest(kind, spec)) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[track_caller]
fn assert_rejected(kind: &str, spec: Value, expected: &str) {
    let got = errors(kind, spec);
    assert!(got.iter().any(|e| e == expected), "expected {expected:?}, got {got:?}");
}

#[track_caller]
fn assert_accepted(kind: &str, spec: Value) {
    let got = errors(kind, spec);
    assert!(got.is_empty(), "expected no errors, got {got:?}");
}

fn env(name: &str) -> Value {
    json!({"env": name})
}

#[test]
fn secret_references_need_exactly_one_source() {
    let auth = |token: Value| json!({"provider": "alertmanager", "auth": {"bearerToken": token}});
    assert_accepted("AlertSource", auth(env("TOKEN")));
    assert_accepted("AlertSource", auth(json!({"secretKeyRef": {"name": "am", "key": "token"}})));
    assert_rejected("AlertSource", auth(json!({})), "spec.auth.bearerToken: set exactly one of env or secretKeyRef");
    assert_rejected(
        "AlertSource",
        auth(json!({"env": "T", "secretKeyRef": {"name": "am", "key": "token"}})),
        "spec.auth.bearerToken: set exactly one of env or secretKeyRef",
    );
    assert_rejected(
        "AlertSource",
        auth(env("1BAD")),
        "spec.auth.bearerToken.env: \"1BAD\" does not match the pattern ^[A-Za-z_][A-Za-z0-9_]*$",
    );
}

#[test]
fn alert_sources_need_auth_or_an_explicit_opt_out() {
    let rule = "spec.auth: configure at least one of bearerToken, hmacSecret or secretHeader, or set allowUnauthenticated: true, but not both";
    assert_rejected("AlertSource", json!({"provider": "generic", "auth": {}}), rule);
    assert_rejected(
        "AlertSource",
        json!({"provider": "generic"}),
        "spec.auth: required field is missing; set at least one of bearerToken, hmacSecret, secretHeader \
         (secrets a caller must present), or allowUnauthenticated: true (trusted networks only), for example \
         `auth: {bearerToken: {env: ALERTMANAGER_TOKEN}}`",
    );
    // The example is itself accepted.
    assert_accepted(
        "AlertSource",
        json!({"provider": "generic", "auth": {"bearerToken": {"env": "ALERTMANAGER_TOKEN"}}}),
    );
    assert_rejected(
        "AlertSource",
        json!({"provider": "generic", "auth": {"allowUnauthenticated": true, "hmacSecret": env("H")}}),
        rule,
    );
    assert_accepted("AlertSource", json!({"provider": "grafana", "auth": {"allowUnauthenticated": true}}));
    assert_accepted(
        "AlertSource",
        json!({"provider": "uptime-kuma", "auth": {"secretHeader": {"name": "X-Akritas-Source-Token", "value": env("T")}}}),
    );
    assert_rejected(
        "AlertSource",
        json!({"provider": "nagios", "auth": {"allowUnauthenticated": true}}),
        "spec.provider: unsupported value \"nagios\"; expected one of: alertmanager, generic, grafana, uptime-kuma, pingdom",
    );
}

#[test]
fn mcp_adapters_need_one_transport_and_valid_names() {
    let stdio = json!({"stdio": {"command": "server", "env": [{"name": "A", "value": "1"}]}});
    assert_accepted("McpAdapter", json!({"transport": stdio, "allow": ["read"]}));
    assert_rejected(
        "McpAdapter",
        json!({"transport": {"stdio": {"command": "s"}, "http": {"url": "http://mcp:8000/mcp"}}, "allow": ["read"]}),
        "spec.transport: set exactly one of stdio or http",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": {}, "allow": ["read"]}),
        "spec.transport: set exactly one of stdio or http",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": stdio, "allow": []}),
        "spec.allow: must have at least 1 items, got 0",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": stdio, "allow": ["read", "read"]}),
        "spec.allow[1]: duplicate value \"read\"",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": stdio, "allow": ["admin"]}),
        "spec.allow[0]: unsupported value \"admin\"; expected one of: read, write, dangerous",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": {"stdio": {"command": "s", "env": [{"name": "A", "value": "1", "valueFrom": env("B")}]}}, "allow": ["read"]}),
        "spec.transport.stdio.env[0]: set exactly one of value or valueFrom",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": {"stdio": {"command": "s", "env": [{"name": "BAD-NAME", "value": "1"}, {"name": "BAD-NAME", "value": "2"}]}}, "allow": ["read"]}),
        "spec.transport.stdio.env[1].name: duplicate name \"BAD-NAME\"",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": {"http": {"url": "http://user:pw@mcp:8000/"}}, "allow": ["read"]}),
        "spec.transport.http.url: must not contain credentials; use a secret reference for them",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": {"http": {"url": "ftp://mcp/"}}, "allow": ["read"]}),
        "spec.transport.http.url: must use http or https, not \"ftp\"",
    );
    assert_rejected(
        "McpAdapter",
        json!({"transport": stdio, "allow": ["read"], "callTimeoutSeconds": 0}),
        "spec.callTimeoutSeconds: must be at least 1, got 0",
    );
}

#[test]
fn notification_receivers_match_their_type() {
    let webhook = json!({"type": "webhook", "webhook": {"url": "https://hooks.example.com/a?b=c"}});
    assert_accepted("NotificationReceiver", webhook.clone());
    let mixed = "spec: set exactly the settings block named by type (webhook, telegram, mattermost or slack)";
    assert_rejected("NotificationReceiver", json!({"type": "telegram", "webhook": {"url": "https://h/"}}), mixed);
    let telegram = json!({"botToken": env("TG"), "chatId": "-100123"});
    assert_accepted(
        "NotificationReceiver",
        json!({"type": "telegram", "telegram": telegram, "inbound": {"mode": "polling", "allowedConversationIds": ["-100123"]}}),
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "telegram", "telegram": telegram, "inbound": {"mode": "polling", "secret": env("S"), "allowedUserIds": ["1"]}}),
        "spec.inbound: mode webhook needs secret; modes polling and socket must not set it",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "telegram", "telegram": telegram, "inbound": {"mode": "webhook", "secret": env("S")}}),
        "spec.inbound: set at least one of allowedConversationIds or allowedUserIds",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "webhook", "webhook": {"url": "https://h/"}, "inbound": {"mode": "webhook", "secret": env("S"), "allowedUserIds": ["u"]}}),
        "spec: inbound is only for telegram, mattermost and slack receivers",
    );
    let mattermost = json!({"baseUrl": "https://chat.example.com", "botToken": env("MM"), "channelId": "abc"});
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "mattermost", "mattermost": mattermost, "inbound": {"mode": "webhook", "secret": env("S"), "allowedConversationIds": ["abc"]}}),
        "spec: mattermost inbound needs mode webhook and a non-empty allowedUserIds",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "telegram", "telegram": {"botToken": env("TG"), "chatId": "1", "baseUrl": "https://api.telegram.org?x=1"}}),
        "spec.telegram.baseUrl: must not contain a query (?...)",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "webhook", "webhook": {"url": "javascript:alert(1)"}}),
        "spec.webhook.url: must use http or https, not \"javascript\"",
    );
}

#[test]
fn slack_receivers_take_the_events_api_or_socket_mode() {
    let slack = json!({"botToken": env("SLACK_BOT"), "channelId": "C0123456789"});
    let with_app = json!({"botToken": env("SLACK_BOT"), "channelId": "C0123456789", "appToken": env("SLACK_APP")});
    assert_accepted("NotificationReceiver", json!({"type": "slack", "slack": slack}));
    assert_accepted(
        "NotificationReceiver",
        json!({"type": "slack", "slack": slack, "inbound": {"mode": "webhook", "secret": env("SIGNING"), "allowedUserIds": ["U1"]}}),
    );
    assert_accepted(
        "NotificationReceiver",
        json!({"type": "slack", "slack": with_app, "inbound": {"mode": "socket", "allowedConversationIds": ["C0123456789"]}}),
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "slack", "slack": slack, "inbound": {"mode": "socket", "allowedUserIds": ["U1"]}}),
        "spec: inbound mode socket is Slack's Socket Mode: it needs type slack and slack.appToken",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "slack", "slack": with_app, "inbound": {"mode": "polling", "allowedUserIds": ["U1"]}}),
        "spec: slack inbound takes mode webhook (the Events API, with the signing secret as inbound.secret) or socket (Socket Mode, with slack.appToken)",
    );
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "slack", "slack": with_app, "inbound": {"mode": "socket", "secret": env("S"), "allowedUserIds": ["U1"]}}),
        "spec.inbound: mode webhook needs secret; modes polling and socket must not set it",
    );
    let telegram = json!({"botToken": env("TG"), "chatId": "-100123"});
    assert_rejected(
        "NotificationReceiver",
        json!({"type": "telegram", "telegram": telegram, "inbound": {"mode": "socket", "allowedUserIds": ["1"]}}),
        "spec: inbound mode socket is Slack's Socket Mode: it needs type slack and slack.appToken",
    );
    let bad_channel = json!({"botToken": env("SLACK_BOT"), "channelId": "#ops"});
    let refused = errors("NotificationReceiver", json!({"type": "slack", "slack": bad_channel}));
    assert!(refused.iter().any(|r| r.contains("channelId")), "{refused:?}");
}

#[test]
fn skills_workspaces_profiles_and_knowledge_bases() {
    assert_rejected("Skill", json!({}), "spec: set exactly one of content or contentFrom");
    assert_rejected(
        "Skill",
        json!({"content": "x", "match": ["Postgres"]}),
        "spec.match[0]: \"Postgres\" does not match the pattern ^[a-z0-9][a-z0-9._-]{0,63}$",
    );
    assert_rejected("Skill", json!({"content": ""}), "spec.content: must not be empty");
    assert_rejected("Workspace", json!({"source": {}}), "spec.source: set exactly one of path or git");
    assert_accepted(
        "Workspace",
        json!({"source": {"git": {"url": "https://git.example/infra.git"}}, "validatorMode": "replace"}),
    );
    assert_rejected(
        "Workspace",
        json!({"source": {"path": "/w"}, "validatorMode": "merge"}),
        "spec.validatorMode: unsupported value \"merge\"; expected one of: append, replace",
    );
    assert_rejected("ValidatorProfile", json!({"argv": [""]}), "spec.argv: argv[0] (the program) must not be empty");
    assert_rejected("ValidatorProfile", json!({"argv": []}), "spec.argv: must have at least 1 items, got 0");
    assert_rejected(
        "ValidatorProfile",
        json!({"argv": ["x"], "files": ["src/[a"]}),
        "spec.files[0]: invalid glob \"src/[a\": unclosed character class; missing ']'",
    );
    assert_rejected(
        "ValidatorProfile",
        json!({"argv": ["x"], "timeoutSeconds": 7200}),
        "spec.timeoutSeconds: must be at most 3600, got 7200",
    );
    assert_rejected("KnowledgeBase", json!({"sources": []}), "spec.sources: must have at least 1 items, got 0");
    assert_rejected(
        "KnowledgeBase",
        json!({"sources": [{"directory": {"path": "a"}, "configMap": {"name": "b"}}]}),
        "spec.sources[0]: set exactly one of configMap, directory, git or inline",
    );
    assert_rejected(
        "KnowledgeBase",
        json!({"sources": [{"directory": {"path": "a"}}], "chunking": {"chunkRunes": 300, "overlapRunes": 300}}),
        "spec.chunking: overlapRunes must be smaller than chunkRunes",
    );
    assert_rejected(
        "KnowledgeBase",
        json!({"sources": [{"git": {"workspace": "w", "path": "../etc"}}]}),
        "spec.sources[0].git.path: must be a relative path inside the workspace without '..'",
    );
}

#[test]
fn envelope_problems_are_all_reported() {
    let value = json!({"apiVersion": "akritas.io/v1", "kind": "Skill", "metadata": {"namespace": "Ops"}, "spec": {"content": "x"}, "status": {}});
    let got: Vec<String> = parse_manifest(value).unwrap_err().iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "apiVersion: \"akritas.io/v1\" is not supported; use akritas.io/v1alpha1",
            "metadata.name: required field is missing",
            "metadata.namespace: \"Ops\" is not a valid namespace name",
            "status: is written by Akritas; remove it from the manifest",
        ]
    );
}

#[test]
fn defaults_are_applied() {
    let Ok(akritas::resources::Resource::McpAdapter(adapter)) =
        parse_manifest(manifest("McpAdapter", json!({"transport": {"stdio": {"command": "s"}}, "allow": ["read"]})))
    else {
        panic!("expected a valid McpAdapter");
    };
    assert_eq!(adapter.spec.call_timeout_seconds, 10);
    assert_eq!(adapter.metadata.namespace.as_deref(), Some("ops"));
}
