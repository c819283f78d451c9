//! Values the host, its adapters and its supervisors share: host options, reconnect backoff,
//! discovered tools and adapter status.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Bound on an error message kept in status ([`AdapterStatus::last_error`], tool reasons).
pub(crate) const MAX_ERROR_BYTES: usize = 1024;

/// Exponential reconnect backoff bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub min: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The delay after a retry that waited `previous`: doubled, then kept within `min..=max`
    /// (`min` wins when the bounds are inverted).
    pub fn next(&self, previous: Duration) -> Duration {
        previous.saturating_mul(2).min(self.max).max(self.min)
    }
}

/// Host-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostOptions {
    /// Names of host environment variables a stdio child may inherit; nothing else is inherited.
    pub base_env: Vec<String>,
    /// Bound on one rendered tool result in bytes.
    pub max_result_bytes: usize,
    /// Time a stopping child gets after SIGTERM before it is killed.
    pub stop_grace: Duration,
    pub reconnect_backoff: Backoff,
    /// Bound on starting a session (spawn/connect + initialize) and on listing tools.
    pub connect_timeout: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            base_env: ["PATH", "HOME", "LANG", "TZ", "TMPDIR"].into_iter().map(str::to_owned).collect(),
            max_result_bytes: 256 * 1024,
            stop_grace: Duration::from_secs(5),
            reconnect_backoff: Backoff { min: Duration::from_millis(500), max: Duration::from_secs(30) },
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// One remote tool as the host sees it.
/// One tool of an adapter as the host sees it: the same value its MCP adapter's status shows.
pub use crate::resources::mcp_adapter::DiscoveredTool;

/// Where an adapter's supervisor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdapterPhase {
    /// Starting a session (first attempt or after a backoff).
    Connecting,
    /// Session up and tools listed.
    Connected,
    /// The last attempt or session failed (`last_error`); waiting to retry.
    Retrying,
}

/// Observed state of one adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdapterStatus {
    pub key: String,
    pub connected: bool,
    pub phase: AdapterPhase,
    /// Most recent connection, listing or session failure; cleared by a successful listing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Process id of the live stdio child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Tools of the last successful listing (kept while reconnecting).
    pub tools: Vec<DiscoveredTool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::mcp_adapter::Permission;

    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let backoff = Backoff { min: Duration::from_millis(500), max: Duration::from_secs(3) };
        let mut delay = backoff.min;
        let mut seen = Vec::new();
        for _ in 0..5 {
            delay = backoff.next(delay);
            seen.push(delay.as_millis());
        }
        assert_eq!(seen, [1000, 2000, 3000, 3000, 3000]);
    }

    #[test]
    fn backoff_never_goes_below_its_minimum_nor_overflows() {
        let backoff = Backoff { min: Duration::from_secs(1), max: Duration::from_secs(30) };
        assert_eq!(backoff.next(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(backoff.next(Duration::MAX), Duration::from_secs(30));
        let inverted = Backoff { min: Duration::from_secs(5), max: Duration::from_secs(2) };
        assert_eq!(inverted.next(Duration::from_secs(1)), Duration::from_secs(5));
    }

    #[test]
    fn status_serialises_in_camel_case_without_empty_fields() {
        let status = AdapterStatus {
            key: "McpAdapter/ns/x".into(),
            connected: false,
            phase: AdapterPhase::Retrying,
            last_error: None,
            pid: None,
            tools: vec![DiscoveredTool {
                name: "x.q".into(),
                remote_name: "q".into(),
                permission: Permission::Read,
                authorized: true,
                reason: None,
            }],
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "key": "McpAdapter/ns/x",
                "connected": false,
                "phase": "retrying",
                "tools": [{"name": "x.q", "remoteName": "q", "permission": "read", "authorized": true}],
            })
        );
    }
}
