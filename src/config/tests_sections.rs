//! The config file's sections, and the flat keys of files written before them.

use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// Reads `body` as a config file's text.
fn read(body: &str) -> Result<Settings, String> {
    from_file_text(&PathBuf::from("akritas.json"), body).map_err(|e| e.to_string())
}

fn refused(body: &str) -> String {
    match read(body) {
        Ok(settings) => panic!("expected {body} to be refused, got {settings:?}"),
        Err(e) => e,
    }
}

#[test]
fn every_setting_has_one_of_the_sections_and_every_section_has_settings() {
    for key in KEYS {
        let section = section_of(key).unwrap_or_else(|| panic!("{key} has no section"));
        assert!(SECTIONS.contains(&section), "{key} is in {section}, which SECTIONS does not list");
    }
    for section in SECTIONS {
        assert!(KEYS.iter().any(|key| section_of(key) == Some(section)), "the section {section} holds no setting");
    }
}

#[test]
fn settings_in_their_sections_are_read_and_their_origin_is_their_path() {
    let settings = read(
        r#"{"version": 1,
            "server": {"address": "127.0.0.1:9001", "log_format": "json"},
            "model": {"model": "ops", "base_url": "http://127.0.0.1:8081/v1"},
            "budget": {"max_tokens": 512},
            "alerts": {"alert_workers": 3},
            "storage": {"data_dir": "/var/lib/akritas"},
            "operator": {"kubernetes": false, "shared_namespaces": ["platform"]},
            "mcp": {"mcp_max_sessions": 7},
            "change": {"change_approval_ttl": "10m"},
            "kubernetes": {"kubernetes_tools": false}}"#,
    )
    .unwrap();
    assert_eq!(settings.address.port(), 9001);
    assert_eq!(settings.log_format, LogFormat::Json);
    assert_eq!(settings.model, "ops");
    assert_eq!(settings.base_url, "http://127.0.0.1:8081/v1");
    assert_eq!(settings.max_tokens, 512);
    assert_eq!(settings.alert_workers, 3);
    assert_eq!(settings.data_dir, PathBuf::from("/var/lib/akritas"));
    assert_eq!(settings.shared_namespaces, vec!["platform".to_string()]);
    assert_eq!(settings.mcp_max_sessions, 7);
    assert_eq!(settings.change_approval_ttl, Duration::from_secs(600));
    assert!(!settings.kubernetes_tools);
    assert!(settings.deprecated.is_empty(), "{:?}", settings.deprecated);
    assert_eq!(
        settings.origins.get("max_tokens"),
        Some(&Source::File(PathBuf::from("akritas.json"), "$.budget.max_tokens".into()))
    );
    let e = refused(r#"{"version": 1, "budget": {"max_tokens": 0}}"#);
    assert!(e.contains("$.budget.max_tokens: "), "a bad value names its path in the section: {e}");
}

#[test]
fn a_flat_key_of_an_older_file_is_still_read_with_a_warning_naming_its_section() {
    // `model` and `kubernetes` are the names of both a section and a setting.
    let settings = read(
        r#"{"version": 1, "max_tokens": 300, "model": "flat", "kubernetes": false, "server": {"log_format": "json"}}"#,
    )
    .unwrap();
    assert_eq!((settings.max_tokens, settings.model.as_str(), settings.log_format), (300, "flat", LogFormat::Json));
    assert_eq!(
        settings.deprecated,
        [
            "akritas.json: the top-level key \"max_tokens\" is deprecated; move it into the section \"budget\" (budget.max_tokens)",
            "akritas.json: the top-level key \"model\" is deprecated; move it into the section \"model\" (model.model)",
            "akritas.json: the top-level key \"kubernetes\" is deprecated; move it into the section \"operator\" (operator.kubernetes)",
        ]
    );
    assert_eq!(
        settings.origins.get("max_tokens"),
        Some(&Source::File(PathBuf::from("akritas.json"), "$.max_tokens".into()))
    );
}

