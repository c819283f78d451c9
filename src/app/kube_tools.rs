//! The built-in Kubernetes tools: which cluster they read (the operator's client,
//! or a kubeconfig standalone), what they may reach and who may read the cluster.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::config::Settings;
use crate::kubernetes::{KubeTools, Limits, Reach, ScopePolicy};

/// The tools, when enabled and a cluster is configured: `client` in operator mode,
/// else the `kubeconfig` setting. `None` when disabled or without a cluster.
pub async fn build(settings: &Settings, client: Option<&kube::Client>) -> Result<Option<Arc<KubeTools>>> {
    if !settings.kubernetes_tools {
        tracing::info!("Kubernetes tools disabled (kubernetes_tools = false)");
        return Ok(None);
    }
    let (client, reach) = match (client, settings.kubeconfig.as_deref()) {
        (Some(client), _) => {
            let watched = settings.watched_namespaces();
            let reach = if watched.is_empty() { Reach::All } else { Reach::Only(watched.into_iter().collect()) };
            (client.clone(), reach)
        }
        (None, Some(path)) => (from_kubeconfig(path).await?, Reach::All),
        (None, None) => return Ok(None),
    };
    let policy = ScopePolicy { reach, cluster_readers: cluster_readers(settings) };
    tracing::info!(
        cluster_readers = %policy.cluster_readers.iter().cloned().collect::<Vec<_>>().join(","),
        "Kubernetes tools registered"
    );
    Ok(Some(Arc::new(KubeTools::new(client, policy, Limits::default()))))
}

/// The namespaces whose Runs read the whole reach: the home namespace (where the
/// operator's own resources and keys act), the shared ones, and those configured.
fn cluster_readers(settings: &Settings) -> BTreeSet<String> {
    let mut readers: BTreeSet<String> = settings.kubernetes_cluster_namespaces.iter().cloned().collect();
    readers.extend(settings.shared_namespaces.iter().cloned());
    readers.insert(super::process::home_namespace(settings));
    readers
}

async fn from_kubeconfig(path: &str) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading the kubeconfig {path} (setting kubeconfig)"))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading the current context of the kubeconfig {path}"))?;
    kube::Client::try_from(config).with_context(|| format!("building a Kubernetes client from {path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_home_shared_and_configured_namespaces_read_the_cluster() {
        let settings = Settings {
            shared_namespaces: vec!["platform".into()],
            kubernetes_cluster_namespaces: vec!["sre".into()],
            ..Settings::default()
        };
        let readers: Vec<String> = cluster_readers(&settings).into_iter().collect();
        assert_eq!(readers, ["default", "platform", "sre"]);
        let policy = ScopePolicy { reach: Reach::All, cluster_readers: cluster_readers(&settings) };
        assert!(policy.access_for("sre").allows_cluster());
        assert!(!policy.access_for("team-a").allows_cluster());
        assert!(!policy.access_for("team-a").allows("sre"));
    }
}
