//! Methods of [`Settings`]: derived values, where a value came from, and the rules
//! that span several settings.

use std::fmt;

use super::{ConfigError, Settings, Source};

impl Settings {
    /// Operator mode: the namespaces watched (`namespace` and `namespaces`
    /// together); empty = every namespace.
    pub fn watched_namespaces(&self) -> Vec<String> {
        let mut all: Vec<String> = self.namespace.iter().cloned().collect();
        all.extend(self.namespaces.iter().filter(|ns| Some(*ns) != self.namespace.as_ref()).cloned());
        all
    }

    /// Whether the stores are on the PostgreSQL database (`storage_backend: postgres`).
    pub fn on_database(&self) -> bool {
        self.storage_backend == "postgres"
    }

    /// Where the value of `key` came from ([`Source::Default`] when not
    /// overridden or unknown).
    pub fn origin(&self, key: &str) -> Source {
        self.origins.get(key).cloned().unwrap_or(Source::Default)
    }

    /// `key (value, from source)` for conflict messages.
    fn cite(&self, key: &str, value: impl fmt::Display) -> String {
        format!("{key} ({value}, from {})", self.origin(key))
    }

    /// Checks rules that span several settings.
    pub(super) fn check_consistency(&self) -> Result<(), ConfigError> {
        if self.max_tokens_limit < self.max_tokens {
            return Err(ConfigError::Conflict(format!(
                "{} must be >= {}; raise max_tokens_limit or lower max_tokens",
                self.cite("max_tokens_limit", self.max_tokens_limit),
                self.cite("max_tokens", self.max_tokens),
            )));
        }
        if self.max_retrieved_context_bytes > self.max_tool_result_bytes {
            return Err(ConfigError::Conflict(format!(
                "{} must be <= {}; lower max_retrieved_context_bytes or raise max_tool_result_bytes",
                self.cite("max_retrieved_context_bytes", self.max_retrieved_context_bytes),
                self.cite("max_tool_result_bytes", self.max_tool_result_bytes),
            )));
        }
        if self.kubernetes && !self.resources.is_empty() {
            let dirs: Vec<String> = self.resources.iter().map(|p| p.display().to_string()).collect();
            return Err(ConfigError::Conflict(format!(
                "{} cannot be combined with {}; operator mode reads resources from the cluster, \
                 so unset one of them",
                self.cite("kubernetes", true),
                self.cite("resources", dirs.join(", ")),
            )));
        }
        if self.on_database()
            && let Some(anchor) = &self.audit_anchor_file
        {
            return Err(ConfigError::Conflict(format!(
                "{} keeps the head of the audit journal file, which {} does not write: the audit is rows in                  the database, checked by `akritas audit verify --database-env`; unset one of them",
                self.cite("audit_anchor_file", anchor),
                self.cite("storage_backend", &self.storage_backend),
            )));
        }
        if let Some(anchor) = &self.audit_anchor_file {
            let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            if absolute(std::path::Path::new(anchor)).starts_with(absolute(&self.data_dir)) {
                return Err(ConfigError::Conflict(format!(
                    "{} lies inside {}; the anchor must be kept where whoever rewrites the journal cannot also \
                     rewrite it: put it on another volume",
                    self.cite("audit_anchor_file", anchor),
                    self.cite("data_dir", self.data_dir.display()),
                )));
            }
        }
        Ok(())
    }
}
