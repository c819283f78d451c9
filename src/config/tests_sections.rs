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

/// A range a setting's `check` enforces is the range its `expect` text (the message a bad
/// value gets, and the help) states, where the settings table gives both; a setting that
/// declares a `range` has its check, text and help made from that one declaration.
#[test]
fn every_integer_range_check_matches_its_expected_text() {
    let table = include_str!("mod.rs");
    let number = |text: &str| text.replace('_', "").parse::<u64>().unwrap();
    let mut checked = 0;
    let entries: Vec<&str> = table.split("\n    /// ").collect();
    for entry in entries {
        let Some(check) = entry.split("check value::u").nth(1) else { continue };
        let Some(bounds) = check.split_once("::<").and_then(|(_, rest)| rest.split_once(">")).map(|(b, _)| b) else {
            continue;
        };
        let (lo, hi) = bounds.split_once(", ").unwrap();
        let expect = entry.split("expect \"").nth(1).and_then(|e| e.split('"').next()).unwrap();
        if hi.contains("::MAX") {
            assert!(lo == "1" && expect.starts_with("a positive integer"), "{bounds} but the text says {expect:?}");
            checked += 1;
            continue;
        }
        let stated: Vec<u64> =
            expect.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
        assert!(
            stated.starts_with(&[number(lo), number(hi)]),
            "the check allows {lo} to {hi} but the text says {expect:?}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "{checked} range checks found");
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
}
