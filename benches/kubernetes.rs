//! The Kubernetes tools against a local API server (etcd + kube-apiserver built by
//! `e2e/kube/build.sh`) with a kubelet stand-in for `pods/log`: p50/p99 latency of
//! each tool, and the host overhead of an alert investigation that calls three of
//! them (total minus model time; the scripted model answers after a fixed delay).
//! Prints numbers; asserts nothing about speed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::catalog::CatalogStore;
use akritas::engine::conversation::{Speaker, Turn};
use akritas::engine::request::RunRequest;
use akritas::engine::run::Engine;
use akritas::kubernetes::{KubeTools, Limits, Reach, ScopePolicy};
use akritas::llm::{LlmClient, LlmConfig};
use akritas::tools::{AllowAll, RegistryBuilder, ScopedTools, ToolCall, ToolLimits, ToolName, openai_alias};
use akritas_testkit::kube_api::KubeApi;
use akritas_testkit::kubelet::Kubelet;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step, offers};
use serde_json::{Value, json};

const NAMESPACE: &str = "bench";
const POD: &str = "web-0";
const CALLS: usize = 200;
const RUNS: usize = 10;
const MODEL_DELAY: Duration = Duration::from_millis(50);

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let api = KubeApi::start().await;
        api.create_namespace(NAMESPACE);
        let kubelet = Kubelet::start(&api, "node-1").await;
        setup(&api, &kubelet);
        let client = api.client(&api.admin_kubeconfig).await;
        let policy = ScopePolicy { reach: Reach::All, cluster_readers: [NAMESPACE.to_string()].into() };
        let tools = Arc::new(KubeTools::new(client, policy, Limits::default()));
        let registry = tools.registry_for(NAMESPACE);
        let cases = [
            ("kubernetes.get", json!({"kind": "Deployment", "name": "web"})),
            ("kubernetes.list", json!({"kind": "Pod"})),
            ("kubernetes.pod_status", json!({"name": POD})),
            ("kubernetes.events", json!({"kind": "Pod", "name": POD})),
            ("kubernetes.logs", json!({"name": POD, "container": "app", "previous": true})),
            ("kubernetes.rollout_history", json!({"kind": "Deployment", "name": "web"})),
            ("kubernetes.node_status", json!({"name": "node-1"})),
            ("kubernetes.recent_changes", json!({"sinceMinutes": 60})),
        ];
        println!("Kubernetes tools against the local API server, {CALLS} calls each:");
        for (name, arguments) in cases {
            let call = ToolCall { id: "call-1".into(), name: name.into(), arguments: arguments.to_string() };
            let mut times = Vec::with_capacity(CALLS);
            let mut bytes = 0;
            for n in 0..CALLS + 5 {
                let result = registry.execute(&call, &AllowAll).await;
                let output = result.output.unwrap_or_else(|| panic!("{name}: {:?}", result.error));
                bytes = output.to_string().len();
                if n >= 5 {
                    times.push(result.duration);
                }
            }
            times.sort();
            println!(
                "  {name:<28} p50 {:>6.2} ms  p99 {:>6.2} ms  output {bytes} bytes",
                ms(times[CALLS / 2]),
                ms(times[CALLS * 99 / 100])
            );
        }
        investigation_overhead(tools).await;
    });
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A Deployment → ReplicaSet → Pod chain in CrashLoopBackOff, its Events and logs.
fn setup(api: &KubeApi, kubelet: &Kubelet) {
    api.apply(&format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {NAMESPACE}}}\nspec:\n  replicas: 1\n  \
         selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      \
         containers: [{{name: app, image: registry.example/web:1.0, env: [{{name: DB_PASSWORD, value: bench-secret}}]}}]\n"
    ));
    let uid = |kind: &str, name: &str| {
        let object: Value =
            serde_json::from_str(&api.kubectl_ok(&["get", kind, name, "-n", NAMESPACE, "-o", "json"])).unwrap();
        object["metadata"]["uid"].as_str().unwrap().to_string()
    };
    api.apply(&format!(
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: web-1\n  namespace: {NAMESPACE}\n  \
         annotations: {{deployment.kubernetes.io/revision: \"1\"}}\n  ownerReferences: [{{apiVersion: apps/v1, kind: Deployment, \
         name: web, uid: {}, controller: true}}]\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    \
         metadata: {{labels: {{app: web}}}}\n    spec: {{containers: [{{name: app, image: registry.example/web:1.0}}]}}\n",
        uid("deployment", "web")
    ));
    api.apply(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {POD}\n  namespace: {NAMESPACE}\n  labels: {{app: web}}\n  \
         ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-1, uid: {}, controller: true}}]\nspec:\n  \
         nodeName: node-1\n  containers: [{{name: app, image: registry.example/web:1.0, resources: {{requests: {{cpu: 250m, memory: 256Mi}}}}}}]\n",
        uid("replicaset", "web-1")
    ));
    let status = json!({"phase": "Running", "containerStatuses": [{"name": "app", "image": "registry.example/web:1.0",
        "imageID": "", "ready": false, "restartCount": 7, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": jiff::Timestamp::now().to_string()}}}]});
    api.patch_status("pod", POD, NAMESPACE, &status);
    let now = jiff::Timestamp::now();
    for n in 0..20 {
        api.apply(&format!(
            "apiVersion: v1\nkind: Event\nmetadata: {{name: {POD}.{n}, namespace: {NAMESPACE}}}\n\
             involvedObject: {{apiVersion: v1, kind: Pod, name: {POD}, namespace: {NAMESPACE}}}\nreason: {}\n\
             message: \"event {n}\"\ntype: Warning\ncount: {}\nfirstTimestamp: \"{now}\"\nlastTimestamp: \"{now}\"\n",
            if n % 2 == 0 { "BackOff" } else { "Unhealthy" },
            n + 1
        ));
    }
    let line = "2026-12-01T10:00:00Z INFO handled a request in 12 ms";
    kubelet.set_repeated_log(NAMESPACE, POD, "app", true, line, 2_000);
}

/// An alert investigation (plan of three Kubernetes checks, answer, structured
/// result) with a model that answers after [`MODEL_DELAY`]: total and total minus
/// model time.
async fn investigation_overhead(tools: Arc<KubeTools>) {
    let alias = |name: &str| openai_alias(&ToolName::try_from(name).unwrap());
    let (plan, submit) = (alias("local.investigation.submit_plan"), alias("local.investigation.submit_result"));
    let llm = ScriptedLlm::start_with(move |_, request: &Value| {
        let step = if offers(request, &plan) {
            let checks = json!([
                {"step": "pod", "tool": "kubernetes.pod_status", "arguments": {"name": POD}, "reason": "r"},
                {"step": "logs", "tool": "kubernetes.logs", "arguments": {"name": POD, "previous": true}, "reason": "r"},
                {"step": "events", "tool": "kubernetes.events", "arguments": {"kind": "Pod", "name": POD}, "reason": "r"}
            ]);
            Step::from(Reply::ToolCalls(vec![("p".into(), plan.clone(), json!({"checks": checks, "gaps": []}))]))
        } else if offers(request, &submit) {
            Step::from(Reply::ToolCalls(vec![(
                "r".into(),
                submit.clone(),
                json!({"finding_status": "confirmed", "actionability": "requires_human", "confidence": "high",
                       "summary": "OOMKilled", "impact": "", "evidence": ["tool-call:call-1 \"OOMKilled\""], "ruled_out": [],
                       "affected_components": ["web"], "recommended_actions": ["raise the limit"], "production_writes": 0}),
            )]))
        } else {
            Step::from(Reply::Content("The container is OOMKilled.".into()))
        };
        step.with_delay(MODEL_DELAY)
    })
    .await;
    llm.set_recording(false);
    let engine = engine(&llm);
    engine.set_scoped_tools(Some(tools));
    let mut overheads = Vec::new();
    let mut totals = Vec::new();
    for run in 0..RUNS + 1 {
        let started = Instant::now();
        let outcome = engine.run(request()).await.unwrap();
        let total = started.elapsed();
        assert!(outcome.investigation.is_some(), "no InvestigationResult");
        if run > 0 {
            let model = MODEL_DELAY * outcome.usage.model_calls;
            totals.push(total);
            overheads.push(total.saturating_sub(model));
        }
    }
    overheads.sort();
    totals.sort();
    println!(
        "investigation (3 Kubernetes checks, model answering after {} ms): total p50 {:.1} ms, host overhead \
         (total minus model time) p50 {:.1} ms, max {:.1} ms over {RUNS} Runs",
        MODEL_DELAY.as_millis(),
        ms(totals[RUNS / 2]),
        ms(overheads[RUNS / 2]),
        ms(overheads[RUNS - 1])
    );
}

fn request() -> RunRequest {
    RunRequest {
        namespace: NAMESPACE.into(),
        source: "bench".into(),
        actor: "bench".into(),
        turns: vec![Turn { role: Speaker::User, content: "KubePodCrashLooping for web-0 in bench.".into() }],
        investigate: true,
        ..Default::default()
    }
}

fn engine(llm: &ScriptedLlm) -> Engine {
    let settings = akritas_testkit::host::settings();
    let client = LlmClient::new(LlmConfig::new(llm.url.clone()), reqwest::Client::new()).unwrap();
    let tools = RegistryBuilder::new(ToolLimits::default()).build();
    Engine::new(settings, client, tools, None, CatalogStore::new(), None)
}
