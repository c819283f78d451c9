//! Operator mode against a real API server (etcd + kube-apiserver from
//! `e2e/kube/build.sh`): the time from creating a Skill to its `Ready=True` status
//! for the same generation (p50/p99 over 100 objects created one after another),
//! then the operator's memory with 1,000 Skills loaded.
//!
//! Run with `cargo bench --bench operator` (after `e2e/kube/build.sh`). Knobs:
//! `OPERATOR_BENCH_READY` (100 objects timed), `OPERATOR_BENCH_LOADED` (1000 objects).
//! Prints numbers; asserts nothing about time.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use akritas_testkit::kube_api;
use futures_util::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

fn knob(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).filter(|v| *v > 0).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

fn skill(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "akritas.io/v1alpha1", "kind": "Skill",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {"description": format!("Bench skill {name}"), "content": format!("Guidance for {name}."),
                 "match": [name]}
    }))
    .expect("skill object")
}

fn ready_for_generation(object: &DynamicObject) -> bool {
    let generation = object.metadata.generation;
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True" && c["observedGeneration"].as_i64() == generation)
}

fn rss(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse::<f64>().unwrap_or(0.0) / 1024.0)
            .unwrap_or(0.0)
    };
    format!("VmRSS={:.1} MiB VmHWM={:.1} MiB", field("VmRSS:"), field("VmHWM:"))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    akritas::install_crypto_provider();
    let timed = knob("OPERATOR_BENCH_READY", 100);
    let loaded = knob("OPERATOR_BENCH_LOADED", 1000);
    let api = kube_api::KubeApi::start().await;
    println!("operator: API server ready in {:?}", api.startup);
    api.install_crds(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds"));
    api.create_operator_namespace();
    api.create_namespace("bench");
    let rbac = Command::new(kube_api::e2e_binary("helm"))
        .args(["template", "akritas", "charts/akritas", "--namespace", kube_api::OPERATOR_NAMESPACE])
        .args(["--show-only", "templates/rbac.yaml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("helm");
    api.apply(&String::from_utf8_lossy(&rbac.stdout));

    let data = tempfile::tempdir().expect("data directory");
    let mut operator = Command::new(env!("CARGO_BIN_EXE_akritas"))
        .args(["serve", "--kubernetes"])
        .env("KUBECONFIG", api.operator_kubeconfig())
        .env("POD_NAMESPACE", kube_api::OPERATOR_NAMESPACE)
        .env("AKRITAS_ADDRESS", "127.0.0.1:0")
        .env("AKRITAS_LOG_FORMAT", "json")
        .env("AKRITAS_DATA_DIR", data.path())
        .env("AKRITAS_SKILLS_DIR", "")
        .env(
            "AKRITAS_SYSTEM_INSTRUCTIONS",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("instructions/SYSTEM.md"),
        )
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the operator");
    let stderr = operator.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("\"WARN\"") || line.contains("\"ERROR\"") {
                eprintln!("operator: {line}");
            }
        }
    });
    let pid = operator.id();

    let client = api.client(&api.admin_kubeconfig).await;
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("akritas.io", "v1alpha1", "Skill"), "skills");
    let skills: kube::Api<DynamicObject> = kube::Api::namespaced_with(client, "bench", &resource);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let watched = skills.clone();
    tokio::spawn(async move {
        let events = watcher(watched, watcher::Config::default()).default_backoff().applied_objects();
        tokio::pin!(events);
        while let Some(event) = events.next().await {
            if let Ok(object) = event
                && ready_for_generation(&object)
            {
                let _ = ready_tx.send((object.metadata.name.clone().unwrap_or_default(), Instant::now()));
            }
        }
    });
    // The operator is up once a first object becomes Ready.
    skills.create(&PostParams::default(), &skill("warm-up")).await.expect("create");
    let started = Instant::now();
    while ready_rx.recv().await.is_some_and(|(name, _)| name != "warm-up") {}
    println!("operator: first object Ready {:?} after its creation (operator start included)", started.elapsed());

    let mut latencies = Vec::with_capacity(timed);
    for i in 0..timed {
        let name = format!("timed-{i}");
        let created = Instant::now();
        skills.create(&PostParams::default(), &skill(&name)).await.expect("create");
        loop {
            let (ready, at) = tokio::time::timeout(Duration::from_secs(30), ready_rx.recv())
                .await
                .expect("Ready within 30 s")
                .expect("watch open");
            if ready == name {
                latencies.push(at - created);
                break;
            }
        }
    }
    latencies.sort();
    println!(
        "operator: create → Ready=True over {timed} Skills  p50={:.1} ms  p99={:.1} ms  max={:.1} ms",
        percentile(&latencies, 0.5).as_secs_f64() * 1000.0,
        percentile(&latencies, 0.99).as_secs_f64() * 1000.0,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1000.0
    );

    let bulk = Instant::now();
    let mut pending = std::collections::BTreeSet::new();
    let names: Vec<String> = (0..loaded.saturating_sub(timed + 1)).map(|i| format!("loaded-{i}")).collect();
    for chunk in names.chunks(50) {
        let creates = chunk.iter().map(|name| {
            let skills = skills.clone();
            async move { skills.create(&PostParams::default(), &skill(name)).await.map(|_| ()) }
        });
        for result in futures_util::future::join_all(creates).await {
            result.expect("create");
        }
        pending.extend(chunk.iter().cloned());
    }
    while !pending.is_empty() {
        match tokio::time::timeout(Duration::from_secs(120), ready_rx.recv()).await {
            Ok(Some((name, _))) => {
                pending.remove(&name);
            }
            _ => break,
        }
    }
    println!(
        "operator: {} Skills loaded, {} still not Ready, bulk of {} took {:?}; operator {}",
        loaded,
        pending.len(),
        names.len(),
        bulk.elapsed(),
        rss(pid)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!("operator: after 3 s idle with {loaded} Skills: {}", rss(pid));
    let _ = operator.kill();
    let _ = operator.wait();
}
