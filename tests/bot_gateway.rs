//! The bot gateway core: ingress decoding (secret first), allowlists, commands, the durable
//! session store (restart, bounds, journal size) and the queue (dedup, full queue,
//! per-conversation order, restart in the middle of a conversation).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use akritas::bots::commands::{self, Command};
use akritas::bots::sessions::Clock;
use akritas::bots::{
    Allowlists, Answer, BoxFuture, Gateway, GatewaySettings, Inbound, IncidentLookup, Provider, Refusal, Replier,
    Responder, SessionKey, SessionOptions, SessionStore, SubmitError, Turn, mattermost, telegram_update,
    telegram_webhook,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RECEIVER: &str = "ops/chat";

fn allow_all() -> Allowlists {
    Allowlists::default()
}

fn telegram_body(update_id: i64, chat: i64, user: i64, text: &str) -> serde_json::Value {
    json!({
        "update_id": update_id,
        "message": {
            "message_id": 7,
            "from": {"id": user, "is_bot": false, "first_name": "Ann"},
            "chat": {"id": chat, "type": "supergroup"},
            "date": 1_750_000_000,
            "text": text
        }
    })
}

// ---------------------------------------------------------------- ingress: Telegram

#[test]
fn forged_telegram_secret_is_refused_before_the_body_is_read() {
    let unparseable = b"{this is not json";
    let refused = |header: Option<&str>| telegram_webhook(RECEIVER, "s3cret", header, unparseable, &allow_all());
    assert_eq!(refused(Some("wrong")), Err(Refusal::Unauthorized));
    assert_eq!(refused(Some("s3cre")), Err(Refusal::Unauthorized));
    assert_eq!(refused(None), Err(Refusal::Unauthorized));
    // With the right secret the same body is a bad request: the secret was checked first.
    assert!(matches!(refused(Some("s3cret")), Err(Refusal::Invalid(_))));
    // An empty configured secret never authorizes.
    let empty = telegram_webhook(RECEIVER, "", Some(""), b"{}", &allow_all());
    assert_eq!(empty, Err(Refusal::Unauthorized));
    // The error names the header to fix, never the secret.
    let message = Refusal::Unauthorized.to_string();
    assert!(message.contains("X-Telegram-Bot-Api-Secret-Token") && !message.contains("s3cret"));
}

#[test]
fn telegram_update_decodes_ids_thread_and_event_id() {
    let mut body = telegram_body(42, -100123, 55, "why is the api slow?");
    body["message"]["message_thread_id"] = json!(9);
    let bytes = serde_json::to_vec(&body).unwrap();
    let inbound = telegram_webhook(RECEIVER, "s3cret", Some("s3cret"), &bytes, &allow_all()).unwrap();
    assert_eq!(
        inbound,
        Inbound {
            provider: Provider::Telegram,
            receiver: RECEIVER.into(),
            event_id: "telegram:ops/chat:42".into(),
            conversation_id: "-100123".into(),
            user_id: "55".into(),
            message_id: Some("7".into()),
            thread_id: Some("9".into()),
            reply_to: None,
            response_url: None,
            text: "why is the api slow?".into(),
        }
    );
    assert_eq!(inbound.namespace(), "ops");
}

#[test]
fn telegram_bots_non_text_and_empty_updates_are_ignored() {
    let ignored =
        |body: serde_json::Value| matches!(telegram_update(RECEIVER, &body, &allow_all()), Err(Refusal::Ignored(_)));
    let mut bot = telegram_body(1, 5, 6, "hi");
    bot["message"]["from"]["is_bot"] = json!(true);
    assert!(ignored(bot));
    assert!(ignored(json!({"update_id": 2, "edited_message": {}})));
    let mut photo = telegram_body(3, 5, 6, "x");
    photo["message"].as_object_mut().unwrap().remove("text");
    photo["message"]["photo"] = json!([{"file_id": "a"}]);
    assert!(ignored(photo));
    assert!(ignored(telegram_body(4, 0, 6, "no chat")));
    assert!(ignored(telegram_body(5, 5, 6, "   ")));
    let mut no_from = telegram_body(6, 5, 6, "x");
    no_from["message"].as_object_mut().unwrap().remove("from");
    assert!(ignored(no_from));
    let mut zero_id = telegram_body(7, 5, 6, "x");
    zero_id["message"]["message_id"] = json!(0);
    assert!(ignored(zero_id));
}

#[test]
fn telegram_oversized_text_and_negative_update_ids_are_invalid() {
    let long = "a".repeat(32 * 1024 + 1);
    assert!(matches!(
        telegram_update(RECEIVER, &telegram_body(1, 5, 6, &long), &allow_all()),
        Err(Refusal::Invalid(_))
    ));
    assert!(matches!(telegram_update(RECEIVER, &telegram_body(-1, 5, 6, "x"), &allow_all()), Err(Refusal::Invalid(_))));
    assert!(matches!(telegram_update(RECEIVER, &json!({"message": {}}), &allow_all()), Err(Refusal::Invalid(_))));
}

#[test]
fn allowlists_refuse_other_conversations_and_users() {
    let allow = Allowlists { conversations: ["5".to_string()].into(), users: ["6".to_string()].into() };
    assert!(telegram_update(RECEIVER, &telegram_body(1, 5, 6, "ok"), &allow).is_ok());
    assert_eq!(telegram_update(RECEIVER, &telegram_body(2, 99, 6, "x"), &allow), Err(Refusal::Forbidden));
    assert_eq!(telegram_update(RECEIVER, &telegram_body(3, 5, 99, "x"), &allow), Err(Refusal::Forbidden));
    let users_only = Allowlists { users: ["6".to_string()].into(), ..Allowlists::default() };
    assert!(telegram_update(RECEIVER, &telegram_body(4, 1234, 6, "any chat"), &users_only).is_ok());
    let form = b"token=tok&channel_id=other&user_id=u1&post_id=p1&text=hi";
    let allow = Allowlists { conversations: ["chan".to_string()].into(), ..Allowlists::default() };
    assert_eq!(mattermost(RECEIVER, "tok", None, None, form, &allow), Err(Refusal::Forbidden));
}

// ---------------------------------------------------------------- ingress: Mattermost

const JSON: Option<&str> = Some("application/json");
const FORM: Option<&str> = Some("application/x-www-form-urlencoded; charset=utf-8");

#[test]
fn mattermost_outgoing_webhook_json_strips_the_trigger_word() {
    let body = json!({
        "token": "tok", "team_id": "t1", "channel_id": "chan", "channel_name": "ops",
        "timestamp": 1_750_000_000_000_i64, "user_id": "u1", "user_name": "ann",
        "post_id": "p1", "root_id": "r1", "text": "akritas why is the api slow?", "trigger_word": "akritas"
    });
    let inbound =
        mattermost(RECEIVER, "tok", Some("bot"), JSON, &serde_json::to_vec(&body).unwrap(), &allow_all()).unwrap();
    assert_eq!(
        inbound,
        Inbound {
            provider: Provider::Mattermost,
            receiver: RECEIVER.into(),
            event_id: "mattermost:ops/chat:p1".into(),
            conversation_id: "chan".into(),
            user_id: "u1".into(),
            message_id: Some("p1".into()),
            thread_id: Some("r1".into()),
            reply_to: None,
            response_url: None,
            text: "why is the api slow?".into(),
        }
    );
    // The trigger alone becomes empty text: help.
    let only = json!({"token": "tok", "channel_id": "chan", "user_id": "u1", "post_id": "p2", "text": "akritas", "trigger_word": "akritas"});
    let inbound = mattermost(RECEIVER, "tok", None, JSON, &serde_json::to_vec(&only).unwrap(), &allow_all()).unwrap();
    assert_eq!(inbound.text, "");
    assert_eq!(commands::parse(&inbound.text), Command::Help);
    // A word that merely starts with the trigger is kept.
    let longer = json!({"token": "tok", "channel_id": "chan", "user_id": "u1", "post_id": "p3", "text": "akritasx hi", "trigger_word": "akritas"});
    let inbound = mattermost(RECEIVER, "tok", None, JSON, &serde_json::to_vec(&longer).unwrap(), &allow_all()).unwrap();
    assert_eq!(inbound.text, "akritasx hi");
}

#[test]
fn mattermost_form_body_and_missing_content_type_decode_the_same() {
    let form = b"token=tok&channel_id=chan&user_id=u1&post_id=p9&text=%2Fstatus&trigger_word=";
    let with_type = mattermost(RECEIVER, "tok", None, FORM, form, &allow_all()).unwrap();
    let without = mattermost(RECEIVER, "tok", None, None, form, &allow_all()).unwrap();
    assert_eq!(with_type, without);
    assert_eq!(with_type.text, "/status");
    assert_eq!(with_type.event_id, "mattermost:ops/chat:p9");
}

#[test]
fn mattermost_slash_command_uses_a_body_hash_as_event_id() {
    let body = b"token=tok&team_id=t1&team_domain=ops&channel_id=chan&channel_name=town&user_id=u1&user_name=ann&command=%2Fakritas&text=status&response_url=https%3A%2F%2Fmm.example%2Fhooks%2Fcommands%2Fabc&trigger_id=tr1";
    let inbound = mattermost(RECEIVER, "tok", None, FORM, body, &allow_all()).unwrap();
    assert_eq!(inbound.text, "/status");
    assert_eq!(inbound.message_id, None);
    let hash = &inbound.event_id["mattermost:ops/chat:".len()..];
    assert_eq!(hash.len(), 32, "16 bytes of SHA-256 as hex: {hash}");
    // A retry of the same body has the same id; another invocation has another.
    assert_eq!(mattermost(RECEIVER, "tok", None, FORM, body, &allow_all()).unwrap().event_id, inbound.event_id);
    let other = b"token=tok&channel_id=chan&user_id=u1&command=%2Fakritas&text=status&trigger_id=tr2";
    assert_ne!(mattermost(RECEIVER, "tok", None, FORM, other, &allow_all()).unwrap().event_id, inbound.event_id);
    // No arguments: help. A question that starts with a command word stays a question.
    let bare = b"token=tok&channel_id=chan&user_id=u1&command=%2Fakritas&text=&trigger_id=tr3";
    assert_eq!(
        commands::parse(&mattermost(RECEIVER, "tok", None, FORM, bare, &allow_all()).unwrap().text),
        Command::Help
    );
    let question = b"token=tok&channel_id=chan&user_id=u1&command=%2Fakritas&text=status+of+the+api%3F&trigger_id=tr4";
    let parsed = commands::parse(&mattermost(RECEIVER, "tok", None, FORM, question, &allow_all()).unwrap().text);
    assert_eq!(parsed, Command::Chat("status of the api?".into()));
    let incident = b"token=tok&channel_id=chan&user_id=u1&command=%2Fakritas&text=incident+inc_1&trigger_id=tr5";
    let parsed = commands::parse(&mattermost(RECEIVER, "tok", None, FORM, incident, &allow_all()).unwrap().text);
    assert_eq!(parsed, Command::Incident("inc_1".into()));
}

#[test]
fn mattermost_token_is_checked_before_anything_else() {
    let wrong = b"token=nope&channel_id=chan&user_id=u1&text=hi";
    assert_eq!(mattermost(RECEIVER, "tok", None, FORM, wrong, &allow_all()), Err(Refusal::Unauthorized));
    let missing = b"channel_id=chan&user_id=u1&text=hi";
    assert_eq!(mattermost(RECEIVER, "tok", None, FORM, missing, &allow_all()), Err(Refusal::Unauthorized));
    // A body that does not parse has no token: refused the same way, not described.
    assert_eq!(mattermost(RECEIVER, "tok", None, JSON, b"{oops", &allow_all()), Err(Refusal::Unauthorized));
    // Even with an oversized id the wrong token is what is reported.
    let long_id = format!("token=nope&channel_id={}&user_id=u1&text=hi", "c".repeat(300));
    assert_eq!(mattermost(RECEIVER, "tok", None, FORM, long_id.as_bytes(), &allow_all()), Err(Refusal::Unauthorized));
    let long_id = long_id.replacen("nope", "tok", 1);
    assert!(matches!(
        mattermost(RECEIVER, "tok", None, FORM, long_id.as_bytes(), &allow_all()),
        Err(Refusal::Invalid(_))
    ));
    assert!(matches!(
        mattermost(RECEIVER, "tok", None, Some("text/plain"), b"token=tok", &allow_all()),
        Err(Refusal::Invalid(_))
    ));
}

#[test]
fn mattermost_own_posts_and_empty_messages_are_ignored() {
    let own = b"token=tok&channel_id=chan&user_id=botuser&post_id=p1&text=reply";
    assert!(matches!(mattermost(RECEIVER, "tok", Some("botuser"), FORM, own, &allow_all()), Err(Refusal::Ignored(_))));
    let empty = b"token=tok&channel_id=chan&user_id=u1&post_id=p1&text=+";
    assert!(matches!(mattermost(RECEIVER, "tok", None, FORM, empty, &allow_all()), Err(Refusal::Ignored(_))));
    let no_channel = b"token=tok&user_id=u1&post_id=p1&text=hi";
    assert!(matches!(mattermost(RECEIVER, "tok", None, FORM, no_channel, &allow_all()), Err(Refusal::Ignored(_))));
}

// ---------------------------------------------------------------- sessions

/// A clock tests move by hand.
fn clock() -> (Arc<AtomicI64>, Clock) {
    let now = Arc::new(AtomicI64::new(1_750_000_000));
    let read = now.clone();
    (now, Arc::new(move || jiff::Timestamp::from_second(read.load(Ordering::SeqCst)).unwrap()))
}

fn options(clock: Clock) -> SessionOptions {
    SessionOptions { clock, ..SessionOptions::default() }
}

fn message(conversation: &str, n: usize, text: &str) -> Inbound {
    Inbound {
        provider: Provider::Telegram,
        receiver: RECEIVER.into(),
        event_id: format!("telegram:{RECEIVER}:{conversation}-{n}"),
        conversation_id: conversation.into(),
        user_id: "u1".into(),
        message_id: Some(n.to_string()),
        thread_id: None,
        reply_to: None,
        response_url: None,
        text: text.into(),
    }
}

fn key(conversation: &str) -> SessionKey {
    SessionKey::of(&message(conversation, 0, ""))
}

fn turn(user: &str) -> Turn {
    Turn { user: user.into(), assistant: format!("answer to {user}") }
}

async fn add_turn(store: &SessionStore, conversation: &str, n: usize, user: &str) {
    let inbound = message(conversation, n, user);
    assert!(store.accept(&inbound).await.unwrap());
    store.record_turn(&key(conversation), &inbound.event_id, user, &format!("answer to {user}")).await.unwrap();
}

#[tokio::test]
async fn history_and_dedup_ids_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bots.jsonl");
    let (_, clock) = clock();
    let store = SessionStore::open(&path, options(clock.clone())).unwrap();
    add_turn(&store, "a", 1, "one").await;
    add_turn(&store, "a", 2, "two").await;
    let waiting = message("b", 1, "unanswered");
    assert!(store.accept(&waiting).await.unwrap());
    assert!(!store.accept(&waiting).await.unwrap(), "a repeat is not accepted twice");
    drop(store);

    let store = SessionStore::open(&path, options(clock)).unwrap();
    assert_eq!(store.history(&key("a")), vec![turn("one"), turn("two")]);
    assert!(store.is_duplicate(&message("a", 1, "").event_id));
    assert!(store.is_duplicate(&waiting.event_id));
    assert_eq!(store.pending(), vec![waiting]);
}

