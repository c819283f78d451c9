//! The chat reply clients (`akritas::notify::chat`) against the Telegram Bot API and
//! Mattermost stand-ins of the testkit, which speak the real wire formats and record
//! every request: sending, reply parameters, threads, edits, `getUpdates` offsets and
//! long polling, long replies split, wrong tokens, `ok:false`, oversized answers — and
//! no error ever carries the bot token.

use std::time::Duration;

use akritas::notify::chat::{
    ChatError, MATTERMOST_LIMIT, MAX_RESPONSE_BYTES, MAX_UPDATES_BYTES, MattermostApi, TELEGRAM_LIMIT, TelegramApi,
};
use akritas_testkit::mattermost::{self, MattermostStandIn};
use akritas_testkit::telegram::{self, TelegramStandIn};
use serde_json::{Value, json};

const TG_TOKEN: &str = "7000000001:AAH-telegram-secret-token_x9";
const MM_TOKEN: &str = "mmsecretbottoken0000000000xy";
const CHANNEL: &str = "jux16pkewjrkfj3ehep1psxyxc";
const TIMEOUT: Duration = Duration::from_secs(5);

fn telegram(stand_in: &TelegramStandIn, token: &str) -> TelegramApi {
    TelegramApi::new(&stand_in.url, token, TIMEOUT).unwrap()
}

fn mattermost(stand_in: &MattermostStandIn, token: &str) -> MattermostApi {
    MattermostApi::new(&stand_in.url, token, TIMEOUT).unwrap()
}

/// Neither the message nor the `Debug` form of an error names `token`.
fn assert_no_token(err: &ChatError, token: &str) {
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains(token), "the error leaks the token: {text}");
        // Nor its secret half (Telegram tokens are `<bot id>:<secret>`).
        if let Some((_, secret)) = token.split_once(':') {
            assert!(!text.contains(secret), "the error leaks the token: {text}");
        }
    }
}

#[tokio::test]
async fn telegram_send_message_carries_thread_and_reply_parameters() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let api = telegram(&tg, TG_TOKEN);
    let first = api.send_message("-1001234567890", "plain *text*", Some(42), Some(17)).await.unwrap();
    let second = api.send_message("555", "no thread", None, None).await.unwrap();
    assert_eq!((first, second), (1, 2));
    let sent = tg.sent();
    assert_eq!(
        sent[0],
        json!({"chat_id": "-1001234567890", "text": "plain *text*", "message_thread_id": 42,
               "reply_parameters": {"message_id": 17, "allow_sending_without_reply": true}})
    );
    assert_eq!(sent[1], json!({"chat_id": "555", "text": "no thread"}));
    assert!(sent.iter().all(|s| s.get("parse_mode").is_none()), "Telegram replies are plain text");
    assert!(tg.requests().iter().all(|r| r.authorized && r.user_agent == "Akritas/telegram-chat"));
}

#[tokio::test]
async fn telegram_edit_message_text_changes_only_the_bots_message() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let api = telegram(&tg, TG_TOKEN);
    let id = api.send_message("-100", "Investigating…", None, None).await.unwrap();
    api.edit_message_text("-100", id, "Investigated: disk full").await.unwrap();
    let edit = tg.requests().into_iter().find(|r| r.method == "editMessageText").unwrap();
    assert_eq!(edit.body, json!({"chat_id": "-100", "message_id": id, "text": "Investigated: disk full"}));

    let unchanged = api.edit_message_text("-100", id, "Investigated: disk full").await.unwrap_err();
    assert!(
        matches!(&unchanged, ChatError::HttpStatus { status: 400, description: Some(d) }
        if d.starts_with("Bad Request: message is not modified")),
        "{unchanged}"
    );
    let missing = api.edit_message_text("-100", id + 100, "x").await.unwrap_err();
    assert_eq!(
        missing,
        ChatError::HttpStatus { status: 400, description: Some("Bad Request: message to edit not found".into()) }
    );
    let empty = api.send_message("-100", "   ", None, None).await.unwrap_err();
    assert_eq!(empty.code(), "http_status");
    assert!(empty.to_string().contains("message text is empty"), "{empty}");
}

