//! What a resource may start or read (docs/architecture.md, Tenancy): decided by the
//! service configuration, never by the resource. The app builds one
//! [`ResourcePolicy`] from the settings (`stdio_commands`, `resource_env`,
//! `knowledge_roots`, `shared_namespaces`, `data_dir`, the resource directories);
//! the MCP host, the knowledge bases and the secret resolver consult it.

use std::io;
use std::path::{Path, PathBuf};

use super::secrets::EnvAccess;
use crate::tenancy::Tenancy;

/// What resources may start and read.
#[derive(Clone, Debug, Default)]
pub struct ResourcePolicy {
    /// Commands an McpAdapter may start over stdio: `akritas` (this binary, only as
    /// `akritas mcp <bundled server>`) or absolute paths, compared literally.
    pub stdio_commands: Vec<String>,
    /// Names an McpAdapter's stdio `env` may set in its child (`stdio_env`).
    pub stdio_env: EnvAccess,
    /// Environment variables `{env: NAME}` may read.
    pub env: EnvAccess,
    /// Directories a KnowledgeBase directory source may be under.
    pub knowledge_roots: Vec<PathBuf>,
    /// Directories a path Workspace may be under.
    pub workspace_roots: Vec<PathBuf>,
    /// Standalone mode: the resource directories manifests are read from (a directory
    /// under one of them is allowed too); empty in operator mode.
    pub resource_dirs: Vec<PathBuf>,
    /// The data directory (journals, indexes): never read by a resource.
    pub data_dir: PathBuf,
    /// Which namespaces are shared with every other.
    pub tenancy: Tenancy,
}

/// Why a directory a resource names may not be read.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The directory does not exist or cannot be resolved.
    #[error("{path} does not exist or cannot be read ({error})")]
    Unreadable {
        /// The directory as resolved from the resource.
        path: String,
        /// Why (part of the message, so not also a source).
        error: io::Error,
    },
    /// The directory is the data directory, inside it, or contains it.
    #[error(
        "{path} overlaps the data directory {data_dir} (journals and indexes), which resources never read; \
         point the source at a directory under {setting} that does not contain the data directory"
    )]
    DataDir {
        /// The directory, with symlinks resolved.
        path: String,
        /// The data directory.
        data_dir: String,
        /// The setting that lists the allowed directories.
        setting: &'static str,
    },
    /// The directory is under no allowed directory.
    #[error(
        "{path} (symlinks resolved) is not under a directory of {setting} ({allowed}); add its parent to the {setting} setting"
    )]
    OutsideRoots {
        /// The directory, with symlinks resolved.
        path: String,
        /// The setting that lists the allowed directories.
        setting: &'static str,
        /// The allowed directories, for the message.
        allowed: String,
    },
}

impl PathError {
    /// The condition reason of a resource whose directory failed this way.
    pub fn reason(&self) -> &'static str {
        match self {
            PathError::Unreadable { .. } => crate::catalog::readiness::reasons::PATH_NOT_FOUND,
            _ => crate::catalog::readiness::reasons::PATH_NOT_ALLOWED,
        }
    }

    /// The message for a resource whose `field` (such as `spec.source.path`) named the
    /// directory: the field, the directory looked for, what is wrong and what to change.
    pub fn at(&self, field: &str) -> String {
        match self {
            PathError::Unreadable { .. } => format!("{field}: {self}; create the directory or correct {field}"),
            _ => format!("{field}: {self}"),
        }
    }
}

impl ResourcePolicy {
    /// The real location of a directory a resource reads (`standalone`: the resource
    /// came from a manifest directory), if the policy allows reading it: under a
    /// knowledge root (or, in standalone mode, a resource directory), never
    /// overlapping the data directory. Symlinks are resolved first.
    pub fn readable_dir(&self, dir: &Path, standalone: bool) -> Result<PathBuf, PathError> {
        self.dir_under(dir, standalone, &self.knowledge_roots, "knowledge_roots")
    }

    /// The real location of a path Workspace's tree, if the policy allows it: under a
    /// workspace root (or, in standalone mode, a resource directory), never overlapping
    /// the data directory (which holds every namespace's clones). Symlinks are resolved
    /// first; the tree is used at the resolved location.
    pub fn workspace_dir(&self, dir: &Path, standalone: bool) -> Result<PathBuf, PathError> {
        self.dir_under(dir, standalone, &self.workspace_roots, "workspace_roots")
    }