#[tokio::test]
async fn history_is_bounded_by_messages_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (_, clock) = clock();
    let opts = SessionOptions { history_messages: 6, history_bytes: 1024, ..options(clock) };
    let store = SessionStore::open(&dir.path().join("b.jsonl"), opts).unwrap();
    for n in 0..5 {
        add_turn(&store, "a", n, &format!("q{n}")).await;
    }
    assert_eq!(store.history(&key("a")), vec![turn("q2"), turn("q3"), turn("q4")]);
    assert_eq!(store.retained_messages(&key("a")), 6);
    let big = "x".repeat(400);
    add_turn(&store, "a", 10, &big).await;
    add_turn(&store, "a", 11, &big).await;
    // Two big turns exceed the byte bound: the older turns go until one big turn is left.
    add_turn(&store, "a", 12, "small").await;
    let history = store.history(&key("a"));
    assert_eq!(history, vec![turn(&big), turn("small")]);
    // A turn that alone exceeds the byte bound is answered but not retained.
    let huge = message("a", 13, "huge");
    store.accept(&huge).await.unwrap();
    store.record_turn(&key("a"), &huge.event_id, &"y".repeat(2000), "ok").await.unwrap();
    assert_eq!(store.history(&key("a")), history);
    assert!(store.pending().is_empty());
}