#[test]
fn a_setting_in_the_wrong_section_twice_or_unknown_is_refused_with_the_fix() {
    let e = refused(r#"{"version": 1, "server": {"max_tokens": 10}}"#);
    assert!(
        e.ends_with(r#"$.server.max_tokens: belongs to the section "budget"; move it to budget.max_tokens"#),
        "{e}"
    );
    let e = refused(r#"{"version": 1, "max_tokens": 10, "budget": {"max_tokens": 20}}"#);
    assert!(e.ends_with("$.budget.max_tokens: is also given at $.max_tokens; keep only budget.max_tokens"), "{e}");
    let e = refused(r#"{"version": 1, "budget": {"max_tokens": 10, "max_tokens": 20}}"#);
    assert!(e.contains("duplicate field \"max_tokens\""), "a duplicate inside a section: {e}");
    let e = refused(r#"{"version": 1, "budget": {"max_tokenz": 10}}"#);
    assert!(e.ends_with(r#"$.budget.max_tokenz: unknown field; did you mean "budget.max_tokens"?"#), "{e}");
    let e = refused(r#"{"version": 1, "buget": {"max_tokens": 10}}"#);
    assert!(e.ends_with(r#"$.buget: unknown field; did you mean the section "budget"?"#), "{e}");
    let e = refused(r#"{"version": 1, "budget": 3}"#);
    assert!(e.contains(r#"the section "budget" must be a JSON object of settings, got 3"#), "{e}");
    let e = refused(r#"{"version": 1, "model": ["a"]}"#);
    assert!(e.contains("$.model: "), "a flat model that is not a name is a bad value of the setting: {e}");
}

/// Every numeric bound is declared once: no setting writes an integer, byte or duration bound
/// into both an `expect` text and a `check`, since the `range` line makes both.
#[test]
fn no_setting_states_a_numeric_bound_twice() {
    let table = include_str!("mod.rs");
    for entry in table.split("\n    /// ").skip(1) {
        let name = entry.lines().nth(1).unwrap_or(entry).trim();
        for twice in ["value::u32_in", "value::u64_in", "optional::u32_in", "duration::upto"] {
            assert!(!entry.contains(twice), "{name}: declare the bound as a `range` instead of {twice}");
        }
    }
    let ranges = table.matches("range ").count();
    assert!(ranges >= 40, "{ranges} settings declare a range");
}

/// A setting declared with `range` gets its check, its message and its help from the one
/// declaration.
#[test]
fn a_declared_range_makes_the_check_the_message_and_the_help() {
    assert_eq!(
        flag_help_for("snapshot_records"),
        "Journal records between two snapshots of the state derived from a journal, 100-10000000 \
         [env: AKRITAS_SNAPSHOT_RECORDS] [default: 20000]"
    );
    for bad in ["99", "10000001"] {
        let e = refused(&format!(r#"{{"version": 1, "storage": {{"snapshot_records": {bad}}}}}"#));
        assert!(e.contains("$.storage.snapshot_records: expected an integer from 100 to 10000000"), "{e}");
    }
    let edges = [("100", 100), ("10000000", 10_000_000)];
    for (text, value) in edges {
        let settings = read(&format!(r#"{{"version": 1, "storage": {{"snapshot_records": {text}}}}}"#)).unwrap();
        assert_eq!(settings.snapshot_records, value);
    }
    for (key, bad, told) in [
        ("max_tokens", "0", "expected a positive integer"),
        ("max_body_bytes", "1023", "expected an integer from 1024 to 67108864 (bytes)"),
        ("max_tool_result_bytes", "0", "expected a positive integer (bytes)"),
        ("model_context_tokens", "511", "expected an integer from 512 to 10000000, or empty"),
        ("request_timeout", "0s", "expected a duration above 0 and at most 24h, such as 10m"),
        ("request_timeout", "24h 1s", "expected a duration above 0 and at most 24h, such as 10m"),
        ("run_queue_timeout", "10m 1s", "expected a duration from 0s to 10m, such as 30s"),
        ("audit_retention", "3653d", "expected a duration from 0s to 10y, such as 365d"),
    ] {
        let e = refused(&in_section(key, bad));
        assert!(e.contains(told), "{key}={bad}: {e}");
    }
    for (key, edge) in [("request_timeout", "24h"), ("run_queue_timeout", "0s"), ("audit_retention", "10y")] {
        let settings = read(&in_section(key, edge)).unwrap();
        assert!(settings.origins.contains_key(key), "{key}={edge} is inside its range");
    }
    assert_eq!(
        flag_help_for("request_timeout"),
        "Timeout of one request, > 0 and <= 24h [env: AKRITAS_REQUEST_TIMEOUT] [default: 10m]"
    );
    assert!(
        flag_help_for("run_queue_timeout")
            .starts_with("Wait for a free run slot; 0s fails at once when saturated, <= 10m [")
    );
    assert!(flag_help_for("max_body_bytes").starts_with("Largest request body in bytes, 1024-67108864 ["));
}

/// A config file giving `key` the value `value` (a number, or else a string) in its section.
fn in_section(key: &str, value: &str) -> String {
    let section = section_of(key).unwrap();
    let value = if value.parse::<u64>().is_ok() { value.to_string() } else { format!("{value:?}") };
    format!(r#"{{"version": 1, "{section}": {{"{key}": {value}}}}}"#)
}

/// A duration bound's text is read at compile time as humantime reads it.
#[test]
fn a_duration_bound_is_read_as_humantime_reads_it() {
    for text in ["1m", "10m", "1h", "24h", "7d", "30d", "365d", "10y", "90s"] {
        let read = humantime::parse_duration(text).unwrap().as_secs();
        assert_eq!(super::duration::seconds(text), read, "{text}");
    }
}
