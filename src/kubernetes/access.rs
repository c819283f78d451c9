//! Which namespaces a Run may read with the Kubernetes tools.
//!
//! A Run carries the namespace of what caused it (docs/architecture.md, Tenancy). A Run
//! of a tenant namespace reads Kubernetes objects of that namespace only, and no
//! cluster-scoped object. A Run of a *cluster reader* namespace (the home namespace,
//! the shared namespaces and `kubernetes_cluster_namespaces`: resources there come
//! from the people who operate Akritas) reads every namespace the tools may reach and
//! cluster-scoped objects such as Nodes. What the tools may reach at all is the
//! watched namespaces in operator mode (every namespace when none is set).

use std::collections::BTreeSet;

use super::Failure;

/// The namespaces the tools may reach at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// Every namespace (what the service account may read decides).
    All,
    /// Only these.
    Only(BTreeSet<String>),
}

impl Reach {
    fn contains(&self, namespace: &str) -> bool {
        match self {
            Reach::All => true,
            Reach::Only(set) => set.contains(namespace),
        }
    }
}

/// How Runs' namespaces map to what they may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopePolicy {
    /// What the tools may reach at all.
    pub reach: Reach,
    /// Namespaces whose Runs read every reachable namespace and cluster-scoped objects.
    pub cluster_readers: BTreeSet<String>,
}

impl ScopePolicy {
    /// What a Run of `namespace` may read.
    pub fn access_for(&self, namespace: &str) -> Access {
        if self.cluster_readers.contains(namespace) {
            return Access { run_namespace: namespace.to_string(), namespaces: self.reach.clone(), cluster: true };
        }
        let own: BTreeSet<String> =
            Some(namespace.to_string()).filter(|ns| self.reach.contains(ns)).into_iter().collect();
        Access { run_namespace: namespace.to_string(), namespaces: Reach::Only(own), cluster: false }
    }
}

/// What one Run may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// The Run's namespace (the default namespace of a call that names none).
    pub run_namespace: String,
    namespaces: Reach,
    cluster: bool,
}

impl Access {
    /// Access to exactly these namespaces (and cluster-scoped objects when `cluster`).
    pub fn new(run_namespace: &str, namespaces: Reach, cluster: bool) -> Self {
        Self { run_namespace: run_namespace.to_string(), namespaces, cluster }
    }

    /// Whether the Run may read objects of `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// Whether the Run may read cluster-scoped objects (Nodes, ...).
    pub fn allows_cluster(&self) -> bool {
        self.cluster
    }

    /// The namespace a call reads: the one it names, else the Run's own; refused
    /// when the Run may not read it.
    pub fn namespace(&self, requested: Option<&str>) -> Result<String, Failure> {
        let namespace = requested.filter(|ns| !ns.is_empty()).unwrap_or(&self.run_namespace);
        if self.allows(namespace) {
            Ok(namespace.to_string())
        } else {
            Err(Failure::new(format!(
                "namespace {namespace:?} is outside this Run's scope ({}); a Run reads the Kubernetes objects of its own \
                 namespace unless its namespace is a cluster reader (kubernetes_cluster_namespaces, shared_namespaces)",
                self.describe()
            )))
        }
    }

    /// Refuses cluster-scoped reads for a Run that may not make them.
    pub fn cluster_scoped(&self, what: &str) -> Result<(), Failure> {
        if self.cluster {
            Ok(())
        } else {
            Err(Failure::new(format!(
                "{what} is cluster-scoped and this Run may not read cluster-scoped objects ({}); only Runs of a cluster \
                 reader namespace (kubernetes_cluster_namespaces, shared_namespaces) may",
                self.describe()
            )))
        }
    }

    /// A list across every namespace is allowed only when the Run reaches them all.
    pub fn all_namespaces(&self) -> bool {
        self.namespaces == Reach::All
    }

    /// `namespaces: a, b` or `every namespace`, for messages.
    pub fn describe(&self) -> String {
        match &self.namespaces {
            Reach::All => "every namespace".to_string(),
            Reach::Only(set) if set.is_empty() => "no namespace".to_string(),
            Reach::Only(set) => format!("namespaces: {}", set.iter().cloned().collect::<Vec<_>>().join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(reach: Reach) -> ScopePolicy {
        ScopePolicy { reach, cluster_readers: BTreeSet::from(["akritas-system".to_string()]) }
    }

    #[test]
    fn a_tenant_run_reads_its_own_namespace_and_nothing_cluster_scoped() {
        let access = policy(Reach::All).access_for("team-a");
        assert_eq!(access.namespace(None).unwrap(), "team-a");
        assert!(access.namespace(Some("team-a")).is_ok());
        let refused = access.namespace(Some("team-b")).unwrap_err();
        assert!(refused.message().contains("outside this Run's scope (namespaces: team-a)"), "{}", refused.message());
        assert!(access.cluster_scoped("Node").is_err());
        assert!(!access.all_namespaces());
    }

    #[test]
    fn a_cluster_reader_reads_what_the_tools_reach_and_no_more() {
        let all = policy(Reach::All).access_for("akritas-system");
        assert!(all.namespace(Some("team-b")).is_ok());
        assert!(all.cluster_scoped("Node").is_ok());
        assert!(all.all_namespaces());

        let watched = policy(Reach::Only(BTreeSet::from(["shop".to_string()]))).access_for("akritas-system");
        assert!(watched.namespace(Some("shop")).is_ok());
        assert!(watched.namespace(Some("kube-system")).is_err());
        assert!(!watched.all_namespaces());
    }

    #[test]
    fn a_tenant_outside_the_watched_namespaces_reads_nothing() {
        let access = policy(Reach::Only(BTreeSet::from(["shop".to_string()]))).access_for("team-a");
        assert!(access.namespace(None).is_err());
        assert_eq!(access.describe(), "no namespace");
    }
}