#[tokio::test]
async fn idle_sessions_expire_and_the_session_cap_evicts_the_least_recent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.jsonl");
    let (now, clock) = clock();
    let opts = SessionOptions { ttl: Duration::from_secs(3600), max_sessions: 2, ..options(clock.clone()) };
    let store = SessionStore::open(&path, opts.clone()).unwrap();
    add_turn(&store, "a", 1, "a1").await;
    now.fetch_add(10, Ordering::SeqCst);
    add_turn(&store, "b", 1, "b1").await;
    now.fetch_add(10, Ordering::SeqCst);
    add_turn(&store, "a", 2, "a2").await;
    now.fetch_add(10, Ordering::SeqCst);
    add_turn(&store, "c", 1, "c1").await;
    assert!(store.history(&key("b")).is_empty(), "b was updated least recently");
    assert_eq!(store.history(&key("a")).len(), 2);
    now.fetch_add(3591, Ordering::SeqCst);
    assert!(store.history(&key("a")).is_empty(), "a is idle for more than the TTL");
    assert_eq!(store.history(&key("c")), vec![turn("c1")]);
    drop(store);
    // Replay applies the same bounds.
    let store = SessionStore::open(&path, opts).unwrap();
    assert!(store.history(&key("a")).is_empty() && store.history(&key("b")).is_empty());
    assert_eq!(store.history(&key("c")), vec![turn("c1")]);
}

