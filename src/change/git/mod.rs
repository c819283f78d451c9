//! Workspaces on git2: opening a working tree, cloning and fetching a remote at a
//! ref, reading a file at a commit, and publishing a change as a new branch.
//!
//! Remotes are `http://` or `https://` only, spoken through our own transport
//! ([`transport`]) with a token in an `Authorization` header; the token is never in
//! a URL, in `.git/config`, in an error or in a log. Every function here is
//! blocking filesystem and network work: callers run it in `spawn_blocking`.

pub(crate) mod transport;

use std::fmt;
use std::path::{Path, PathBuf};

use git2::{AutotagOption, FetchOptions, FetchPrune, Oid, Repository, build::CheckoutBuilder};
use url::Url;

use transport::{Failure, display_url, with_call};
pub use transport::{Limits, TransportError};

use crate::change::FileChange;

/// The name of the remote in our clones.
const ORIGIN: &str = "origin";

/// HTTP Basic credentials for a remote: a username and an access token.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Username (`x-access-token` for most forges when a token is used).
    pub username: String,
    /// Access token.
    pub token: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("username", &self.username).field("token", &"<redacted>").finish()
    }
}

/// A remote and the ref a workspace follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// `https://` (or `http://`) URL without credentials.
    pub url: String,
    /// Branch, tag or commit id.
    pub reference: String,
    /// Sent as HTTP Basic authentication when set.
    pub credentials: Option<Credentials>,
}

/// The commit a working tree is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// Full commit id (hex).
    pub commit: String,
    /// The ref followed (a remote workspace's `ref`), or the branch checked out
    /// (`HEAD` when detached) for a local working tree.
    pub reference: String,
}

/// A branch pushed by [`publish`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Branch name (without `refs/heads/`).
    pub branch: String,
    /// The new commit (hex).
    pub commit: String,
}

