use super::Registry;

/// Built-in tools whose reach depends on the Run (the Kubernetes tools: which
/// namespaces a Run may read follows from the Run's namespace). The engine asks
/// for the registry of each Run when the Run starts; the tools are bound to that
/// Run's scope, so a call can never reach past it.
pub trait ScopedTools: Send + Sync {
    /// The tools a Run of `namespace` gets.
    fn registry_for(&self, namespace: &str) -> Registry;
}