#[tokio::test]
async fn telegram_get_updates_returns_from_the_offset_and_confirms_below_it() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let api = telegram(&tg, TG_TOKEN);
    for (update, message) in [(10, 100), (11, 101), (12, 102)] {
        tg.push_update(telegram::text_update(update, -100, 4242, message, "why is api slow?", Some(3), None));
    }
    let all = api.get_updates(0, 0).await.unwrap();
    assert_eq!(all.iter().map(|u| u["update_id"].as_i64().unwrap()).collect::<Vec<_>>(), [10, 11, 12]);
    assert_eq!(all[0]["message"]["text"], "why is api slow?");
    assert_eq!(all[0]["message"]["message_thread_id"], 3);
    assert_eq!(all[0]["message"]["from"]["is_bot"], false);

    // Asking from 12 confirms 10 and 11: Telegram never sends them again.
    let rest = api.get_updates(12, 0).await.unwrap();
    assert_eq!(rest.iter().map(|u| u["update_id"].as_i64().unwrap()).collect::<Vec<_>>(), [12]);
    assert_eq!(tg.pending_updates(), 1);
    assert_eq!(api.get_updates(0, 0).await.unwrap().len(), 1, "confirmed updates stay gone");
    assert!(api.get_updates(13, 0).await.unwrap().is_empty());
    assert_eq!(tg.pending_updates(), 0);

    let polls: Vec<Value> = tg.requests().into_iter().filter(|r| r.method == "getUpdates").map(|r| r.body).collect();
    assert_eq!(polls[1], json!({"offset": 12, "timeout": 0, "allowed_updates": ["message"]}));
}

#[tokio::test]
async fn telegram_long_poll_waits_for_an_update_and_outlives_the_client_timeout() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    tg.set_max_poll(Duration::from_secs(30));
    let api = TelegramApi::new(&tg.url, TG_TOKEN, Duration::from_secs(5)).unwrap();
    let poll = tokio::spawn(async move { api.get_updates(5, 25).await });
    // The poll is waiting at the stand-in before the update arrives.
    while tg.requests().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tg.push_update(telegram::text_update(5, 4242, 4242, 9, "/status", None, None));
    let updates = poll.await.unwrap().unwrap();
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0]["message"]["entities"][0]["type"], "bot_command");
    assert_eq!(tg.requests()[0].body["timeout"], 25);

    // A long poll that ends empty after its timeout is not an error, even when it lasts
    // longer than the client's own timeout (getUpdates gets timeout + 10 s).
    let short = TelegramApi::new(&tg.url, TG_TOKEN, Duration::from_secs(1)).unwrap();
    assert_eq!(short.get_updates(6, 2).await.unwrap(), Vec::<Value>::new());
}