/// Why a git operation failed. Messages name the directory or remote (never a
/// credential) and what to fix.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The egress policy refuses the remote.
    #[error("spec.source.git.url: {0}")]
    Egress(#[from] crate::egress::EgressError),
    /// The exchange with the remote failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// An ssh (or scp-style) remote.
    #[error("{0}: ssh remotes are not supported; use an https URL with a token")]
    SshNotSupported(String),
    /// Not an http(s) URL.
    #[error("{url}: {reason}; use an https URL (http only for a trusted network)")]
    InvalidUrl { url: String, reason: String },
    /// Credentials written into the URL.
    #[error("{0}: the URL carries credentials; remove them and set spec.source.git.auth")]
    CredentialsInUrl(String),
    /// The directory is not a working tree with a commit.
    #[error("{dir}: not a git working tree with a commit: {message}")]
    NotARepository { dir: PathBuf, message: String },
    /// The ref is none of the remote's branches or tags, nor a known commit.
    #[error("{reference:?} is not a branch, tag or commit of {url}; check spec.source.git.ref")]
    UnknownRef { url: String, reference: String },
    /// The commit is not in the clone.
    #[error("commit {commit} is not in {dir}; fetch the workspace again")]
    UnknownCommit { dir: PathBuf, commit: String },
    /// A branch name git does not accept.
    #[error("{0:?} is not a valid branch name; check spec.publish.branchPrefix")]
    InvalidBranch(String),
    /// The branch exists already (on the remote, or left in the clone).
    #[error("branch {branch} already exists {place}; publish under another name")]
    BranchExists { branch: String, place: String },
    /// The remote refused the pushed ref.
    #[error("{url} rejected {reference}: {message}")]
    PushRejected { url: String, reference: String, message: String },
    /// A change does not fit the base commit (stale preview or a bad path).
    #[error("{path}: {reason}")]
    InvalidChange { path: String, reason: String },
    /// libgit2 failed.
    #[error("git {operation} in {dir}: {message}")]
    Git { operation: &'static str, dir: PathBuf, message: String },
    /// No Workspace of that name is declared.
    #[error("workspace {namespace}/{name} is not declared (or not valid)")]
    UnknownWorkspace { namespace: String, name: String },
    /// The token of `spec.source.git.auth` could not be resolved.
    #[error("spec.source.git.auth.token: {0}")]
    Credentials(String),
    /// A filesystem error around the clone.
    #[error("{dir}: {message}")]
    Io { dir: PathBuf, message: String },
}

fn git<'a>(operation: &'static str, dir: &'a Path) -> impl Fn(git2::Error) -> GitError + 'a {
    move |error| GitError::Git { operation, dir: dir.to_path_buf(), message: error.message().to_string() }
}

fn from_call<'a>(operation: &'static str, dir: &'a Path) -> impl Fn(Failure) -> GitError + 'a {
    move |failure| match failure {
        Failure::Transport(error) => GitError::Transport(error),
        Failure::Git(error) => git(operation, dir)(error),
    }
}

/// Checks that a remote URL is one we speak, and returns it parsed.
pub fn parse_remote_url(url: &str) -> Result<Url, GitError> {
    let trimmed = url.trim();
    let parsed = match Url::parse(trimmed) {
        Ok(parsed) => parsed,
        // `git@host:path` (scp-like) has no scheme.
        Err(_) if trimmed.contains('@') && trimmed.contains(':') && !trimmed.contains("://") => {
            return Err(GitError::SshNotSupported(trimmed.to_string()));
        }
        Err(error) => return Err(GitError::InvalidUrl { url: trimmed.to_string(), reason: error.to_string() }),
    };
    match parsed.scheme() {
        "https" | "http" => {}
        "ssh" | "git+ssh" | "ssh+git" => return Err(GitError::SshNotSupported(display_url(&parsed))),
        other => {
            return Err(GitError::InvalidUrl {
                url: display_url(&parsed),
                reason: format!("the scheme {other:?} is not supported"),
            });
        }
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(GitError::CredentialsInUrl(display_url(&parsed)));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(GitError::InvalidUrl { url: display_url(&parsed), reason: "no host".into() });
    }
    Ok(parsed)
}

/// The commit checked out in a working tree (a `path` workspace). Blocking.
pub fn head(dir: &Path) -> Result<Head, GitError> {
    let not_repo =
        |error: git2::Error| GitError::NotARepository { dir: dir.to_path_buf(), message: error.message().to_string() };
    let repo = Repository::open(dir).map_err(not_repo)?;
    let head = repo.head().map_err(not_repo)?;
    let commit = head.peel_to_commit().map_err(not_repo)?;
    let reference = if repo.head_detached().unwrap_or(false) {
        "HEAD".to_string()
    } else {
        head.shorthand().unwrap_or("HEAD").to_string()
    };
    Ok(Head { commit: commit.id().to_string(), reference })
}

/// Clones `remote` into `dir` when `dir` is absent or empty, else fetches into the
/// existing clone; then checks out the ref (branch, tag or commit) with a hard reset
/// of the working tree (the clone is ours; nothing else writes there). Blocking.
pub fn sync(remote: &Remote, dir: &Path) -> Result<Head, GitError> {
    sync_with(remote, dir, &Limits::default())
}

/// [`sync`] with explicit transport limits. Blocking.
pub fn sync_with(remote: &Remote, dir: &Path, limits: &Limits) -> Result<Head, GitError> {
    let url = parse_remote_url(&remote.url)?;
    let repo = open_or_init(dir)?;
    match repo.find_remote(ORIGIN) {
        Ok(existing) if existing.url() == Ok(url.as_str()) => {}
        Ok(_) => repo.remote_set_url(ORIGIN, url.as_str()).map_err(git("configure the remote", dir))?,
        Err(_) => drop(repo.remote(ORIGIN, url.as_str()).map_err(git("configure the remote", dir))?),
    }
    let mut origin = repo.find_remote(ORIGIN).map_err(git("configure the remote", dir))?;
    let refspecs = ["+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*"];
    with_call(remote.credentials.as_ref(), limits, || {
        let mut options = FetchOptions::new();
        options.prune(FetchPrune::On).download_tags(AutotagOption::All);
        origin.fetch(&refspecs, Some(&mut options), None)
    })
    .map_err(from_call("fetch", dir))?;
    let commit = resolve(&repo, &remote.reference)
        .ok_or_else(|| GitError::UnknownRef { url: display_url(&url), reference: remote.reference.clone() })?;
    repo.set_head_detached(commit).map_err(git("check out", dir))?;
    let object = repo.find_object(commit, None).map_err(git("check out", dir))?;
    let mut checkout = CheckoutBuilder::new();
    checkout.force().remove_untracked(true).remove_ignored(true);
    repo.checkout_tree(&object, Some(&mut checkout)).map_err(git("check out", dir))?;
    repo.reset(&object, git2::ResetType::Hard, None).map_err(git("check out", dir))?;
    Ok(Head { commit: commit.to_string(), reference: remote.reference.clone() })
}

fn open_or_init(dir: &Path) -> Result<Repository, GitError> {
    let io = |error: std::io::Error| GitError::Io { dir: dir.to_path_buf(), message: error.to_string() };
    let empty = match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => true,
        Err(error) => return Err(io(error)),
    };
    if empty {
        std::fs::create_dir_all(dir).map_err(io)?;
        return Repository::init(dir).map_err(git("init", dir));
    }
    Repository::open(dir).map_err(|error| GitError::NotARepository {
        dir: dir.to_path_buf(),
        message: format!("{}; the directory is not an Akritas clone (remove it)", error.message()),
    })
}

