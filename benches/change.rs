//! The change pipeline on a 10,000-file workspace: preview host overhead (total
//! minus model time; the scripted model answers at once) for explicit files,
//! explicit files with a validator (the isolated copy of the whole tree is the
//! cost), and automatic discovery (the lexical scan of every file); then apply
//! latency (re-verify, stage, rename, fsync). Prints numbers; asserts nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use akritas::audit::AuditLog;
use akritas::change::ValidatorSpec;
use akritas::change::approvals::{ApprovalId, ApprovalOptions, ApprovalStore};
use akritas::change::service::{
    Approver, ChangeError, ChangeService, ChangeSettings, FetchedHead, PreviewRequest, Requester, ResolvedWorkspace,
    WorkspaceDirectory, WorkspaceView,
};
use akritas::change::validators::CopyLimits;
use akritas::engine::budget::BudgetLimits;
use akritas::llm::{LlmClient, LlmConfig};
use akritas_testkit::percentile;
use akritas_testkit::scripted_llm::{Reply, ScriptedLlm, Step};
use serde_json::json;

const FILES: usize = 10_000;
const PREVIEWS: usize = 20;
const TARGET: &str = "services/orders/config.yaml";

struct Directory {
    workspace: ResolvedWorkspace,
}

impl WorkspaceDirectory for Directory {
    fn resolve(&self, _: &str, name: &str) -> Result<ResolvedWorkspace, ChangeError> {
        let mut workspace = self.workspace.clone();
        if name == "validated" || name == "validated-changed" {
            workspace.validators = vec![ValidatorSpec {
                name: "true".into(),
                argv: vec!["true".into(), "{files}".into()],
                files: vec!["**".into()],
                timeout: Duration::from_secs(60),
                output_limit: 65536,
                env: Vec::new(),
                full_tree: name == "validated",
            }];
        }
        Ok(workspace)
    }
    fn list(&self) -> Vec<WorkspaceView> {
        Vec::new()
    }
    fn fetch<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<FetchedHead, ChangeError>> + Send + 'a>> {
        Box::pin(async { Err(ChangeError::Invalid("not a git workspace".into())) })
    }
}

fn tree(root: &Path) {
    // With the changed file, exactly FILES text files: discovery's limit.
    for i in 0..FILES - 1 {
        let dir = root.join(format!("area-{:02}/module-{:02}", i % 50, (i / 50) % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let body = format!("# module {i}\nname: component-{i}\nreplicas: {}\nimage: registry.local/app:{i}\n", i % 5);
        std::fs::write(dir.join(format!("file-{i}.yaml")), body.repeat(8)).unwrap();
    }
    std::fs::create_dir_all(root.join("services/orders")).unwrap();
    std::fs::write(root.join(TARGET), "orders:\n  replicas: 2\n  image: registry.local/orders:1.4.0\n").unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git").current_dir(root).args(args).output().unwrap();
        assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "."]);
    git(&["-c", "user.name=b", "-c", "user.email=b@example.com", "commit", "-qm", "tree"]);
}