#[tokio::test]
async fn dedup_window_forgets_the_oldest_ids_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.jsonl");
    let (_, clock) = clock();
    let opts = SessionOptions { dedup_ids: 3, ..options(clock) };
    let store = SessionStore::open(&path, opts.clone()).unwrap();
    for n in 0..5 {
        let inbound = message("a", n, "hi");
        store.accept(&inbound).await.unwrap();
        store.done(&inbound.event_id).await.unwrap();
    }
    let seen =
        |store: &SessionStore| (0..5).map(|n| store.is_duplicate(&message("a", n, "").event_id)).collect::<Vec<_>>();
    assert_eq!(seen(&store), [false, false, true, true, true]);
    drop(store);
    let store = SessionStore::open(&path, opts).unwrap();
    assert_eq!(seen(&store), [false, false, true, true, true]);
}

fn stored_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
}

#[tokio::test]
async fn the_journal_stays_bounded_by_snapshots_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.jsonl");
    let (_, clock) = clock();
    let opts = SessionOptions { snapshot_every: 8, segment_bytes: 8192, max_sessions: 4, ..options(clock) };
    let store = SessionStore::open(&path, opts.clone()).unwrap();
    let text = "z".repeat(500);
    for n in 0..400 {
        add_turn(&store, &format!("c{}", n % 7), n, &format!("{n} {text}")).await;
    }
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    let bytes = stored_bytes(dir.path());
    // 400 turns of ~1 KiB each were written; the disk holds the snapshot and a few segments.
    assert!(files < 12, "{files} files: old segments were not removed");
    assert!(bytes < 150_000, "{bytes} bytes on disk: the journal is not bounded");
    drop(store);
    let store = SessionStore::open(&path, opts).unwrap();
    let last = store.history(&key("c0"));
    assert_eq!(last.last().unwrap().user, format!("399 {text}"));
    assert!(store.is_duplicate(&message("c0", 399, "").event_id));
}