/// The commit a ref names after a fetch: a remote branch, a tag, or a commit id.
fn resolve(repo: &Repository, reference: &str) -> Option<Oid> {
    let name = reference.strip_prefix("refs/heads/").unwrap_or(reference);
    let candidates = [format!("refs/remotes/{ORIGIN}/{name}"), format!("refs/tags/{name}"), reference.to_string()];
    for candidate in &candidates {
        if let Ok(found) = repo.find_reference(candidate)
            && let Ok(commit) = found.peel_to_commit()
        {
            return Some(commit.id());
        }
    }
    let is_hex = (4..=64).contains(&reference.len()) && reference.chars().all(|c| c.is_ascii_hexdigit());
    if is_hex {
        return repo.revparse_single(reference).ok()?.peel_to_commit().ok().map(|c| c.id());
    }
    None
}

/// The content of `path` at `commit` in the clone or working tree at `dir`; `None`
/// when the commit has no such file. Blocking.
pub fn blob_at(dir: &Path, commit: &str, path: &str) -> Result<Option<Vec<u8>>, GitError> {
    let repo = Repository::open(dir)
        .map_err(|e| GitError::NotARepository { dir: dir.to_path_buf(), message: e.message().to_string() })?;
    let tree = commit_of(&repo, dir, commit)?.tree().map_err(git("read a tree", dir))?;
    let entry = match tree.get_path(Path::new(path)) {
        Ok(entry) => entry,
        Err(error) if error.code() == git2::ErrorCode::NotFound => return Ok(None),
        Err(error) => return Err(git("read a tree", dir)(error)),
    };
    let object = entry.to_object(&repo).map_err(git("read a blob", dir))?;
    Ok(object.as_blob().map(|blob| blob.content().to_vec()))
}

fn commit_of<'r>(repo: &'r Repository, dir: &Path, commit: &str) -> Result<git2::Commit<'r>, GitError> {
    let unknown = || GitError::UnknownCommit { dir: dir.to_path_buf(), commit: commit.to_string() };
    let oid = Oid::from_str(commit).map_err(|_| unknown())?;
    repo.find_commit(oid).map_err(|_| unknown())
}

