use std::collections::BTreeSet;

use super::{ToolName, ToolSpec};
use crate::resources::mcp_adapter::Permission;

/// Decides whether a tool may be offered to, and run for, the current Run.
pub trait ToolPolicy: Send + Sync {
    /// Whether the tool described by `spec` is allowed.
    fn allows(&self, spec: &ToolSpec) -> bool;
}

/// Allows only tools with [`Permission::Read`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadOnlyPolicy;

impl ToolPolicy for ReadOnlyPolicy {
    fn allows(&self, spec: &ToolSpec) -> bool {
        spec.permission == Permission::Read
    }
}

/// Allows tools whose permission is in the set.
#[derive(Debug, Clone, Default)]
pub struct PermissionPolicy(pub BTreeSet<Permission>);

impl ToolPolicy for PermissionPolicy {
    fn allows(&self, spec: &ToolSpec) -> bool {
        self.0.contains(&spec.permission)
    }
}

/// Allows tools whose name is in the set.
#[derive(Debug, Clone, Default)]
pub struct NamedPolicy(pub BTreeSet<ToolName>);

impl ToolPolicy for NamedPolicy {
    fn allows(&self, spec: &ToolSpec) -> bool {
        self.0.contains(&spec.name)
    }
}

/// Allows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl ToolPolicy for DenyAll {
    fn allows(&self, _spec: &ToolSpec) -> bool {
        false
    }
}

/// Allows everything; for tests and trusted host-internal callers only.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl ToolPolicy for AllowAll {
    fn allows(&self, _spec: &ToolSpec) -> bool {
        true
    }
}