// ---------------------------------------------------------------- gateway

/// Records every reply, in order.
#[derive(Default)]
struct Replies {
    sent: Mutex<Vec<(String, String, String)>>,
}

impl Replies {
    fn all(&self) -> Vec<(String, String, String)> {
        self.sent.lock().unwrap().clone()
    }
    fn texts(&self) -> Vec<String> {
        self.all().into_iter().map(|(_, _, text)| text).collect()
    }
    /// Waits (at most a minute, against hangs) until `n` replies were sent.
    async fn wait_for(&self, n: usize) {
        for _ in 0..6000 {
            if self.sent.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("only {} of {n} replies were sent", self.sent.lock().unwrap().len());
    }
}

impl Replier for Replies {
    fn reply<'a>(&'a self, inbound: &'a Inbound, text: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let entry = (inbound.conversation_id.clone(), inbound.event_id.clone(), text.to_owned());
            self.sent.lock().unwrap().push(entry);
            Ok(())
        })
    }
}

/// Answers `answer to <question>` after a random small delay; records what it was asked with
/// how much history; `block` makes it never answer that question; `fail` makes it fail.
#[derive(Default)]
struct Model {
    asked: Mutex<Vec<(String, String, usize)>>,
    block: Option<String>,
    fail: Option<String>,
    jitter: bool,
}

