//! The one-segment webhook URLs (`/api/v1/alerts/{name}/webhook`, a bot receiver's
//! `/api/v1/bots/telegram/{name}/webhook`) name a resource of the `webhook_namespace`
//! (default: the home namespace) and nothing else: a resource of the same name declared
//! in another namespace never changes where an existing URL goes (Alertmanager drops a
//! delivery answered with a 4xx). Driven through the real `akritas serve`.

use akritas_testkit as support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::telegram::{TelegramStandIn, text_update};
use support::{Server, serve_command};

const FIRING: &str = include_str!("fixtures/alertmanager/alertmanager-webhook.json");
const HOME_TOKEN: &str = "home-alertmanager-token-0123";
const TEAM_TOKEN: &str = "team-alertmanager-token-0123";
const TG_TOKEN: &str = "123456:short-url-bot-token-0123456789";
const HOME_SECRET: &str = "home-webhook-secret_0123";
const TEAM_SECRET: &str = "team-webhook-secret_0123";
const CHAT: i64 = -1001234567890;

fn alert_source(namespace: &str, env: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: AlertSource\n\
         metadata: {{name: alertmanager-main, namespace: {namespace}}}\n\
         spec: {{provider: alertmanager, auth: {{bearerToken: {{env: {env}}}}}}}\n"
    )
}

fn telegram_receiver(namespace: &str, secret_env: &str, telegram: &str) -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\n\
         metadata: {{name: ops-bot, namespace: {namespace}}}\n\
         spec:\n  type: telegram\n  telegram: {{botToken: {{env: SHORT_TG_TOKEN}}, chatId: \"{CHAT}\", baseUrl: \"{telegram}\"}}\n\
         \x20 inbound: {{mode: webhook, secret: {{env: {secret_env}}}, allowedConversationIds: [\"{CHAT}\"]}}\n"
    )
}

/// `akritas serve` over `resources`, with the secrets of both namespaces' resources allowed
/// (`team-a/…` only to team-a).
fn serve(resources: &Path) -> Server {
    let mut command = serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(resources)
        .env("AKRITAS_RESOURCE_ENV", "SHORT_*,team-a/SHORT_*")
        .env("SHORT_HOME_TOKEN", HOME_TOKEN)
        .env("SHORT_TEAM_TOKEN", TEAM_TOKEN)
        .env("SHORT_TG_TOKEN", TG_TOKEN)
        .env("SHORT_HOME_SECRET", HOME_SECRET)
        .env("SHORT_TEAM_SECRET", TEAM_SECRET);
    Server::start(command)
}

async fn post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .timeout(Duration::from_secs(30))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

/// The fixture's alert, starting at `starts_at` (a new event for each start).
fn firing(starts_at: &str) -> String {
    FIRING.replace("2026-11-29T22:41:16Z", starts_at)
}

/// Waits until `url` answers `status` (the resource another namespace declared is live).
async fn until_answers(url: &str, headers: &[(&str, &str)], body: &str, status: u16) {
    support::wait_for(&format!("{url} to answer {status}"), Duration::from_secs(30), || async {
        (post(url, headers, body).await.0 == status).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_named_alert_source_in_another_namespace_never_reroutes_the_short_url() {
    let resources = tempfile::tempdir().unwrap();
    std::fs::write(resources.path().join("home.yaml"), alert_source("default", "SHORT_HOME_TOKEN")).unwrap();
    let server = serve(resources.path());
    let short = format!("{}/api/v1/alerts/alertmanager-main/webhook", server.url);
    let home_auth = format!("Bearer {HOME_TOKEN}");
    let (status, before) = post(&short, &[("authorization", &home_auth)], &firing("2026-11-29T22:41:16Z")).await;
    assert_eq!(status, 202, "{before}");

    // Another namespace declares an AlertSource of the same name.
    std::fs::write(resources.path().join("team-a.yaml"), alert_source("team-a", "SHORT_TEAM_TOKEN")).unwrap();
    let team = format!("{}/api/v1/alerts/team-a/alertmanager-main/webhook", server.url);
    let team_auth = format!("Bearer {TEAM_TOKEN}");
    until_answers(&team, &[("authorization", &team_auth)], &firing("2026-11-29T22:41:16Z"), 202).await;

    let (status, after) = post(&short, &[("authorization", &home_auth)], &firing("2026-11-30T01:00:00Z")).await;
    assert_eq!(status, 202, "{after}");
    let (status, _) = post(&short, &[("authorization", &team_auth)], &firing("2026-11-30T02:00:00Z")).await;
    assert_eq!(status, 401, "the short URL is not team-a's source: its token does not open it");
    let dotted = format!("{}/api/v1/alerts/team-a.alertmanager-main/webhook", server.url);
    let (status, _) = post(&dotted, &[("authorization", &team_auth)], &firing("2026-11-30T03:00:00Z")).await;
    assert_eq!(status, 202, "team-a's source by NAMESPACE.NAME");
    let alias = format!("{}/api/v1/alertmanager/webhook", server.url);
    let (status, _) = post(&alias, &[("authorization", &home_auth)], &firing("2026-11-30T04:00:00Z")).await;
    assert_eq!(status, 202, "the Alertmanager alias stays the home source");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_named_telegram_receiver_in_another_namespace_never_reroutes_the_short_url() {
    let telegram = TelegramStandIn::start(TG_TOKEN).await;
    let resources = tempfile::tempdir().unwrap();
    let home = telegram_receiver("default", "SHORT_HOME_SECRET", &telegram.url);
    std::fs::write(resources.path().join("home.yaml"), home).unwrap();
    let server = serve(resources.path());
    let short = format!("{}/api/v1/bots/telegram/ops-bot/webhook", server.url);
    let secret = "x-telegram-bot-api-secret-token";
    // From a chat off the allowlist: taken and ignored, so no Run is started.
    let update = |id: i64| text_update(id, 42, 4242, id, "Is db-7 healthy?", None, None).to_string();
    let (status, before) = post(&short, &[(secret, HOME_SECRET)], &update(1)).await;
    assert_eq!((status, &before), (200, &json!({"accepted": false})));

    // Another namespace declares a webhook receiver of the same name.
    let team = telegram_receiver("team-a", "SHORT_TEAM_SECRET", &telegram.url);
    std::fs::write(resources.path().join("team-a.yaml"), team).unwrap();
    let namespaced = format!("{}/api/v1/bots/telegram/team-a.ops-bot/webhook", server.url);
    until_answers(&namespaced, &[(secret, TEAM_SECRET)], &update(2), 200).await;

    let (status, after) = post(&short, &[(secret, HOME_SECRET)], &update(3)).await;
    assert_eq!((status, &after), (200, &json!({"accepted": false})), "still the home receiver");
    assert_eq!(post(&short, &[(secret, TEAM_SECRET)], &update(4)).await.0, 401, "not team-a's receiver");
    assert_eq!(post(&namespaced, &[(secret, HOME_SECRET)], &update(5)).await.0, 401, "team-a's by NAMESPACE.NAME");
}
