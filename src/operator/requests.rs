//! `Run` objects created by users (without the managed-by label) are requests: the
//! host runs a read-only investigation of the prompt in the Run's own namespace
//! (it sees only that namespace's tools, skills and knowledge) and writes the
//! outcome to the Run's status, in that namespace.
//!
//! The set of answered Runs is bounded by the Run objects that still exist: a
//! deletion forgets its Run, and every re-list keeps only the Runs it listed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures_util::StreamExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::api::{FIELD_MANAGER, dynamic_api};
use super::projection::{MANAGED_BY, REQUESTED_BY, bounded, run_status};
use crate::engine::conversation::{Speaker, Turn};
use crate::engine::request::RunRequest;
use crate::engine::run::Engine;
use crate::resources::{API_VERSION, Kind};

/// A Run object: namespace and name.
type RunKey = (String, String);

/// The Runs already answered, per watch stream (one per watched namespace).
#[derive(Debug, Default)]
struct Answered {
    streams: BTreeMap<usize, Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    answered: BTreeSet<RunKey>,
    /// During a re-list: the Runs listed so far.
    listing: Option<BTreeSet<RunKey>>,
}

impl Answered {
    /// Applies one watch event of `stream`; returns the object to act on when it
    /// was not seen before.
    fn observe(&mut self, stream: usize, event: Event<DynamicObject>) -> Option<DynamicObject> {
        let seen = self.streams.entry(stream).or_default();
        let key = |object: &DynamicObject| Some((object.metadata.namespace.clone()?, object.metadata.name.clone()?));
        match event {
            Event::Init => seen.listing = Some(BTreeSet::new()),
            Event::InitDone => {
                if let Some(listed) = seen.listing.take() {
                    seen.answered.retain(|key| listed.contains(key));
                }
            }
            Event::Delete(object) => {
                if let Some(key) = key(&object) {
                    seen.answered.remove(&key);
                }
            }
            Event::InitApply(object) | Event::Apply(object) => {
                let key = key(&object)?;
                if let Some(listing) = seen.listing.as_mut() {
                    listing.insert(key.clone());
                }
                return seen.answered.insert(key).then_some(object);
            }
        }
        None
    }

    fn len(&self) -> usize {
        self.streams.values().map(|s| s.answered.len()).sum()
    }
}

/// Serves Runs created by users in `namespaces` (empty: every namespace): each new
/// one (no managed-by label, no phase) gets a read-only investigation of its
/// prompt and the outcome in its status. Stops (with any write in flight) on `cancel`.
pub async fn serve_requests(client: Client, namespaces: Vec<String>, engine: Arc<Engine>, cancel: CancellationToken) {
    let config = watcher::Config::default().labels(&format!("!{MANAGED_BY}"));
    let scopes: Vec<Option<String>> =
        if namespaces.is_empty() { vec![None] } else { namespaces.into_iter().map(Some).collect() };
    let streams = scopes.iter().enumerate().map(|(index, namespace)| {
        let api = dynamic_api(&client, Kind::Run, namespace.as_deref());
        watcher(api, config.clone()).default_backoff().map(move |event| (index, event)).boxed()
    });
    let mut events = futures_util::stream::select_all(streams);
    let mut answered = Answered::default();
    loop {
        let (stream, event) = tokio::select! {
            _ = cancel.cancelled() => return,
            next = events.next() => match next {
                None => return,
                Some((_, Err(error))) => { tracing::warn!(%error, "watch of Run requests failed; retrying"); continue; }
                Some((stream, Ok(event))) => (stream, event),
            },
        };
        let Some(object) = answered.observe(stream, event) else { continue };
        tracing::debug!(answered = answered.len(), "Run requests remembered");
        let (Some(ns), Some(name)) = (object.metadata.namespace.clone(), object.metadata.name.clone()) else {
            continue;
        };
        let api: Api<DynamicObject> = dynamic_api(&client, Kind::Run, Some(&ns));
        match object.data["status"]["phase"].as_str() {
            None => {
                let (spec, engine, cancel) = (object.data["spec"].clone(), engine.clone(), cancel.clone());
                tokio::spawn(async move {
                    cancel.run_until_cancelled(execute_request(&api, &name, &ns, &spec, &engine)).await;
                });
            }
            Some("Running") | Some("Pending") => {
                // Claimed by a process that stopped: it will not finish.
                let status = json!({"phase": "Failed", "error": "Akritas stopped while this Run was executing; create a new Run"});
                let _ = cancel.run_until_cancelled(write_request_status(&api, &name, &status)).await;
            }
            Some(_) => {}
        }
    }
}

async fn write_request_status(api: &Api<DynamicObject>, name: &str, status: &Value) -> kube::Result<()> {
    let patch = json!({"apiVersion": API_VERSION, "kind": "Run", "status": status});
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)).await.map(|_| ())
}

/// The Run an object requests: in the object's namespace, for its prompt.
fn request(namespace: &str, name: &str, spec: &Value) -> RunRequest {
    let prompt = spec["prompt"].as_str().unwrap_or_default().to_string();
    let context: BTreeMap<String, String> = spec["context"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect())
        .unwrap_or_default();
    RunRequest {
        namespace: namespace.to_string(),
        source: "kubernetes".into(),
        actor: format!("run:{namespace}/{name}"),
        turns: vec![Turn { role: Speaker::User, content: prompt }],
        context,
        response_language: spec["responseLanguage"].as_str().map(str::to_string),
        metadata: BTreeMap::from([(REQUESTED_BY.to_string(), json!(format!("{namespace}/{name}")))]),
        ..RunRequest::default()
    }
}