impl Responder for Model {
    fn answer<'a>(
        &'a self,
        inbound: &'a Inbound,
        history: &'a [Turn],
        question: &'a str,
    ) -> BoxFuture<'a, Result<Answer, String>> {
        Box::pin(async move {
            self.asked.lock().unwrap().push((inbound.conversation_id.clone(), question.to_owned(), history.len()));
            if self.jitter {
                let delay = rand::random_range(0..3);
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            if self.block.as_deref() == Some(question) {
                std::future::pending::<()>().await;
            }
            if self.fail.as_deref() == Some(question) {
                return Err("model unavailable".into());
            }
            Ok(Answer { text: format!("answer to {question}"), run_id: Some("run_1".into()) })
        })
    }
}

struct Incidents;

impl IncidentLookup for Incidents {
    fn describe<'a>(&'a self, namespace: &'a str, id: &'a str) -> akritas::bots::BoxFuture<'a, Option<String>> {
        let found =
            (namespace == "ops" && id == "inc_1").then(|| "inc_1: open, latest result: disk full on node-3".to_owned());
        Box::pin(async move { found })
    }
}

fn gateway(store: SessionStore, model: Arc<Model>, replies: Arc<Replies>, queue_size: usize) -> Arc<Gateway> {
    let settings = GatewaySettings { queue_size, ..GatewaySettings::default() };
    Arc::new(Gateway::new(store, model, replies, Arc::new(Incidents), settings))
}

fn open_store(dir: &Path) -> SessionStore {
    SessionStore::open(&dir.join("bots.jsonl"), SessionOptions::default()).unwrap()
}