/// Commits `changes` on top of `base_commit` (the tree is the base's with each
/// change's content) as the new branch `refs/heads/<branch>` in the clone at `dir`,
/// and pushes that branch to `remote` without force: the remote must not have the
/// branch yet. The working tree and other branches are never touched. Blocking.
pub fn publish(
    dir: &Path,
    remote: &Remote,
    base_commit: &str,
    changes: &[FileChange],
    branch: &str,
    message: &str,
    author: (&str, &str),
) -> Result<Published, GitError> {
    publish_with(dir, remote, base_commit, changes, branch, message, author, &Limits::default())
}

/// [`publish`] with explicit transport limits. Blocking.
#[allow(clippy::too_many_arguments)]
pub fn publish_with(
    dir: &Path,
    remote: &Remote,
    base_commit: &str,
    changes: &[FileChange],
    branch: &str,
    message: &str,
    author: (&str, &str),
    limits: &Limits,
) -> Result<Published, GitError> {
    let url = parse_remote_url(&remote.url)?;
    let refname = format!("refs/heads/{branch}");
    if branch.is_empty() || !git2::Reference::is_valid_name(&refname) {
        return Err(GitError::InvalidBranch(branch.to_string()));
    }
    let repo = Repository::open(dir)
        .map_err(|e| GitError::NotARepository { dir: dir.to_path_buf(), message: e.message().to_string() })?;
    if repo.find_reference(&refname).is_ok() {
        return Err(GitError::BranchExists { branch: branch.to_string(), place: format!("in {}", dir.display()) });
    }
    let base = commit_of(&repo, dir, base_commit)?;
    let tree = changed_tree(&repo, dir, &base, changes)?;
    let signature = git2::Signature::now(author.0, author.1).map_err(git("sign the commit", dir))?;
    let commit = repo.commit(None, &signature, &signature, message, &tree, &[&base]).map_err(git("commit", dir))?;
    repo.reference(&refname, commit, false, "akritas: publish an approved change")
        .map_err(git("create the branch", dir))?;
    let pushed = push(&repo, dir, &url, remote, &refname, limits);
    if pushed.is_err() {
        // The branch exists only to be pushed; a retry may use the same name.
        if let Ok(mut created) = repo.find_reference(&refname) {
            let _ = created.delete();
        }
    }
    pushed.map(|()| Published { branch: branch.to_string(), commit: commit.to_string() })
}

/// The base tree with every change written (blobs with the change's mode).
fn changed_tree<'r>(
    repo: &'r Repository,
    dir: &Path,
    base: &git2::Commit<'r>,
    changes: &[FileChange],
) -> Result<git2::Tree<'r>, GitError> {
    let base_tree = base.tree().map_err(git("read a tree", dir))?;
    let mut index = git2::Index::new().map_err(git("build the tree", dir))?;
    index.read_tree(&base_tree).map_err(git("build the tree", dir))?;
    for change in changes {
        let invalid = |reason: &str| GitError::InvalidChange { path: change.path.clone(), reason: reason.to_string() };
        let safe = !change.path.is_empty()
            && !change.path.starts_with('/')
            && change
                .path
                .split('/')
                .all(|part| !matches!(part, "" | "." | "..") && !part.eq_ignore_ascii_case(".git"));
        if !safe {
            return Err(invalid("not a relative, canonical path inside the repository"));
        }
        let existing = match base_tree.get_path(Path::new(&change.path)) {
            Ok(entry) => Some(entry.to_object(repo).map_err(git("read a blob", dir))?),
            Err(_) => None,
        };
        let existing = existing.as_ref().and_then(|o| o.as_blob()).map(|b| b.content());
        match (&change.before, existing) {
            (Some(before), Some(current)) if before.as_bytes() == current => {}
            (Some(_), _) => return Err(invalid("the base commit's content differs from the previewed original")),
            (None, None) => {}
            (None, Some(_)) => return Err(invalid("the file to create exists at the base commit")),
        }
        let mode = if change.mode & 0o111 != 0 { 0o100755 } else { 0o100644 };
        let id = repo.blob(change.after.as_bytes()).map_err(git("write a blob", dir))?;
        let entry = git2::IndexEntry {
            ctime: git2::IndexTime::new(0, 0),
            mtime: git2::IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: u32::try_from(change.after.len()).unwrap_or(u32::MAX),
            id,
            flags: u16::try_from(change.path.len()).unwrap_or(0xfff).min(0xfff),
            flags_extended: 0,
            path: change.path.as_bytes().to_vec(),
        };
        index.add(&entry).map_err(git("build the tree", dir))?;
    }
    let tree = index.write_tree_to(repo).map_err(git("build the tree", dir))?;
    repo.find_tree(tree).map_err(git("build the tree", dir))
}