#[tokio::test]
async fn telegram_wrong_token_and_rejections_are_errors_without_the_token() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let wrong_token = "7000000001:AAH-wrong-secret-token_zz";
    let wrong = telegram(&tg, wrong_token);
    let mut errors = vec![
        wrong.send_message("-100", "hi", None, None).await.unwrap_err(),
        wrong.edit_message_text("-100", 1, "hi").await.unwrap_err(),
        wrong.get_updates(0, 0).await.unwrap_err(),
    ];
    for err in &errors {
        assert_eq!(err, &ChatError::HttpStatus { status: 401, description: Some("Unauthorized".into()) });
    }
    assert!(tg.requests().iter().all(|r| !r.authorized));

    let api = telegram(&tg, TG_TOKEN);
    tg.script_next(
        "sendMessage",
        200,
        json!({"ok": false, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}).to_string(),
    );
    let rejected = api.send_message("-100", "hi", None, None).await.unwrap_err();
    assert_eq!(
        rejected,
        ChatError::RemoteRejected { description: Some("Forbidden: bot was blocked by the user".into()) }
    );
    // A description that repeats the token (a proxy echoing the URL) is scrubbed.
    let echo = format!("Bad Request: POST /bot{TG_TOKEN}/sendMessage failed");
    tg.script_next("sendMessage", 400, json!({"ok": false, "error_code": 400, "description": echo}).to_string());
    let echoed = api.send_message("-100", "hi", None, None).await.unwrap_err();
    assert!(echoed.to_string().contains("/bot<redacted>/sendMessage"), "{echoed}");
    tg.script_next("getUpdates", 200, r#"{"ok":true,"result":{"not":"an array"}}"#);
    errors.extend([rejected, echoed, api.get_updates(0, 0).await.unwrap_err()]);
    assert_eq!(errors.last().unwrap().code(), "invalid_response");

    // Nothing listens here: the connection error (whose text would name the URL) is dropped.
    let closed = format!("http://127.0.0.1:{}", akritas_testkit::free_port());
    let unreachable = TelegramApi::new(&closed, TG_TOKEN, TIMEOUT).unwrap();
    errors.push(unreachable.send_message("-100", "hi", None, None).await.unwrap_err());
    assert!(matches!(errors.last().unwrap(), ChatError::RequestFailed(_)), "{errors:?}");
    let port = closed.rsplit(':').next().unwrap();
    let said = errors.last().unwrap().to_string();
    assert!(said.contains(&format!("connection refused by 127.0.0.1:{port}")), "{said}");
    for err in &errors {
        assert_no_token(err, TG_TOKEN);
        assert_no_token(err, wrong_token);
    }
}

#[tokio::test]
async fn telegram_answers_over_the_caps_are_cut_off() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let api = telegram(&tg, TG_TOKEN);
    let padded = |bytes: usize| json!({"ok": true, "result": {"message_id": 1, "pad": "p".repeat(bytes)}}).to_string();
    tg.script_next("sendMessage", 200, padded(MAX_RESPONSE_BYTES));
    let err = api.send_message("-100", "hi", None, None).await.unwrap_err();
    assert_eq!(err, ChatError::ResponseTooLarge { limit: MAX_RESPONSE_BYTES });
    tg.script_next("editMessageText", 200, padded(MAX_RESPONSE_BYTES));
    assert_eq!(api.edit_message_text("-100", 1, "x").await.unwrap_err().code(), "response_too_large");

    // getUpdates reads up to 1 MiB: 900 KiB of updates is fine, more than 1 MiB is not.
    let updates = |count: usize| {
        let update = telegram::text_update(1, -100, 4242, 1, &"u".repeat(4000), None, None);
        json!({"ok": true, "result": vec![update; count]}).to_string()
    };
    let fits = updates(200);
    assert!(fits.len() > 800 * 1024 && fits.len() < MAX_UPDATES_BYTES, "{}", fits.len());
    tg.script_next("getUpdates", 200, fits);
    assert_eq!(api.get_updates(0, 0).await.unwrap().len(), 200);
    tg.script_next("getUpdates", 200, updates(300));
    let err = api.get_updates(0, 0).await.unwrap_err();
    assert_eq!(err, ChatError::ResponseTooLarge { limit: MAX_UPDATES_BYTES });
}

#[tokio::test]
async fn telegram_send_reply_splits_long_answers_in_order_within_the_thread() {
    let tg = TelegramStandIn::start(TG_TOKEN).await;
    let api = telegram(&tg, TG_TOKEN);
    let line = "Check the api pods, ping @channel and @alice if it persists.\n";
    let answer = line.repeat(150); // about 9,300 characters
    let ids = api.send_reply("-100", &answer, Some(7), Some(33)).await.unwrap();
    assert_eq!(ids, [1, 2, 3]);
    let sent = tg.sent();
    assert_eq!(sent.len(), 3);
    let mut rebuilt = String::new();
    for (i, body) in sent.iter().enumerate() {
        let text = body["text"].as_str().unwrap();
        assert!(text.chars().count() <= TELEGRAM_LIMIT);
        assert!(text.starts_with(&format!("({}/3)\n", i + 1)), "{}", &text[..8]);
        assert!(!text.contains('@') && text.contains("＠channel"), "mentions are neutralised");
        assert_eq!(body["message_thread_id"], 7);
        assert_eq!(body["reply_parameters"], json!({"message_id": 33, "allow_sending_without_reply": true}));
        if !rebuilt.is_empty() {
            rebuilt.push('\n');
        }
        rebuilt.push_str(text.split_once('\n').unwrap().1);
    }
    // Cut at line breaks: every line arrives whole.
    assert_eq!(rebuilt, answer.trim_end().replace('@', "＠"));

    // A short reply is one message without a prefix; an empty one says so.
    api.send_reply("-100", "  ", None, None).await.unwrap();
    assert_eq!(tg.sent()[3]["text"], "Akritas returned an empty response.");
}

