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

/// Whole seconds of a bound written as a number and one unit (`s`, `m`, `h`, `d`, or `y` of
/// 365.25 days, as humantime reads it): `"24h"` is 86,400. The settings table writes each
/// duration bound once, as text, and takes its check from it at compile time; any other text
/// fails the build.
pub(crate) const fn seconds(bound: &str) -> u64 {
    let bytes = bound.as_bytes();
    let mut n = 0u64;
    let mut i = 0;
    while i < bytes.len() && bytes[i].is_ascii_digit() {
        n = n * 10 + (bytes[i] - b'0') as u64;
        i += 1;
    }
    assert!(i > 0 && i + 1 == bytes.len(), "a duration bound is digits and one unit");
    n * match bytes[i] {
        b's' => 1,
        b'm' => 60,
        b'h' => 3_600,
        b'd' => 86_400,
        b'y' => 31_557_600,
        _ => panic!("a duration bound's unit is s, m, h, d or y"),
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
