//! KnowledgeBase resources become indexes: built once, reused across restarts when
//! the content is unchanged, rebuilt when a runbook changes, removed with the
//! resource; directory, ConfigMap and inline sources; the search output names the
//! version of every base it searched.

use akritas_testkit as support;

use akritas::catalog::policy::ResourcePolicy;
use akritas::catalog::status::StatusBoard;
use akritas::catalog::{CatalogStore, directory, merge};
use akritas::engine::retrieval::Retriever;
use akritas::knowledge::bases::KnowledgeBases;
use support::host;

fn manifests(dir: &std::path::Path, runbooks: &std::path::Path) {
    std::fs::write(
        dir.join("kb.yaml"),
        format!(
            "apiVersion: akritas.io/v1alpha1\nkind: KnowledgeBase\nmetadata: {{name: runbooks, namespace: ops}}\nspec:\n  sources:\n    \
             - directory: {{path: \"{}\"}}\n    - configMap: {{name: extra}}\n    - inline:\n        name: tls.md\n        \
             title: Certificate renewals\n        url: https://wiki.example.com/tls\n        content: |\n          \
             Renew certificates with cert-manager; check the ACME challenge and the issuer secret.\n---\n\
             apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: extra, namespace: ops}}\ndata:\n  dns.md: |\n    \
             # DNS resolution failures\n    Check CoreDNS pods, upstream resolvers and the ndots setting of the pod.\n",
            runbooks.display()
        ),
    )
    .unwrap();
}

/// What a Run of namespace `ops` (where the test's KnowledgeBase lives) sees.
fn ops() -> akritas::tenancy::Scope {
    akritas::tenancy::Tenancy::default().scope("ops")
}

fn load(dir: &std::path::Path) -> CatalogStore {
    let store = CatalogStore::new();
    merge::apply(
        directory::DirectorySource::new(vec![dir.to_path_buf()], None).reload(),
        &store,
        &StatusBoard::default(),
    );
    store
}

#[tokio::test]
async fn knowledge_bases_build_reuse_rebuild_and_search() {
    let work = tempfile::tempdir().unwrap();
    let runbooks = work.path().join("runbooks");
    std::fs::create_dir_all(&runbooks).unwrap();
    for name in ["high-cpu.md", "postgres-connections.md", "disk-full.md"] {
        std::fs::copy(support::root().join("config/samples/runbooks").join(name), runbooks.join(name)).unwrap();
    }
    let resources = work.path().join("resources");
    std::fs::create_dir_all(&resources).unwrap();
    manifests(&resources, &runbooks);
    let storage = work.path().join("knowledge");
    let policy =
        ResourcePolicy { knowledge_roots: vec![runbooks.clone()], data_dir: storage.clone(), ..Default::default() };

    let bases = KnowledgeBases::new(400, Some(storage.clone()));
    assert!(!bases.is_available(&ops()));
    let refreshed = bases.refresh(&load(&resources).current(), &policy);
    assert_eq!(refreshed.len(), 1);
    let stats = refreshed[0].outcome.as_ref().unwrap();
    assert_eq!(stats.documents, 5, "three files, one ConfigMap key, one inline document");
    assert!(refreshed[0].rebuilt);
    assert!(bases.is_available(&ops()));

    let found = bases.search(&ops(), "ACME challenge certificate", 3).await.unwrap();
    let first = &found.output["results"][0];
    assert_eq!(first["title"], "Certificate renewals");
    assert_eq!(first["url"], "https://wiki.example.com/tls");
    assert!(first["score"].as_f64().unwrap() > 0.0);
    let version = found.versions["ops/runbooks"].clone();
    assert_eq!(found.output["knowledge_bases"]["ops/runbooks"], version.as_str());
    let dns = bases.search(&ops(), "CoreDNS ndots", 1).await.unwrap();
    // Another namespace does not see this knowledge base at all.
    let other = akritas::tenancy::Tenancy::default().scope("team-b");
    assert!(!bases.is_available(&other));
    let nothing = bases.search(&other, "CoreDNS ndots", 1).await.unwrap();
    assert_eq!(nothing.output["results"], serde_json::json!([]), "{}", nothing.output);
    let shared = akritas::tenancy::Tenancy::new(["ops".to_string()]).scope("team-b");
    assert!(bases.is_available(&shared), "a shared namespace's knowledge is searched by every namespace");
    assert_eq!(dns.output["results"][0]["document"], "configmap/extra/dns.md");

    // Unchanged content: nothing rebuilt, and a fresh process reopens the stored index.
    assert!(!bases.refresh(&load(&resources).current(), &policy)[0].rebuilt);
    let restarted = KnowledgeBases::new(400, Some(storage.clone()));
    assert!(!restarted.refresh(&load(&resources).current(), &policy)[0].rebuilt, "the stored index is reused");

    // A changed runbook: rebuilt under a new version, the old one removed.
    let file = runbooks.join("disk-full.md");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("Log rotation broken", "Log rotation broken by logrotate-zebra")).unwrap();
    let refreshed = restarted.refresh(&load(&resources).current(), &policy);
    assert!(refreshed[0].rebuilt);
    let hits = restarted.search(&ops(), "logrotate-zebra", 1).await.unwrap();
    assert_eq!(hits.output["results"][0]["document"], "disk-full.md");
    assert_ne!(hits.versions["ops/runbooks"], version);
    assert_eq!(std::fs::read_dir(storage.join("ops.runbooks")).unwrap().count(), 1, "old versions are deleted");

    // Removing the resource removes the index.
    std::fs::remove_file(resources.join("kb.yaml")).unwrap();
    assert!(restarted.refresh(&host::catalog_from(&resources).current(), &policy).is_empty());
    assert!(!restarted.is_available(&ops()));
    assert!(!storage.join("ops.runbooks").exists());
}
