//! Path rules of the change pipeline: a path the model or a caller names is
//! relative, canonical (`a/b`, never `./a`, `a//b`, `a/../b` or `a\b`), free of
//! control characters, not secret-looking, and — once symlinks are resolved — inside
//! the workspace root.
//!
//! [`check`] is pure; [`confine`] and [`confine_parent`] touch the filesystem
//! (blocking: the caller runs them in `spawn_blocking`).

use std::io;
use std::path::{Path, PathBuf};

/// Why a path is refused. Each message names the path and the rule it broke.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PathError {
    /// No path at all.
    #[error("path is empty; name a file relative to the workspace root, such as `config/app.yaml`")]
    Empty,
    /// `/etc/x`, `C:/x`.
    #[error("path {0:?} is absolute; give it relative to the workspace root")]
    Absolute(String),
    /// `nested/../x`, `./a`, `a//b`, trailing `/`, backslash, surrounding whitespace.
    #[error(
        "path {0:?} is not canonical; write it as plain `/`-separated names without `.`, `..`, empty parts, backslashes or surrounding spaces (like `dir/file.yaml`)"
    )]
    NotCanonical(String),
    /// `../x`, `a/../../x`.
    #[error("path {0:?} escapes the workspace root; only files inside the workspace can be read or changed")]
    Escapes(String),
    /// `.env`, `id_rsa`, `*.pem`, a `.git` component, ….
    #[error(
        "path {0:?} looks like a secret or repository metadata (such as .env, keys, credentials, .git); Akritas never reads or writes such files"
    )]
    SecretName(String),
    /// NUL or another control character (the path is kept escaped).
    #[error("path \"{0}\" contains a NUL or control character; use a plain file name")]
    Control(String),
    /// A symlink on the way resolves outside the root.
    #[error(
        "path {path:?} resolves (through a symlink) outside the workspace root; name the file inside the workspace instead"
    )]
    Outside {
        /// The path as given.
        path: String,
    },
    /// The file (or, for a create, its parent directory) does not exist.
    #[error("path {0:?} does not exist in the workspace")]
    Missing(String),
    /// Not a regular file (a directory, a socket, …), or a create's parent is not a directory.
    #[error("path {0:?} is not a regular file (for a new file: its parent is not a directory)")]
    NotRegular(String),
    /// A create's target already exists.
    #[error("path {0:?} already exists in the workspace; change it with a replace edit instead of creating it")]
    Exists(String),
    /// The filesystem refused.
    #[error("cannot inspect path {path:?}: {error}")]
    Io {
        /// The path as given.
        path: String,
        /// The system error.
        error: String,
    },
}

/// Checks the form of `path` and returns it as the canonical relative
/// `/`-separated path (surrounding whitespace is not trimmed: it is refused).
pub fn check(path: &str) -> Result<String, PathError> {
    if path.trim().is_empty() {
        return Err(PathError::Empty);
    }
    if path.chars().any(char::is_control) {
        return Err(PathError::Control(path.escape_debug().to_string()));
    }
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if path.starts_with('/') || drive {
        return Err(PathError::Absolute(path.to_owned()));
    }
    if path.contains('\\') || path.trim() != path {
        return Err(PathError::NotCanonical(path.to_owned()));
    }
    let mut depth: i64 = 0;
    let mut canonical = true;
    for part in path.split('/') {
        match part {
            "" | "." => canonical = false,
            ".." => {
                canonical = false;
                depth -= 1;
                if depth < 0 {
                    return Err(PathError::Escapes(path.to_owned()));
                }
            }
            _ => depth += 1,
        }
    }
    if !canonical {
        return Err(PathError::NotCanonical(path.to_owned()));
    }
    if is_secret_name(path) {
        return Err(PathError::SecretName(path.to_owned()));
    }
    Ok(path.to_owned())
}

/// Whether any component of `path` is secret-looking (`.env`, `.env.*`, SSH keys,
/// `*.pem`, `*.key`, `*.p12`, `*.pfx`, `.netrc`, `.git-credentials`, kubeconfigs,
/// `.npmrc`, `.pypirc`, `credentials(.json)`, `secrets.y(a)ml`) or is `.git`.
/// Compared case-insensitively.
pub fn is_secret_name(path: &str) -> bool {
    path.split(['/', '\\']).any(|part| {
        let name = part.to_ascii_lowercase();
        const EXACT: &[&str] = &[
            ".git",
            ".env",
            "id_rsa",
            "id_dsa",
            "id_ed25519",
            "id_ecdsa",
            ".netrc",
            ".git-credentials",
            "kubeconfig",
            ".npmrc",
            ".pypirc",
            "credentials",
            "credentials.json",
            "secrets.yaml",
            "secrets.yml",
        ];
        const SUFFIXES: &[&str] = &[".pem", ".key", ".p12", ".pfx", ".kubeconfig"];
        EXACT.contains(&name.as_str())
            || name.starts_with(".env.")
            || SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
    })
}