#[tokio::test]
async fn mattermost_create_and_patch_posts() {
    let mm = MattermostStandIn::start(MM_TOKEN).await;
    let api = mattermost(&mm, MM_TOKEN);
    let root = api.create_post(CHANNEL, "Incident opened", None).await.unwrap();
    assert_eq!(root.len(), 26);
    let reply = api.create_post(CHANNEL, "Investigated", Some(&root)).await.unwrap();
    api.patch_post(&root, "Incident opened (resolved)").await.unwrap();

    let requests = mm.requests();
    assert_eq!(requests[0].path, "/api/v4/posts");
    assert_eq!(requests[0].body, json!({"channel_id": CHANNEL, "message": "Incident opened"}));
    assert_eq!(requests[1].body, json!({"channel_id": CHANNEL, "message": "Investigated", "root_id": root}));
    assert_eq!((requests[2].method.as_str(), requests[2].path.clone()), ("PUT", format!("/api/v4/posts/{root}/patch")));
    assert_eq!(requests[2].body, json!({"message": "Incident opened (resolved)"}));
    assert!(requests.iter().all(|r| r.authorized && r.user_agent == "Akritas/mattermost-chat"));
    let posts = mm.posts();
    assert_eq!(posts[0]["message"], "Incident opened (resolved)");
    assert!(posts[0]["edit_at"].as_i64().unwrap() > 0);
    assert_eq!((posts[1]["id"].as_str(), posts[1]["root_id"].as_str()), (Some(reply.as_str()), Some(root.as_str())));

    // Mattermost threads are one level deep: a reply cannot be a root.
    let nested = api.create_post(CHANNEL, "x", Some(&reply)).await.unwrap_err();
    assert_eq!(
        nested,
        ChatError::HttpStatus { status: 400, description: Some("api.post.create_post.root_id.app_error".into()) }
    );
    // A post id that would change the path is refused before any request.
    let before = mm.requests().len();
    assert_eq!(api.patch_post("../users/me", "x").await.unwrap_err().code(), "invalid_id");
    assert_eq!(mm.requests().len(), before);
}

#[tokio::test]
async fn mattermost_send_reply_escapes_splits_and_threads() {
    let mm = MattermostStandIn::start(MM_TOKEN).await;
    let api = mattermost(&mm, MM_TOKEN);
    // The user's post starts a thread: the reply goes under it.
    let user_post = api.create_post(CHANNEL, "why is api slow?", None).await.unwrap();
    let ids = api
        .send_reply(CHANNEL, "See [docs](http://evil) ![i](http://evil/x.png) <b>@all</b>", None, Some(&user_post))
        .await
        .unwrap();
    assert_eq!(ids.len(), 1);
    let post = mm.posts().into_iter().find(|p| p["id"] == ids[0]).unwrap();
    assert_eq!(post["root_id"], user_post);
    assert_eq!(post["message"], "See \\[docs\\](http://evil) !\\[i\\](http://evil/x.png) \\<b\\>＠all\\</b\\>");

    // In a thread, the thread's root wins over the user's post; long replies are split.
    let in_thread = api.create_post(CHANNEL, "and the db?", Some(&user_post)).await.unwrap();
    let answer = "*db-7* is at 95% CPU | check `pg_stat_activity`\n".repeat(700); // about 38,500 characters escaped
    let ids = api.send_reply(CHANNEL, &answer, Some(&user_post), Some(&in_thread)).await.unwrap();
    assert_eq!(ids.len(), 3);
    let parts: Vec<Value> =
        mm.posts().into_iter().filter(|p| ids.contains(&p["id"].as_str().unwrap().to_string())).collect();
    for (i, part) in parts.iter().enumerate() {
        let message = part["message"].as_str().unwrap();
        assert_eq!(part["root_id"], user_post);
        assert!(message.chars().count() <= MATTERMOST_LIMIT);
        assert!(
            message.starts_with(&format!("({}/3)\n\\*db-7\\* is at 95% CPU \\| check \\`", i + 1)),
            "{}",
            &message[..40]
        );
    }
}

