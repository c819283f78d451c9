//! The built-in Kubernetes tools: which cluster they read (the operator's client,
//! or a kubeconfig standalone), what they may reach and who may read the cluster.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::config::Settings;
use crate::kubernetes::{KubeTools, Limits, Reach, ScopePolicy};

/// The tools, when enabled and a cluster is configured: `client` in operator mode, else the
/// first kubeconfig [`locate`] finds (the `kubeconfig` setting, `$KUBECONFIG`,
/// `~/.kube/config`). `None` when disabled or without a cluster, with the reason logged.
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
        (None, _) => {
            let located = locate(settings.kubeconfig.as_deref(), std::env::var_os("KUBECONFIG"), std::env::home_dir());
            match located {
                Located::Found(source) => match from_kubeconfig(&source).await {
                    Ok(client) => (client, Reach::All),
                    // The setting is the operator's explicit choice: it stops the start.
                    Err(error) if matches!(source, Source::Setting(_)) => return Err(error),
                    Err(error) => {
                        tracing::warn!(error = format!("{error:#}"), "Kubernetes tools not offered");
                        return Ok(None);
                    }
                },
                Located::None(why) => {
                    tracing::info!(reason = %why, "Kubernetes tools not offered: no kubeconfig");
                    return Ok(None);
                }
            }
        }
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

/// A kubeconfig standalone Kubernetes tools read, by where it was named.
#[derive(Debug, PartialEq)]
enum Source {
    /// The `kubeconfig` setting.
    Setting(String),
    /// `$KUBECONFIG`: one file or several, merged as kubectl merges them.
    Env(Vec<PathBuf>),
    /// `~/.kube/config`.
    Home(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Setting(path) => write!(f, "{path} (setting kubeconfig)"),
            Source::Env(paths) => {
                let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
                write!(f, "{} ($KUBECONFIG)", paths.join(":"))
            }
            Source::Home(path) => write!(f, "{}", path.display()),
        }
    }
}

#[derive(Debug, PartialEq)]
enum Located {
    Found(Source),
    /// Why there is none: every place looked at.
    None(String),
}

/// Where kubectl would look, in its order: the setting, else `$KUBECONFIG` (empty entries
/// ignored), else `~/.kube/config` when that file exists.
fn locate(setting: Option<&str>, env: Option<OsString>, home: Option<PathBuf>) -> Located {
    if let Some(path) = setting {
        return Located::Found(Source::Setting(path.to_owned()));
    }
    let listed: Vec<PathBuf> =
        env.iter().flat_map(std::env::split_paths).filter(|p| !p.as_os_str().is_empty()).collect();
    if !listed.is_empty() {
        return Located::Found(Source::Env(listed));
    }
    let Some(home) = home else {
        return Located::None("setting kubeconfig unset, $KUBECONFIG unset, no home directory".into());
    };
    let default = home.join(".kube").join("config");
    if default.is_file() {
        return Located::Found(Source::Home(default));
    }
    Located::None(format!("setting kubeconfig unset, $KUBECONFIG unset, {} not found", default.display()))
}

async fn from_kubeconfig(source: &Source) -> Result<kube::Client> {
    use kube::config::Kubeconfig;
    let paths = match source {
        Source::Setting(path) => vec![PathBuf::from(path)],
        Source::Env(paths) => paths.clone(),
        Source::Home(path) => vec![path.clone()],
    };
    let mut kubeconfig = Kubeconfig::default();
    for path in &paths {
        let read = Kubeconfig::read_from(path).with_context(|| format!("reading the kubeconfig {source}"))?;
        kubeconfig = kubeconfig.merge(read).with_context(|| format!("merging the kubeconfigs {source}"))?;
    }
    let context = kubeconfig.current_context.clone().unwrap_or_default();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading the current context of the kubeconfig {source}"))?;
    tracing::info!(kubeconfig = %source, context = %context, cluster = %config.cluster_url, "Kubernetes tools read the cluster of this context");
    kube::Client::try_from(config).with_context(|| format!("building a Kubernetes client from {source}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_is_the_setting_then_the_environment_then_the_home_directorys() {
        let home = tempfile::tempdir().unwrap();
        let env = |value: &str| Some(OsString::from(value));
        let at_home = || Some(home.path().to_owned());
        assert_eq!(locate(Some("/etc/k"), env("/a"), at_home()), Located::Found(Source::Setting("/etc/k".into())));
        // kubectl's list: empty entries ignored, a list of only empty ones is no list.
        assert_eq!(locate(None, env("/a::/b"), at_home()), Located::Found(Source::Env(vec!["/a".into(), "/b".into()])));
        let default = home.path().join(".kube/config");
        let missing = format!("setting kubeconfig unset, $KUBECONFIG unset, {} not found", default.display());
        assert_eq!(locate(None, env(":"), at_home()), Located::None(missing.clone()));
        assert_eq!(locate(None, None, at_home()), Located::None(missing));
        std::fs::create_dir_all(default.parent().unwrap()).unwrap();
        std::fs::write(&default, "apiVersion: v1\n").unwrap();
        assert_eq!(locate(None, None, at_home()), Located::Found(Source::Home(default.clone())));
        assert_eq!(locate(None, Some(OsString::new()), at_home()), Located::Found(Source::Home(default)));
        assert!(matches!(locate(None, None, None), Located::None(why) if why.contains("no home directory")));
        // Each source names itself in messages, the setting as the setting to fix.
        assert_eq!(Source::Setting("/k".into()).to_string(), "/k (setting kubeconfig)");
        assert_eq!(Source::Env(vec!["/a".into(), "/b".into()]).to_string(), "/a:/b ($KUBECONFIG)");
    }

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