#[tokio::test]
async fn a_duplicate_event_is_acknowledged_and_processed_once() {
    let dir = tempfile::tempdir().unwrap();
    let (model, replies) = (Arc::new(Model::default()), Arc::new(Replies::default()));
    let gw = gateway(open_store(dir.path()), model.clone(), replies.clone(), 8);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    let first = message("a", 1, "hello");
    assert!(!gw.submit(first.clone()).await.unwrap().duplicate);
    assert!(gw.submit(first.clone()).await.unwrap().duplicate);
    replies.wait_for(1).await;
    assert!(gw.submit(first).await.unwrap().duplicate, "still a duplicate once answered");
    gw.submit(message("a", 2, "next")).await.unwrap();
    replies.wait_for(2).await;
    assert_eq!(replies.texts(), ["answer to hello", "answer to next"]);
    assert_eq!(model.asked.lock().unwrap().len(), 2);
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_full_queue_refuses_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(open_store(dir.path()), Arc::default(), Arc::default(), 2);
    gw.submit(message("a", 1, "one")).await.unwrap();
    gw.submit(message("b", 1, "two")).await.unwrap();
    let third = message("c", 1, "three");
    assert!(matches!(gw.submit(third.clone()).await, Err(SubmitError::Full { limit: 2 })));
    assert!(!gw.store().is_duplicate(&third.event_id), "a refused message is not remembered");
    assert!(gw.submit(message("a", 1, "one")).await.unwrap().duplicate);
    assert_eq!(gw.store().pending().len(), 2);
}

#[tokio::test]
async fn commands_are_answered_without_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (model, replies) = (Arc::new(Model::default()), Arc::new(Replies::default()));
    let gw = gateway(open_store(dir.path()), model.clone(), replies.clone(), 16);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    let script = [
        "/start",
        "first question",
        "/status",
        "/new",
        "/status",
        "/incident inc_1",
        "/incident inc_2",
        "/incident",
        "/ask",
        "/deploy",
        "/ask@akritas_bot second",
    ];
    for (n, text) in script.iter().enumerate() {
        gw.submit(message("a", n, text)).await.unwrap();
    }
    replies.wait_for(script.len()).await;
    assert_eq!(
        replies.texts(),
        [
            commands::HELP.to_owned(),
            "answer to first question".into(),
            commands::status_text(2, 20),
            commands::RESET.into(),
            commands::status_text(0, 20),
            "inc_1: open, latest result: disk full on node-3".into(),
            commands::incident_not_found("inc_2"),
            commands::INCIDENT_USAGE.into(),
            commands::ASK_WITHOUT_TEXT.into(),
            commands::UNSUPPORTED.into(),
            "answer to second".into(),
        ]
    );
    let asked = model.asked.lock().unwrap().clone();
    assert_eq!(asked, [("a".into(), "first question".into(), 0), ("a".into(), "second".into(), 0)]);
    assert!(gw.store().pending().is_empty());
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_model_failure_gets_the_failure_reply_and_is_not_retained() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Model { fail: Some("boom".into()), ..Model::default() });
    let replies = Arc::new(Replies::default());
    let gw = gateway(open_store(dir.path()), model, replies.clone(), 8);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    gw.submit(message("a", 1, "boom")).await.unwrap();
    replies.wait_for(1).await;
    assert_eq!(replies.texts(), [commands::FAILURE]);
    assert!(gw.store().history(&key("a")).is_empty());
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_messages_over_twenty_conversations_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let model = Arc::new(Model { jitter: true, ..Model::default() });
    let replies = Arc::new(Replies::default());
    let gw = gateway(open_store(dir.path()), model.clone(), replies.clone(), 1024);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Random conversations: neighbours in the queue often share one, so a worker that ran
    // them side by side would reorder them.
    for n in 0..1000 {
        let conversation = format!("c{}", rand::random_range(0..20));
        let text = format!("q{n}");
        gw.submit(message(&conversation, n, &text)).await.unwrap();
        sent.entry(conversation).or_default().push(text);
    }
    replies.wait_for(1000).await;
    let mut asked: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (conversation, question, _) in model.asked.lock().unwrap().iter() {
        asked.entry(conversation.clone()).or_default().push(question.clone());
    }
    assert_eq!(asked, sent, "the model saw each conversation's messages in order");
    let mut answered: HashMap<String, Vec<String>> = HashMap::new();
    for (conversation, _, text) in replies.all() {
        answered.entry(conversation).or_default().push(text);
    }
    for (conversation, questions) in &sent {
        let expected: Vec<String> = questions.iter().map(|q| format!("answer to {q}")).collect();
        assert_eq!(answered[conversation], expected, "replies of {conversation} out of order");
    }
    // Each conversation's history is its own last ten turns (a turn is recorded just after
    // its reply was delivered: wait for the last one).
    for (conversation, questions) in &sent {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while gw.store().history(&key(conversation)).last().map(|t| t.user.as_str())
            != questions.last().map(String::as_str)
            && std::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let history = gw.store().history(&key(conversation));
        let users: Vec<&str> = history.iter().map(|t| t.user.as_str()).collect();
        let expected: Vec<&str> = questions[questions.len().saturating_sub(10)..].iter().map(String::as_str).collect();
        assert_eq!(users, expected, "history of {conversation}");
    }
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_restart_mid_conversation_keeps_history_and_answers_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let replies = Arc::new(Replies::default());
    {
        let model = Arc::new(Model { block: Some("third".into()), ..Model::default() });
        let gw = gateway(open_store(dir.path()), model.clone(), replies.clone(), 8);
        let cancel = CancellationToken::new();
        let run = tokio::spawn(gw.clone().run(cancel.clone()));
        for (n, text) in ["first", "second", "third"].iter().enumerate() {
            gw.submit(message("a", n, text)).await.unwrap();
        }
        replies.wait_for(2).await;
        while model.asked.lock().unwrap().len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The process stops while the model works on "third".
        cancel.cancel();
        run.await.unwrap();
    }
    assert_eq!(replies.texts(), ["answer to first", "answer to second"]);

    let model = Arc::new(Model::default());
    let gw = gateway(open_store(dir.path()), model.clone(), replies.clone(), 8);
    assert_eq!(gw.store().pending(), vec![message("a", 2, "third")]);
    assert!(gw.submit(message("a", 0, "first")).await.unwrap().duplicate, "an answered id stays a duplicate");
    assert!(gw.submit(message("a", 2, "third")).await.unwrap().duplicate, "a pending id is a duplicate");
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    replies.wait_for(3).await;
    gw.submit(message("a", 3, "fourth")).await.unwrap();
    replies.wait_for(4).await;
    assert_eq!(replies.texts(), ["answer to first", "answer to second", "answer to third", "answer to fourth"]);
    // "third" was answered with the two turns from before the restart.
    let asked = model.asked.lock().unwrap().clone();
    assert_eq!(asked, [("a".into(), "third".into(), 2), ("a".into(), "fourth".into(), 3)]);
    cancel.cancel();
    run.await.unwrap();
}