fn push(
    repo: &Repository,
    dir: &Path,
    url: &Url,
    remote: &Remote,
    refname: &str,
    limits: &Limits,
) -> Result<(), GitError> {
    let mut anonymous = repo.remote_anonymous(url.as_str()).map_err(git("configure the remote", dir))?;
    let mut exists = false;
    let mut rejected: Option<String> = None;
    let outcome = with_call(remote.credentials.as_ref(), limits, || {
        let mut callbacks = git2::RemoteCallbacks::new();
        callbacks.push_negotiation(|updates| {
            // The remote advertised the branch: creating it would overwrite (or
            // fast-forward) someone else's branch.
            if updates.iter().any(|u| !u.src().is_zero()) {
                exists = true;
                return Err(git2::Error::from_str("the branch exists on the remote"));
            }
            Ok(())
        });
        callbacks.push_update_reference(|_, status| {
            if let Some(status) = status {
                rejected = Some(status.to_string());
            }
            Ok(())
        });
        let mut options = git2::PushOptions::new();
        options.remote_callbacks(callbacks);
        anonymous.push(&[format!("{refname}:{refname}")], Some(&mut options))
    });
    let branch = refname.trim_start_matches("refs/heads/").to_string();
    if exists {
        return Err(GitError::BranchExists { branch, place: format!("on {}", display_url(url)) });
    }
    outcome.map_err(from_call("push", dir))?;
    match rejected {
        Some(message) => Err(GitError::PushRejected { url: display_url(url), reference: refname.to_string(), message }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_are_http_or_https_without_credentials() {
        assert!(parse_remote_url("https://git.example/infra.git").is_ok());
        assert!(parse_remote_url("http://127.0.0.1:8080/infra.git").is_ok());
        let ssh = parse_remote_url("ssh://git@git.example/infra.git").unwrap_err().to_string();
        assert!(ssh.contains("ssh remotes are not supported; use an https URL with a token"), "{ssh}");
        let scp = parse_remote_url("git@git.example:infra.git").unwrap_err().to_string();
        assert!(scp.contains("ssh remotes are not supported"), "{scp}");
        let with_token = parse_remote_url("https://x:s3cr3t@git.example/infra.git").unwrap_err().to_string();
        assert!(with_token.contains("carries credentials") && !with_token.contains("s3cr3t"), "{with_token}");
        assert!(parse_remote_url("file:///srv/infra.git").is_err());
    }

    #[test]
    fn credentials_debug_hides_the_token() {
        let credentials = Credentials { username: "x-access-token".into(), token: "s3cr3t".into() };
        let shown = format!("{credentials:?}");
        assert!(shown.contains("x-access-token") && !shown.contains("s3cr3t"), "{shown}");
    }

    #[test]
    fn head_of_a_directory_without_repository_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let error = head(dir.path()).unwrap_err();
        assert!(matches!(error, GitError::NotARepository { .. }), "{error}");
    }
}