fn main() {
    akritas::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().join("workspace");
    let started = Instant::now();
    tree(&root);
    println!("workspace: {FILES} files built and committed in {:.1} s", started.elapsed().as_secs_f64());
    // What this machine's filesystem costs for the same tree, as a yardstick for the copy.
    let copied = Instant::now();
    let status = std::process::Command::new("cp").arg("-r").arg(&root).arg(dir.path().join("cp-yardstick")).status();
    assert!(status.is_ok_and(|s| s.success()));
    println!("yardstick: `cp -r` of the same tree takes {:.2} s here", copied.elapsed().as_secs_f64());
    std::fs::remove_dir_all(dir.path().join("cp-yardstick")).unwrap();
    let llm = ScriptedLlm::start_with(|_, request| {
        if request["tools"][0]["function"]["name"] == "akritas_plan_repository_search" {
            let plan = json!({"queries": ["orders", "replicas"]});
            return Step::from(Reply::ToolCalls(vec![("p".into(), "akritas_plan_repository_search".into(), plan)]));
        }
        let replicas = request["messages"].to_string().contains("replicas: 3");
        let (old, new) = if replicas { ("replicas: 3", "replicas: 2") } else { ("replicas: 2", "replicas: 3") };
        let proposal = json!({"analysis": "scale orders", "edits": [{"operation": "replace", "path": TARGET, "old": old, "new": new}],
            "checks": ["watch the rollout"], "risks": ["more pods"], "rollback": "scale back", "clarifications": []});
        Step::from(Reply::ToolCalls(vec![("c".into(), "akritas_propose_edits".into(), proposal)]))
    })
    .await;
    let client = LlmClient::new(LlmConfig::new(llm.url.clone()), reqwest::Client::new()).unwrap();
    let audit = Arc::new(AuditLog::open(&dir.path().join("audit/akritas.jsonl")).unwrap());
    let options = ApprovalOptions {
        ttl: Duration::from_secs(1800),
        max_pending: 10_000,
        max_pending_per_namespace: 10_000,
        ..ApprovalOptions::default()
    };
    let approvals = ApprovalStore::open(&dir.path().join("change/approvals.jsonl"), options).unwrap();
    let workspace = ResolvedWorkspace {
        namespace: "default".into(),
        name: "bench".into(),
        dir: root.clone(),
        writable: true,
        validators: Vec::new(),
        publish: None,
        lock: Arc::new(tokio::sync::RwLock::new(())),
    };
    let settings = ChangeSettings {
        limits: BudgetLimits {
            max_duration_ms: 600_000,
            max_model_calls: 8,
            max_tool_calls: 0,
            max_tool_result_bytes: 0,
            max_retrieved_context_bytes: 0,
            max_context_tokens: 200_000,
            max_output_tokens: 100_000,
        },
        default_max_tokens: 1600,
        max_tokens_limit: 8192,
        temperature: 0.0,
        response_language: "en".into(),
        max_concurrent_previews: 2,
        max_previews_per_namespace: 2,
        queue_timeout: Duration::from_secs(60),
        copy_limits: CopyLimits::default(),
        validators: akritas::app::policy::validator_policy(&akritas::config::Settings::default()),
    };
    let service =
        Arc::new(ChangeService::new(client, Some(audit), approvals, Arc::new(Directory { workspace }), settings));
    let who = Requester { namespace: "default".into(), source: "bench".into(), actor: "bench".into() };
    println!("{:<44} {:>9} {:>9} {:>9} {:>9}", "preview (10,000-file workspace)", "p50 ms", "p95 ms", "model p50", "n");
    let mut pending = Vec::new();
    for (label, workspace, files) in [
        ("explicit file, no validator", "bench", vec![TARGET.to_string()]),
        ("explicit file, validator on a tree copy", "validated", vec![TARGET.to_string()]),
        ("explicit file, validator on changed files", "validated-changed", vec![TARGET.to_string()]),
        ("automatic discovery (scan), no validator", "bench", Vec::new()),
    ] {
        let (mut overhead, mut model) = (Vec::new(), Vec::new());
        // Copying the whole tree dominates: fewer samples keep the bench short.
        let samples = if workspace == "validated" { 5 } else { PREVIEWS };
        for _ in 0..samples {
            let request = PreviewRequest {
                workspace: workspace.into(),
                namespace: None,
                request: "Scale the orders service to three replicas.".into(),
                files: files.clone(),
                max_tokens: None,
                temperature: None,
            };
            let outcome = service.preview(request, who.clone()).await.expect("preview");
            overhead.push(outcome.timings.total_ms.saturating_sub(outcome.timings.model_ms));
            model.push(outcome.timings.model_ms);
            if let Some(id) = outcome.approval.as_ref().and_then(|a| a["id"].as_str()) {
                pending.push(id.to_string());
            }
        }
        println!(
            "{label:<44} {:>9} {:>9} {:>9} {:>9}",
            percentile(&mut overhead, 0.5),
            percentile(&mut overhead, 0.95),
            percentile(&mut model, 0.5),
            samples
        );
    }
    // Apply alternately flips replicas 2 → 3 → 2: each preview reads the current file.
    let mut applied = Vec::new();
    for _ in 0..PREVIEWS {
        let request = PreviewRequest {
            workspace: "bench".into(),
            namespace: None,
            request: "Flip the orders replicas.".into(),
            files: vec![TARGET.to_string()],
            max_tokens: None,
            temperature: None,
        };
        let outcome = service.preview(request, who.clone()).await.expect("preview");
        let id =
            outcome.approval.as_ref().and_then(|a| a["id"].as_str()).and_then(ApprovalId::parse).expect("approval");
        let started = Instant::now();
        service.apply(&id, Approver { name: "bench".into() }).await.expect("apply");
        applied.push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    println!(
        "apply (re-verify, stage, rename, fsync, audit): p50 {:.2} ms, p95 {:.2} ms over {PREVIEWS} applies",
        percentile(&mut applied, 0.5) as f64 / 1000.0,
        percentile(&mut applied, 0.95) as f64 / 1000.0
    );
    drop(pending);
}