/// A replier that takes 300 ms to send each reply.
#[derive(Default)]
struct SlowReplies {
    started: std::sync::atomic::AtomicUsize,
    sent: std::sync::atomic::AtomicUsize,
}

impl Replier for SlowReplies {
    fn reply<'a>(&'a self, _inbound: &'a Inbound, _text: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            self.sent.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_while_a_reply_is_sent_records_it_so_the_restart_does_not_answer_again() {
    let dir = tempfile::tempdir().unwrap();
    let replies = Arc::new(SlowReplies::default());
    let settings = GatewaySettings::default();
    let gw = Arc::new(Gateway::new(
        open_store(dir.path()),
        Arc::new(Model::default()),
        replies.clone(),
        Arc::new(Incidents),
        settings,
    ));
    let cancel = CancellationToken::new();
    let run = tokio::spawn(gw.clone().run(cancel.clone()));
    gw.submit(message("a", 1, "hello")).await.unwrap();
    for _ in 0..500 {
        if replies.started.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The host stops while the reply is on its way: the gateway ends once it is sent and recorded.
    cancel.cancel();
    run.await.unwrap();
    assert_eq!(replies.sent.load(Ordering::SeqCst), 1);
    drop(gw);
    let store = open_store(dir.path());
    assert!(store.pending().is_empty(), "the message whose reply went out is not pending after the restart");
    assert_eq!(store.history(&key("a")).len(), 1);
}