#[tokio::test]
async fn mattermost_wrong_token_and_oversized_answers_are_errors_without_the_token() {
    let mm = MattermostStandIn::start(MM_TOKEN).await;
    let wrong_token = "mmwrongbottoken000000000000zz";
    let wrong = mattermost(&mm, wrong_token);
    let expired =
        ChatError::HttpStatus { status: 401, description: Some("api.context.session_expired.app_error".into()) };
    let mut errors = vec![wrong.create_post(CHANNEL, "hi", None).await.unwrap_err()];
    errors.push(wrong.patch_post("ybndrfg8ejkmcpqxot1uwisza3", "hi").await.unwrap_err());
    assert!(errors.iter().all(|e| *e == expired), "{errors:?}");

    let api = mattermost(&mm, MM_TOKEN);
    let huge = json!({"id": "ybndrfg8ejkmcpqxot1uwisza3", "message": "m".repeat(MAX_RESPONSE_BYTES)}).to_string();
    mm.script_next("create_post", 201, huge);
    errors.push(api.create_post(CHANNEL, "hi", None).await.unwrap_err());
    assert_eq!(errors.last().unwrap(), &ChatError::ResponseTooLarge { limit: MAX_RESPONSE_BYTES });
    mm.script_next("create_post", 500, format!(r#"{{"id":"store.sql.{MM_TOKEN}.app_error"}}"#));
    errors.push(api.create_post(CHANNEL, "hi", None).await.unwrap_err());
    assert!(errors.last().unwrap().to_string().contains("HTTP 500 (store.sql.<redacted>.app_error)"), "{errors:?}");
    for err in &errors {
        assert_no_token(err, MM_TOKEN);
        assert_no_token(err, wrong_token);
    }
}

#[test]
fn mattermost_payload_builders_use_mattermosts_field_names() {
    let json = mattermost::outgoing_webhook_json("tok", CHANNEL, "user1", "post1", "akritas why?", "akritas");
    for field in [
        "token",
        "team_id",
        "team_domain",
        "channel_id",
        "channel_name",
        "timestamp",
        "user_id",
        "user_name",
        "post_id",
        "text",
        "trigger_word",
        "file_ids",
    ] {
        assert!(json.get(field).is_some(), "outgoing webhook JSON lacks {field}");
    }
    let form = mattermost::outgoing_webhook_form("tok", CHANNEL, "user1", "post1", "akritas why?", "akritas");
    let pairs: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(form.as_bytes()).into_owned().collect();
    assert_eq!(pairs["text"], "akritas why?");
    assert_eq!(pairs["post_id"], "post1");
    assert_eq!(pairs["timestamp"].len(), 10, "form timestamps are in seconds");
    let slash = mattermost::slash_command_form("tok", CHANNEL, "user1", "why is api slow", "/akritas");
    let pairs: std::collections::HashMap<String, String> =
        url::form_urlencoded::parse(slash.as_bytes()).into_owned().collect();
    assert_eq!(
        (pairs["command"].as_str(), pairs["text"].as_str(), pairs["token"].as_str()),
        ("/akritas", "why is api slow", "tok")
    );
    assert!(!pairs.contains_key("post_id"));
}
