//! Durations as setting values: read with humantime (`30s`, `10m`, `365d`, `1h 30m`),
//! printed in whole days, hours, minutes and seconds (`365d`, not humantime's
//! `11months 30days 3h 50m 24s`) so that the printed form reads well and parses back
//! to the same value.

use std::time::Duration;

use super::value::{SettingValue, expected};

/// Units a duration is printed in, largest first, in nanoseconds.
const UNITS: [(&str, u128); 7] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// `d` in the largest whole units, space-separated (`365d`, `1d 1h 1m 1s`, `1s 500ms`,
/// `0s`); [`humantime::parse_duration`] reads it back to the same value.
pub(crate) fn format(d: Duration) -> String {
    let mut rest = d.as_nanos();
    let mut parts = Vec::new();
    for (unit, nanos) in UNITS {
        if rest >= nanos {
            parts.push(format!("{}{unit}", rest / nanos));
            rest %= nanos;
        }
    }
    if parts.is_empty() { "0s".to_string() } else { parts.join(" ") }
}

impl SettingValue for Duration {
    fn from_text(s: &str, expect: &str) -> Result<Self, String> {
        humantime::parse_duration(s.trim()).map_err(|_| expected(expect))
    }
    fn to_text(&self) -> String {
        format(*self)
    }
}

/// Duration of at most `MAX_SECS`; zero only when `ZERO_OK`.
pub(crate) fn upto<const MAX_SECS: u64, const ZERO_OK: bool>(v: Duration, expect: &str) -> Result<Duration, String> {
    if (v.is_zero() && !ZERO_OK) || v > Duration::from_secs(MAX_SECS) {
        Err(format!("{} is out of range; expected {expect}", format(v)))
    } else {
        Ok(v)
    }
}
