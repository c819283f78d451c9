//! Tenancy (docs/architecture.md, Tenancy): a resource is input from whoever may create it in
//! its namespace, so it affects only Runs, Incidents, receivers, tools, skills and
//! knowledge of its own namespace, unless the service configuration shares that
//! namespace with every other. A Run carries the namespace of what caused it.

use std::collections::BTreeSet;

/// Namespace of a standalone manifest without one, and of a Run nobody placed.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Which namespaces' resources a Run of a given namespace may use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenancy {
    shared: BTreeSet<String>,
}

impl Tenancy {
    /// Tenancy with these shared namespaces (from the `shared_namespaces` setting).
    pub fn new(shared: impl IntoIterator<Item = String>) -> Self {
        Self { shared: shared.into_iter().collect() }
    }

    /// Whether resources of `resource_namespace` are shared with every namespace.
    pub fn is_shared(&self, resource_namespace: &str) -> bool {
        self.shared.contains(resource_namespace)
    }

    /// Whether a Run of `run_namespace` may use a resource of `resource_namespace`.
    pub fn sees(&self, run_namespace: &str, resource_namespace: &str) -> bool {
        run_namespace == resource_namespace || self.is_shared(resource_namespace)
    }

    /// What a Run of `namespace` may use.
    pub fn scope(&self, namespace: &str) -> Scope {
        Scope { namespace: namespace.to_string(), tenancy: self.clone() }
    }

    /// The shared namespaces.
    pub fn shared(&self) -> impl Iterator<Item = &str> {
        self.shared.iter().map(String::as_str)
    }
}

/// The namespace of one Run and what it may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    /// The Run's namespace.
    pub namespace: String,
    tenancy: Tenancy,
}

impl Scope {
    /// Whether the Run may use a resource of `resource_namespace`.
    pub fn sees(&self, resource_namespace: &str) -> bool {
        self.tenancy.sees(&self.namespace, resource_namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_sees_itself_and_the_shared_ones_only() {
        let tenancy = Tenancy::new(["platform".to_string()]);
        assert!(tenancy.sees("team-a", "team-a"));
        assert!(tenancy.sees("team-a", "platform"));
        assert!(!tenancy.sees("team-a", "team-b"));
        assert!(!tenancy.sees("platform", "team-a"));
        assert!(!Tenancy::default().sees("team-a", "platform"));
    }
}