/// Whether `resolved` (a path under `root`, symlinks resolved) is secret-looking or in
/// `.git` where it really is: `notes.txt -> .env` or `x -> .git/config` are refused as
/// what they point at, not as the name asked for.
pub fn resolves_to_secret(root: &Path, resolved: &Path) -> bool {
    resolved.strip_prefix(root).is_ok_and(|inside| is_secret_name(&inside.to_string_lossy()))
}

/// Resolves `rel` (checked with [`check`]) under `root` (already canonical),
/// following symlinks; the result must stay under `root` and, where it really is,
/// must not be secret-looking. Returns the resolved path. Blocking.
pub fn confine(root: &Path, rel: &str) -> Result<PathBuf, PathError> {
    let rel = check(rel)?;
    let joined = root.join(&rel);
    match std::fs::canonicalize(&joined) {
        Ok(resolved) if resolves_to_secret(root, &resolved) => Err(PathError::SecretName(rel)),
        Ok(resolved) if resolved.starts_with(root) => Ok(resolved),
        Ok(_) => Err(PathError::Outside { path: rel }),
        Err(error) => Err(io_error(&rel, &error)),
    }
}

/// For a file to create: the parent of `rel` must exist as a directory under
/// `root` (symlinks resolved) and the target must not exist (not even as a
/// dangling symlink). Returns the target path inside the resolved parent. Blocking.
pub fn confine_parent(root: &Path, rel: &str) -> Result<PathBuf, PathError> {
    let rel = check(rel)?;
    let (parent, name) = match rel.rsplit_once('/') {
        Some((parent, name)) => (Some(parent), name),
        None => (None, rel.as_str()),
    };
    let parent_dir = match parent {
        Some(parent) => {
            let resolved = match std::fs::canonicalize(root.join(parent)) {
                Ok(resolved) => resolved,
                Err(error) if error.kind() == io::ErrorKind::NotFound => {
                    return Err(PathError::Missing(parent.to_owned()));
                }
                Err(error) => return Err(io_error(parent, &error)),
            };
            if !resolved.starts_with(root) {
                return Err(PathError::Outside { path: rel });
            }
            if resolves_to_secret(root, &resolved) {
                return Err(PathError::SecretName(rel));
            }
            if !resolved.is_dir() {
                return Err(PathError::NotRegular(parent.to_owned()));
            }
            resolved
        }
        None => root.to_path_buf(),
    };
    let target = parent_dir.join(name);
    match std::fs::symlink_metadata(&target) {
        Ok(_) => Err(PathError::Exists(rel)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(target),
        Err(error) => Err(io_error(&rel, &error)),
    }
}

fn io_error(path: &str, error: &io::Error) -> PathError {
    if error.kind() == io::ErrorKind::NotFound {
        PathError::Missing(path.to_owned())
    } else {
        PathError::Io { path: path.to_owned(), error: error.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::testing::root;
    use std::os::unix::fs::symlink;

    #[test]
    fn canonical_relative_paths_pass() {
        assert_eq!(check("a.txt"), Ok("a.txt".to_owned()));
        assert_eq!(check("dir/sub/file.yaml"), Ok("dir/sub/file.yaml".to_owned()));
        assert_eq!(check(".github/workflows/ci.yml"), Ok(".github/workflows/ci.yml".to_owned()));
        assert_eq!(check("my file.txt"), Ok("my file.txt".to_owned()));
    }

    #[test]
    fn traversal_escapes_the_root() {
        assert_eq!(check("../x"), Err(PathError::Escapes("../x".into())));
        assert_eq!(check("a/../../x"), Err(PathError::Escapes("a/../../x".into())));
        assert_eq!(check(".."), Err(PathError::Escapes("..".into())));
    }

    #[test]
    fn non_canonical_forms_are_refused() {
        for path in ["nested/../x", "./a", "a//b", "a/", "a/.", "a\\b", " a", "a ", "a/./b"] {
            assert_eq!(check(path), Err(PathError::NotCanonical(path.into())), "{path}");
        }
    }

    #[test]
    fn absolute_empty_and_control_paths_are_refused() {
        assert_eq!(check("/etc/passwd"), Err(PathError::Absolute("/etc/passwd".into())));
        assert_eq!(check("C:/x"), Err(PathError::Absolute("C:/x".into())));
        assert_eq!(check(""), Err(PathError::Empty));
        assert_eq!(check("  "), Err(PathError::Empty));
        assert!(matches!(check("a\0b"), Err(PathError::Control(_))));
        assert!(matches!(check("a\nb"), Err(PathError::Control(_))));
        let message = check("a\0b").unwrap_err().to_string();
        assert!(message.contains("a\\0b"), "{message}");
    }

    #[test]
    fn secret_names_are_refused_in_any_component() {
        for path in [
            ".env",
            ".env.production",
            "deploy/.env",
            "home/.ssh/id_rsa",
            "id_ed25519",
            "id_ecdsa",
            "tls/server.pem",
            "tls/server.KEY",
            "cert.p12",
            "cert.pfx",
            ".netrc",
            ".git-credentials",
            "kubeconfig",
            "prod.kubeconfig",
            ".npmrc",
            ".pypirc",
            "aws/credentials",
            "gcp/credentials.json",
            "secrets.yaml",
            "chart/secrets.yml",
            ".git/config",
            "sub/.git/HEAD",
        ] {
            assert_eq!(check(path), Err(PathError::SecretName(path.into())), "{path}");
        }
        assert!(!is_secret_name("environment.md"));
        assert!(!is_secret_name(".gitignore"));
        assert!(!is_secret_name("keys/README.md"));
        assert!(!is_secret_name("id_rsa.pub.md"));
    }

    #[test]
    fn confine_resolves_inside_symlinks_and_refuses_outside_ones() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "x").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        symlink(root.join("sub/a.txt"), root.join("alias.txt")).unwrap();
        symlink(outside.path().join("secret.txt"), root.join("out.txt")).unwrap();
        symlink(outside.path(), root.join("outdir")).unwrap();

        assert_eq!(confine(&root, "sub/a.txt"), Ok(root.join("sub/a.txt")));
        assert_eq!(confine(&root, "alias.txt"), Ok(root.join("sub/a.txt")));
        assert_eq!(confine(&root, "out.txt"), Err(PathError::Outside { path: "out.txt".into() }));
        assert_eq!(confine(&root, "outdir/secret.txt"), Err(PathError::Outside { path: "outdir/secret.txt".into() }));
        assert_eq!(confine(&root, "missing.txt"), Err(PathError::Missing("missing.txt".into())));
        assert_eq!(confine(&root, "../x"), Err(PathError::Escapes("../x".into())));
    }

    #[test]
    fn an_alias_is_judged_by_what_it_points_at() {
        let (_dir, root) = root();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join(".env"), "TOKEN=x\n").unwrap();
        symlink(root.join(".env"), root.join("notes.txt")).unwrap();
        symlink(root.join(".git/config"), root.join("x")).unwrap();
        symlink(root.join(".git"), root.join("meta")).unwrap();
        assert_eq!(confine(&root, "notes.txt"), Err(PathError::SecretName("notes.txt".into())));
        assert_eq!(confine(&root, "x"), Err(PathError::SecretName("x".into())));
        assert_eq!(confine(&root, "meta/config"), Err(PathError::SecretName("meta/config".into())));
        assert_eq!(confine_parent(&root, "meta/new"), Err(PathError::SecretName("meta/new".into())));
    }

    #[test]
    fn confine_parent_needs_an_existing_inside_parent_and_a_free_target() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        symlink(outside.path(), root.join("outdir")).unwrap();
        symlink(root.join("sub"), root.join("subalias")).unwrap();
        symlink(root.join("nowhere"), root.join("dangling")).unwrap();

        assert_eq!(confine_parent(&root, "new.txt"), Ok(root.join("new.txt")));
        assert_eq!(confine_parent(&root, "sub/new.txt"), Ok(root.join("sub/new.txt")));
        assert_eq!(confine_parent(&root, "subalias/new.txt"), Ok(root.join("sub/new.txt")));
        assert_eq!(confine_parent(&root, "outdir/new.txt"), Err(PathError::Outside { path: "outdir/new.txt".into() }));
        assert_eq!(confine_parent(&root, "missing/new.txt"), Err(PathError::Missing("missing".into())));
        assert_eq!(confine_parent(&root, "sub/a.txt"), Err(PathError::Exists("sub/a.txt".into())));
        assert_eq!(confine_parent(&root, "dangling"), Err(PathError::Exists("dangling".into())));
        assert_eq!(confine_parent(&root, "sub/a.txt/x"), Err(PathError::NotRegular("sub/a.txt".into())));
        assert_eq!(confine_parent(&root, ".env"), Err(PathError::SecretName(".env".into())));
    }
}