    fn dir_under(
        &self,
        dir: &Path,
        standalone: bool,
        configured: &[PathBuf],
        setting: &'static str,
    ) -> Result<PathBuf, PathError> {
        let real =
            dir.canonicalize().map_err(|error| PathError::Unreadable { path: dir.display().to_string(), error })?;
        let data_dir = real_path(&self.data_dir);
        let set = !self.data_dir.as_os_str().is_empty();
        if set && (real.starts_with(&data_dir) || data_dir.starts_with(&real)) {
            return Err(PathError::DataDir {
                path: real.display().to_string(),
                data_dir: data_dir.display().to_string(),
                setting,
            });
        }
        let resource_dirs = if standalone { self.resource_dirs.as_slice() } else { &[] };
        let roots: Vec<PathBuf> = configured.iter().chain(resource_dirs).map(|r| real_path(r)).collect();
        if roots.iter().any(|root| real.starts_with(root)) {
            return Ok(real);
        }
        let mut allowed: Vec<String> = configured.iter().map(|r| r.display().to_string()).collect();
        if allowed.is_empty() {
            allowed.push("none configured".into());
        }
        if standalone && !resource_dirs.is_empty() {
            allowed.push("and the resource directories".into());
        }
        Err(PathError::OutsideRoots { path: real.display().to_string(), setting, allowed: allowed.join(", ") })
    }

    /// Whether `dir` (symlinks resolved) is under a resource directory (standalone mode).
    pub fn in_resource_dirs(&self, dir: &Path) -> Option<PathBuf> {
        let real = dir.canonicalize().ok()?;
        self.resource_dirs.iter().any(|root| real.starts_with(real_path(root))).then_some(real)
    }
}

/// Where a path really is: symlinks resolved when it exists, else the absolute path.
pub fn real_path(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_path_cannot_reach_another_namespaces_clone_or_leave_the_roots() {
        let work = tempfile::tempdir().unwrap();
        let data = work.path().join("data");
        let clone = data.join("workspaces/team-a/infra");
        let roots = work.path().join("trees");
        let elsewhere = work.path().join("elsewhere");
        for dir in [&clone, &roots.join("team-b"), &elsewhere] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // A team-b tree that is a symlink to team A's clone.
        std::os::unix::fs::symlink(&clone, roots.join("alias")).unwrap();
        let policy =
            ResourcePolicy { workspace_roots: vec![roots.clone()], data_dir: data.clone(), ..Default::default() };
        assert_eq!(
            policy.workspace_dir(&roots.join("team-b"), false).unwrap(),
            roots.join("team-b").canonicalize().unwrap()
        );
        for attack in [&clone, &roots.join("alias"), &data.join("workspaces")] {
            let error = policy.workspace_dir(attack, false).unwrap_err();
            assert!(matches!(error, PathError::DataDir { .. }), "{}: {error}", attack.display());
        }
        let error = policy.workspace_dir(&elsewhere, false).unwrap_err().to_string();
        assert!(error.contains("workspace_roots") && !error.contains("knowledge_roots"), "{error}");
        // Knowledge roots do not open workspaces.
        let policy = ResourcePolicy { knowledge_roots: vec![elsewhere.clone()], data_dir: data, ..Default::default() };
        assert!(matches!(policy.workspace_dir(&elsewhere, false), Err(PathError::OutsideRoots { .. })));
    }

    #[test]
    fn directories_are_allowed_under_roots_only_with_symlinks_resolved_and_never_near_the_data_dir() {
        let work = tempfile::tempdir().unwrap();
        let root = work.path().join("runbooks");
        let data = work.path().join("runbooks/data");
        let outside = work.path().join("outside");
        for dir in [&root.join("team"), &data, &outside] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let policy =
            ResourcePolicy { knowledge_roots: vec![root.clone()], data_dir: data.clone(), ..Default::default() };
        assert!(policy.readable_dir(&root.join("team"), false).is_ok());
        let error = policy.readable_dir(&root.join("escape"), false).unwrap_err();
        assert!(matches!(error, PathError::OutsideRoots { .. }), "{error}");
        assert!(matches!(policy.readable_dir(&data, false), Err(PathError::DataDir { .. })));
        assert!(matches!(policy.readable_dir(&root, false), Err(PathError::DataDir { .. })), "it contains the data");
        let missing = policy.readable_dir(&root.join("nope"), false).unwrap_err();
        assert!(matches!(missing, PathError::Unreadable { .. }), "{missing}");
        // Resource directories count in standalone mode only.
        let policy = ResourcePolicy { resource_dirs: vec![outside.clone()], data_dir: data, ..Default::default() };
        assert!(policy.readable_dir(&outside, true).is_ok());
        let error = policy.readable_dir(&outside, false).unwrap_err().to_string();
        assert!(error.contains("none configured") && error.contains("knowledge_roots"), "{error}");
    }

    #[test]
    fn a_missing_directory_is_reported_at_its_field_with_the_path_looked_for() {
        let policy = ResourcePolicy::default();
        let missing = policy.workspace_dir(Path::new("/srv/no-such-tree"), false).unwrap_err();
        assert_eq!(
            missing.at("spec.source.path"),
            "spec.source.path: /srv/no-such-tree does not exist or cannot be read (No such file or directory \
             (os error 2)); create the directory or correct spec.source.path"
        );
        let work = tempfile::tempdir().unwrap();
        let outside = policy.workspace_dir(work.path(), false).unwrap_err();
        assert!(outside.at("spec.source.path").starts_with("spec.source.path: "), "{outside}");
        assert!(!outside.at("spec.source.path").contains("create the directory"), "{outside}");
    }
}