async fn execute_request(api: &Api<DynamicObject>, name: &str, namespace: &str, spec: &Value, engine: &Engine) {
    let started = jiff::Timestamp::now().to_string();
    if let Err(error) = write_request_status(api, name, &json!({"phase": "Running", "startedAt": started})).await {
        tracing::warn!(run = %name, %error, "cannot claim the Run request");
        return;
    }
    let outcome = engine.run(request(namespace, name, spec)).await;
    let run_id = match &outcome {
        Ok(outcome) => outcome.run_id.clone(),
        Err(error) => error.run_id().cloned(),
    };
    let run = match (run_id, engine.audit()) {
        (Some(id), Some(audit)) => audit.get(&id).await.unwrap_or_else(|error| {
            tracing::warn!(run = %name, %error, "cannot read the Run for the request's status");
            None
        }),
        _ => None,
    };
    let mut status = run.map(|r| run_status(&r)).unwrap_or_else(|| json!({}));
    status["startedAt"] = json!(started);
    match outcome {
        Ok(outcome) => {
            status["phase"] = json!("Succeeded");
            status["summary"] = json!(bounded(&outcome.answer));
        }
        Err(error) => {
            status["phase"] = json!("Failed");
            status["error"] = json!(bounded(&error.to_string()));
        }
    }
    if let Err(error) = write_request_status(api, name, &status).await {
        tracing::warn!(run = %name, %error, "Run request result not written");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::operator::mock::{api_server, status};

    fn run(namespace: &str, name: &str, version: &str) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "Run",
               "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
               "spec": {"prompt": "Is db-7 healthy?"}})
    }

    fn object(namespace: &str, name: &str) -> DynamicObject {
        serde_json::from_value(run(namespace, name, "1")).unwrap()
    }

    fn engine() -> Arc<Engine> {
        let settings = crate::config::Settings::default();
        let http = crate::outbound::client(Duration::from_secs(1)).unwrap();
        let llm = crate::llm::LlmClient::new(
            crate::llm::LlmConfig {
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key: None,
                model: None,
                timeout: Duration::from_secs(1),
                max_response_bytes: 1024,
                context_tokens: None,
                system_instructions: None,
                protocol: crate::llm::structured::Protocol::Auto,
            },
            http,
        )
        .unwrap();
        let tools = crate::tools::RegistryBuilder::new(crate::tools::ToolLimits::default()).build();
        Arc::new(Engine::new(
            crate::app::narrow::engine(&settings),
            llm,
            tools,
            None,
            crate::catalog::CatalogStore::new(),
            None,
        ))
    }

    #[test]
    fn answered_runs_are_forgotten_when_deleted_or_missing_from_a_relist() {
        let mut answered = Answered::default();
        assert!(answered.observe(0, Event::Apply(object("ops", "a"))).is_some());
        assert!(answered.observe(0, Event::Apply(object("ops", "a"))).is_none(), "answered once");
        assert!(answered.observe(0, Event::Apply(object("ops", "b"))).is_some());
        answered.observe(0, Event::Delete(object("ops", "a")));
        assert_eq!(answered.len(), 1, "a deleted Run is forgotten");
        // A re-list (after a watch gap) that no longer shows `b` forgets it too.
        answered.observe(0, Event::Init);
        assert!(answered.observe(0, Event::InitApply(object("ops", "c"))).is_some());
        answered.observe(0, Event::InitDone);
        assert_eq!(answered.len(), 1, "only what still exists is kept");
        // A relist of another stream leaves this one alone.
        answered.observe(1, Event::Init);
        answered.observe(1, Event::InitDone);
        assert!(answered.observe(0, Event::Apply(object("ops", "c"))).is_none());
        let mut bounded = Answered::default();
        for i in 0..10_000 {
            bounded.observe(0, Event::Apply(object("ops", &format!("r{i}"))));
            bounded.observe(0, Event::Delete(object("ops", &format!("r{i}"))));
        }
        assert_eq!(bounded.len(), 0, "memory follows the objects that exist");
    }

    #[test]
    fn a_user_run_runs_in_its_own_namespace() {
        let request = request("team-b", "ask", &json!({"prompt": "Why?", "context": {"service": "db"}}));
        assert_eq!(request.namespace, "team-b");
        assert_eq!(request.actor, "run:team-b/ask");
        assert_eq!(request.context["service"], "db");
    }

    #[tokio::test]
    async fn a_run_deleted_and_created_again_with_the_same_name_is_answered_again() {
        // The watch shows `ask` added, deleted, and added again; every claim of it is
        // refused (500), so no investigation starts and the claims can be counted.
        let claims = Arc::new(Mutex::new(Vec::new()));
        let seen = claims.clone();
        let (client, server) = api_server(move |method, uri| {
            if method == "PATCH" {
                seen.lock().unwrap().push(uri.to_string());
                return Some((500, status(500, "InternalError")));
            }
            if !uri.contains("watch=true") {
                return Some((
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
                ));
            }
            let event = |kind: &str, version: &str| json!({"type": kind, "object": run("ops", "ask", version)});
            match uri.split("resourceVersion=").nth(1).and_then(|v| v.split('&').next()) {
                Some("1") => Some((200, event("ADDED", "2"))),
                Some("2") => Some((200, event("DELETED", "3"))),
                Some("3") => Some((200, event("ADDED", "4"))),
                _ => None,
            }
        });
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve_requests(client, vec!["ops".into()], engine(), cancel.clone()));
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while claims.lock().unwrap().len() < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        cancel.cancel();
        task.await.unwrap();
        server.abort();
        let claims = claims.lock().unwrap().clone();
        assert!(waited.is_ok(), "the re-created Run was never claimed: {claims:?}");
        assert!(claims.iter().all(|uri| uri.starts_with("/apis/akritas.io/v1alpha1/namespaces/ops/runs/ask/status")));
    }
}
