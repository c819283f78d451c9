//! Where a setting came from, and what is wrong with one: every message names the
//! source of the bad value and what to change.

use std::fmt;
use std::path::PathBuf;

/// Where a setting's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Built-in default.
    Default,
    /// Config file path and JSON path of the value (e.g. `$.max_tokens`).
    File(PathBuf, String),
    /// Environment variable name.
    Env(String),
    /// Flag name including dashes (e.g. `--max-tokens`).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p, ptr) => write!(f, "config file {} ({ptr})", p.display()),
            Source::Env(v) => write!(f, "environment variable {v}"),
            Source::Flag(n) => write!(f, "flag {n}"),
        }
    }
}

/// A configuration error; every message names where the bad value came from
/// and what to change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag value is invalid.
    #[error("invalid value {value:?} for flag {flag}: {problem}")]
    InvalidFlag {
        /// Flag name, e.g. `--max-tokens`.
        flag: String,
        /// Offending text.
        value: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// An environment variable value is invalid.
    #[error("invalid value {value:?} for environment variable {var}: {problem}")]
    InvalidEnv {
        /// Variable name, e.g. `AKRITAS_MAX_TOKENS`.
        var: String,
        /// Offending text.
        value: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// A value inside the config file is invalid.
    #[error("config file {}: {pointer}: {problem}", path.display())]
    InvalidFile {
        /// Config file path.
        path: PathBuf,
        /// JSON path, e.g. `$.max_tokens` or `$.api_keys[1].name`.
        pointer: String,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// The config file as a whole cannot be used (missing, too large, not
    /// JSON, ...).
    #[error("config file {}: {problem}", path.display())]
    File {
        /// Config file path.
        path: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// Individually valid settings contradict each other; names each source.
    #[error("{0}")]
    Conflict(String),
}
