//! The change pipeline: the only path in Akritas that writes.
//!
//! A preview reads a snapshot of a Workspace (explicit files, or files found by a
//! bounded lexical discovery), asks the model for one structured proposal of exact
//! edits, applies those edits in memory, builds the unified diff itself, and runs
//! the Workspace's validators on an isolated copy. The preview is stored as a
//! pending change behind a random, single-use, expiring approval id (kept hashed
//! on disk). Apply re-verifies every original byte and writes atomically, or
//! pushes a reviewable branch to the Workspace's remote.
//!
//! Module map:
//! * [`paths`]: path rules (relative, canonical, root-confined, no secret names).
//! * [`snapshot`]: loading explicit files; [`discovery`]: scanning and ranking.
//! * [`proposal`]: the forced `akritas_propose_edits` call's schema, prompt and checks.
//! * [`edits`]: exact unique replacement and safe creation; [`diff`]: unified diff.
//! * [`validators`]: running ValidatorProfiles on an isolated copy, in the [`sandbox`].
//! * [`approvals`]: the durable store of pending changes; [`apply`]: writing them.
//! * [`git`]: opening, cloning, fetching and publishing branches with git2.
//! * [`service`]: the preview and apply Runs that tie the parts together.

mod answer;
pub(crate) mod apply;
pub mod approvals;
mod copy;
pub(crate) mod diff;
pub(crate) mod discovery;
pub(crate) mod edits;
mod error;
pub mod git;
pub(crate) mod paths;
mod preview;
pub(crate) mod proposal;
mod record;
pub mod sandbox;
pub mod service;
pub(crate) mod snapshot;
#[cfg(test)]
mod testing;
pub mod tree;
mod types;
pub mod validators;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) use error::ChangeError;

/// Most files a snapshot holds.
pub const MAX_FILES: usize = 32;
/// Largest file a snapshot reads, and largest content an edit produces.
pub const MAX_FILE_BYTES: usize = 64 * 1024;
/// Largest request plus snapshot contents (and final changed contents).
pub const MAX_SNAPSHOT_BYTES: usize = 256 * 1024;
/// Largest change request text.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A file as the preview read it from the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Relative, canonical path (`/`-separated).
    pub path: String,
    /// UTF-8 content without NUL.
    pub content: String,
    /// Unix permission bits (`0o644`).
    pub mode: u32,
}

/// What an edit does to its path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Replace exact text of an existing file.
    #[default]
    Replace,
    /// Create a new file.
    Create,
}

/// The final state of one changed file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Relative, canonical path.
    pub path: String,
    /// Replace or create.
    pub operation: Operation,
    /// The original content (`None` for a created file).
    pub before: Option<String>,
    /// The new content.
    pub after: String,
    /// Permission bits to write (the original's for a replacement, `0o644` for a create).
    pub mode: u32,
}

/// A validator to run on a prepared change (from a ValidatorProfile).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorSpec {
    /// Profile name.
    pub name: String,
    /// Program and arguments (never a shell); an element `{files}` expands to the
    /// changed files the profile matches.
    pub argv: Vec<String>,
    /// Glob patterns of changed files that make the profile run.
    pub files: Vec<String>,
    /// Wall-time limit.
    pub timeout: Duration,
    /// Bytes of combined stdout and stderr kept.
    pub output_limit: usize,
    /// Names of host environment variables passed through.
    pub env: Vec<String>,
    /// Whether the validator needs the whole workspace (else it gets only the changed files).
    pub full_tree: bool,
}

/// How a validator ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValidatorStatus {
    /// Exit status 0.
    Passed,
    /// Non-zero exit, signal, timeout or failure to start.
    Failed,
    /// No changed file matches the profile.
    Skipped,
}

/// The outcome of one validator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidatorResult {
    /// Profile name.
    pub name: String,
    /// Passed, failed (non-zero exit, signal, timeout, no start) or skipped (no file matched).
    pub status: ValidatorStatus,
    /// Changed files the profile matched.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// The argv that ran (after `{files}` expansion); empty when skipped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Exit code, when the program exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Combined output, bounded (secrets masked), or why it did not run.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// Whether output was cut at the profile's limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Wall time.
    pub duration_ms: u64,
}
