//! Permission of a remote tool, derived pessimistically from its MCP annotations, and whether
//! an adapter authorizes it.

use std::collections::BTreeSet;

use rmcp::model::ToolAnnotations;

use super::error::McpError;
use crate::resources::mcp_adapter::Permission;
use crate::tools::ToolName;

/// `readOnlyHint == true` → read; else `destructiveHint == false` (explicit) → write; else dangerous
/// (the MCP default for a tool that says nothing is destructive).
pub fn permission_from_annotations(annotations: Option<&ToolAnnotations>) -> Permission {
    let Some(a) = annotations else { return Permission::Dangerous };
    if a.read_only_hint == Some(true) {
        Permission::Read
    } else if a.destructive_hint == Some(false) {
        Permission::Write
    } else {
        Permission::Dangerous
    }
}

/// Lower-case wire name of a permission.
pub fn permission_name(permission: Permission) -> &'static str {
    match permission {
        Permission::Read => "read",
        Permission::Write => "write",
        Permission::Dangerous => "dangerous",
    }
}

/// The host tool name `<namespace>.<remote>` if the tool is authorized, else why not.
///
/// Authorized iff the permission is in `allow`, the allowlist (when present) names the remote
/// tool, and the host name is a valid tool name.
pub fn authorize(
    namespace: &str,
    remote: &str,
    permission: Permission,
    allow: &BTreeSet<Permission>,
    allowlist: Option<&BTreeSet<String>>,
) -> Result<ToolName, McpError> {
    let host = format!("{namespace}.{remote}");
    let name: ToolName = host.parse().map_err(McpError::ToolName)?;
    if !allow.contains(&permission) {
        let allowed: Vec<&str> = allow.iter().map(|p| permission_name(*p)).collect();
        return Err(McpError::NotAllowed { permission: permission_name(permission), allowed: allowed.join(", ") });
    }
    if let Some(list) = allowlist
        && !list.contains(remote)
    {
        return Err(McpError::NotInAllowlist);
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
        let mut a = ToolAnnotations::default();
        a.read_only_hint = read_only;
        a.destructive_hint = destructive;
        a
    }

    #[test]
    fn mapping_is_pessimistic() {
        assert_eq!(permission_from_annotations(None), Permission::Dangerous);
        assert_eq!(permission_from_annotations(Some(&ann(None, None))), Permission::Dangerous);
        assert_eq!(permission_from_annotations(Some(&ann(Some(true), None))), Permission::Read);
        assert_eq!(permission_from_annotations(Some(&ann(Some(true), Some(true)))), Permission::Read);
        assert_eq!(permission_from_annotations(Some(&ann(Some(false), Some(false)))), Permission::Write);
        assert_eq!(permission_from_annotations(Some(&ann(None, Some(false)))), Permission::Write);
        assert_eq!(permission_from_annotations(Some(&ann(Some(false), None))), Permission::Dangerous);
        assert_eq!(permission_from_annotations(Some(&ann(Some(false), Some(true)))), Permission::Dangerous);
    }

    #[test]
    fn authorization_rules() {
        let read: BTreeSet<Permission> = [Permission::Read].into();
        assert_eq!(authorize("mcp.vm", "query", Permission::Read, &read, None).unwrap().as_str(), "mcp.vm.query");
        let err = authorize("mcp.vm", "drop", Permission::Dangerous, &read, None).unwrap_err();
        assert_eq!(err.to_string(), "permission dangerous is not allowed by the adapter (allow: [read])");
        let list: BTreeSet<String> = ["series".to_owned()].into();
        let err = authorize("mcp.vm", "query", Permission::Read, &read, Some(&list)).unwrap_err();
        assert!(matches!(err, McpError::NotInAllowlist), "{err}");
        assert!(authorize("mcp.vm", "series", Permission::Read, &read, Some(&list)).is_ok());
        let err = authorize("mcp.vm", "bad name", Permission::Read, &read, None).unwrap_err();
        assert!(err.to_string().starts_with("host tool name is not valid: "), "{err}");
        let long = "x".repeat(130);
        assert!(authorize("mcp", &long, Permission::Read, &read, None).is_err());
    }
}
