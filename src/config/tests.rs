use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};

use super::value::{normalize_http_url, split_list};
use super::*;
use crate::language::normalize_language;

#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    serve: ServeFlags,
}

fn flags(args: &[&str]) -> ServeFlags {
    let argv = std::iter::once("akritas").chain(args.iter().copied());
    match Cli::try_parse_from(argv) {
        Ok(cli) => cli.serve,
        Err(e) => panic!("flags {args:?} did not parse: {e}"),
    }
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k: &str| map.get(k).cloned()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn write_file(dir: &tempfile::TempDir, name: &str, body: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, body).unwrap();
    p
}

fn load_ok(f: &ServeFlags, env: &dyn Fn(&str) -> Option<String>) -> Settings {
    match load(f, env) {
        Ok(s) => s,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn load_err(f: &ServeFlags, env: &dyn Fn(&str) -> Option<String>) -> String {
    match load(f, env) {
        Ok(s) => panic!("expected an error, got {s:?}"),
        Err(e) => e.to_string(),
    }
}

/// Loads with only a config file holding `body` (given via --config).
fn load_file(body: &str) -> (Result<Settings, ConfigError>, PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(&dir, "akritas.json", body.as_bytes());
    let f = flags(&["--config", p.to_str().unwrap()]);
    (load(&f, &no_env), p, dir)
}

fn file_err(body: &str) -> (String, PathBuf) {
    let (r, p, _dir) = load_file(body);
    match r {
        Ok(s) => panic!("expected an error for {body}, got {s:?}"),
        Err(e) => (e.to_string(), p),
    }
}

fn key(name: &str, env: &str) -> ApiKeyRef {
    ApiKeyRef::admin(name, env)
}

#[test]
fn clap_definition_is_valid_and_help_states_defaults() {
    Cli::command().debug_assert();
    let help = Cli::command().render_long_help().to_string();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("--max-tokens <N>"), "{help}");
    assert!(help.contains("[default: 1024]"), "{help}");
    assert!(help.contains("--api-key <NAME=ENV_VAR[:SCOPES][@NAMESPACE]>"), "{help}");
    assert!(help.contains("[env: AKRITAS_MAX_TOKENS] [default: 1024]"), "{help}");
    assert!(help.contains("[env: AKRITAS_REQUEST_TIMEOUT] [default: 10m]"), "{help}");
    assert!(help.contains("[env: AKRITAS_API_KEYS] [default: default=AKRITAS_API_KEY:admin]"), "{help}");
    assert!(help.contains("[env: AKRITAS_CONFIG] [default: none]"), "{help}");
    // The environment is read by `load` (which records it as the origin), never by clap.
    let command = Cli::command();
    let clap_env: Vec<_> = command.get_arguments().filter(|a| a.get_env().is_some()).map(|a| a.get_id()).collect();
    assert!(clap_env.is_empty(), "clap env attribute must not be used: {clap_env:?}");
}

#[test]
fn list_flags_take_comma_separated_values() {
    let s = load_ok(&flags(&["--resources", "a,b", "--resources", "c", "--api-key", "ops=OPS_KEY,ci=CI_KEY"]), &no_env);
    assert_eq!(s.resources, vec![PathBuf::from("a"), PathBuf::from("b"), PathBuf::from("c")]);
    assert_eq!(s.api_keys, vec![key("ops", "OPS_KEY"), key("ci", "CI_KEY")]);
    assert_eq!(s.origin("resources"), Source::Flag("--resources".into()));
    let e = load_err(&flags(&["--resources", "a,,b"]), &no_env);
    assert!(e.contains("flag --resources"), "{e}");
}

#[test]
fn keys_env_and_flag_names() {
    assert_eq!(KEYS.len(), 97);
    assert!(KEYS.contains(&"max_retrieved_context_bytes"));
    assert_eq!(env_var_name("max_tokens"), "AKRITAS_MAX_TOKENS");
    assert_eq!(flag_name("max_tokens"), Some("--max-tokens"));
    assert_eq!(flag_name("api_keys"), Some("--api-key"));
    assert_eq!(flag_name("nope"), None);
}

#[test]
fn defaults_only() {
    let s = load_ok(&ServeFlags::default(), &no_env);
    assert_eq!(s, Settings::default());
    assert_eq!(s.address.to_string(), "127.0.0.1:8090");
    assert_eq!(format!("http://{}", s.address), DEFAULT_API_URL, "client commands talk to the default address");
    assert_eq!(s.base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(s.model, "akritas");
    assert_eq!(s.api_keys, vec![key("default", "AKRITAS_API_KEY")]);
    assert_eq!(s.system_instructions, PathBuf::from("instructions/SYSTEM.md"));
    assert_eq!(s.max_tokens, 1024);
    assert_eq!(s.max_tokens_limit, 4096);
    assert_eq!(s.max_tool_result_bytes, 2_097_152);
    assert_eq!(s.request_timeout, Duration::from_secs(600));
    assert_eq!(s.run_queue_timeout, Duration::from_secs(30));
    assert_eq!(s.temperature, 0.2);
    assert_eq!(s.log_format, LogFormat::Text);
    assert!(!s.kubernetes && !s.allow_unauthenticated && s.resources.is_empty());
    assert_eq!(s.config_file, None);
    assert_eq!(s.origin("max_tokens"), Source::Default);
    assert!(s.origins.is_empty());
}

const FILE_ALL: &str = r#"{
  "version": 1,
  "max_tokens": 100,
  "model": "file-model",
  "request_timeout": "5m",
  "allow_unauthenticated": true,
  "resources": ["file-a"],
  "api_keys": [{"name": "file", "env": "FILE_KEY"}]
}"#;

const ENV_ALL: &[(&str, &str)] = &[
    ("AKRITAS_MAX_TOKENS", "200"),
    ("AKRITAS_MODEL", "env-model"),
    ("AKRITAS_REQUEST_TIMEOUT", "2m"),
    ("AKRITAS_ALLOW_UNAUTHENTICATED", "false"),
    ("AKRITAS_RESOURCES", "env-a, env-b"),
    ("AKRITAS_API_KEYS", "envkey=ENV_KEY"),
];

const FLAGS_ALL: &[&str] = &[
    "--max-tokens",
    "300",
    "--model",
    "flag-model",
    "--request-timeout",
    "90s",
    "--allow-unauthenticated",
    "--resources",
    "flag-a",
    "--resources",
    "flag-b",
    "--api-key",
    "ops=OPS_KEY",
    "--api-key",
    "ci=CI_KEY",
];

#[test]
fn file_overrides_default() {
    let (r, p, _dir) = load_file(FILE_ALL);
    let s = r.unwrap();
    assert_eq!(s.config_file.as_deref(), Some(p.as_path()));
    assert_eq!(s.max_tokens, 100);
    assert_eq!(s.model, "file-model");
    assert_eq!(s.request_timeout, Duration::from_secs(300));
    assert!(s.allow_unauthenticated);
    assert_eq!(s.resources, vec![PathBuf::from("file-a")]);
    assert_eq!(s.api_keys, vec![key("file", "FILE_KEY")]);
    assert_eq!(s.origin("max_tokens"), Source::File(p.clone(), "$.max_tokens".to_string()));
    assert_eq!(s.origin("max_tokens").to_string(), format!("config file {} ($.max_tokens)", p.display()));
    // Untouched settings keep their defaults.
    assert_eq!(s.search_top_k, 5);
    assert_eq!(s.origin("search_top_k"), Source::Default);
}

#[test]
fn env_overrides_file_and_file_found_via_env() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(&dir, "c.json", FILE_ALL.as_bytes());
    let mut pairs = ENV_ALL.to_vec();
    let ps = p.to_str().unwrap().to_string();
    pairs.push((CONFIG_ENV, &ps));
    let s = load_ok(&ServeFlags::default(), &env_of(&pairs));
    assert_eq!(s.config_file.as_deref(), Some(p.as_path()));
    assert_eq!(s.max_tokens, 200);
    assert_eq!(s.model, "env-model");
    assert_eq!(s.request_timeout, Duration::from_secs(120));
    assert!(!s.allow_unauthenticated);
    assert_eq!(s.resources, vec![PathBuf::from("env-a"), PathBuf::from("env-b")]);
    assert_eq!(s.api_keys, vec![key("envkey", "ENV_KEY")]);
    assert_eq!(s.origin("max_tokens"), Source::Env("AKRITAS_MAX_TOKENS".into()));
    assert_eq!(s.origin("api_keys").to_string(), "environment variable AKRITAS_API_KEYS");
}

#[test]
fn flag_overrides_env() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(&dir, "c.json", FILE_ALL.as_bytes());
    let mut args = vec!["--config", p.to_str().unwrap()];
    args.extend_from_slice(FLAGS_ALL);
    let s = load_ok(&flags(&args), &env_of(ENV_ALL));
    assert_eq!(s.max_tokens, 300);
    assert_eq!(s.model, "flag-model");
    assert_eq!(s.request_timeout, Duration::from_secs(90));
    assert!(s.allow_unauthenticated);
    assert_eq!(s.resources, vec![PathBuf::from("flag-a"), PathBuf::from("flag-b")]);
    assert_eq!(s.api_keys, vec![key("ops", "OPS_KEY"), key("ci", "CI_KEY")]);
    assert_eq!(s.origin("max_tokens"), Source::Flag("--max-tokens".into()));
    assert_eq!(s.origin("api_keys").to_string(), "flag --api-key");
    assert_eq!(s.origin("allow_unauthenticated").to_string(), "flag --allow-unauthenticated");
}

#[test]
fn absent_switch_does_not_override() {
    let s = load_ok(&ServeFlags::default(), &env_of(&[("AKRITAS_ALLOW_UNAUTHENTICATED", "1")]));
    assert!(s.allow_unauthenticated);
}

#[test]
fn config_flag_beats_config_env() {
    let dir = tempfile::tempdir().unwrap();
    let a = write_file(&dir, "a.json", br#"{"version": 1, "max_tokens": 11}"#);
    let b = write_file(&dir, "b.json", br#"{"version": 1, "max_tokens": 22}"#);
    let f = flags(&["--config", a.to_str().unwrap()]);
    let s = load_ok(&f, &env_of(&[(CONFIG_ENV, b.to_str().unwrap())]));
    assert_eq!(s.max_tokens, 11);
    assert_eq!(s.config_file.as_deref(), Some(a.as_path()));
}

#[test]
fn bad_values_name_their_layer() {
    assert_eq!(
        load_err(&flags(&["--max-tokens", "abc"]), &no_env),
        r#"invalid value "abc" for flag --max-tokens: expected a positive integer"#
    );
    assert_eq!(
        load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_MAX_TOKENS", "abc")])),
        r#"invalid value "abc" for environment variable AKRITAS_MAX_TOKENS: expected a positive integer"#
    );
    let (e, p) = file_err(r#"{"version": 1, "max_tokens": "abc"}"#);
    assert_eq!(e, format!(r#"config file {}: $.max_tokens: expected a positive integer, got "abc""#, p.display()));
    // Range violations too.
    let e = load_err(&flags(&["--search-top-k", "51"]), &no_env);
    assert!(e.contains("flag --search-top-k") && e.contains("from 1 to 50"), "{e}");
    let e = load_err(&flags(&["--max-tokens", "0"]), &no_env);
    assert!(e.contains("flag --max-tokens"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "temperature": 3.5}"#);
    assert!(e.contains("$.temperature: expected a number from 0.0 to 2.0, got 3.5"), "{e}");
}

#[test]
fn bad_values_for_other_kinds_name_their_layer() {
    // Duration.
    let e = load_err(&flags(&["--request-timeout", "soon"]), &no_env);
    assert!(e.starts_with(r#"invalid value "soon" for flag --request-timeout"#), "{e}");
    let e = load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_SHUTDOWN_TIMEOUT", "0s")]));
    assert!(e.contains("environment variable AKRITAS_SHUTDOWN_TIMEOUT"), "{e}");
    let e = load_err(&flags(&["--request-timeout", "25h"]), &no_env);
    assert!(e.contains("at most 24h"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "request_timeout": 30}"#);
    assert!(e.contains("$.request_timeout: expected a duration"), "{e}");
    // Zero run queue timeout is allowed.
    let s = load_ok(&flags(&["--run-queue-timeout", "0s"]), &no_env);
    assert_eq!(s.run_queue_timeout, Duration::ZERO);
    // Bool.
    let e = load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_KUBERNETES", "yes")]));
    assert!(e.contains("environment variable AKRITAS_KUBERNETES"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "kubernetes": "true"}"#);
    assert!(e.contains("$.kubernetes: expected true or false"), "{e}");
    // Lists / api keys.
    let e = load_err(&flags(&["--api-key", "ops"]), &no_env);
    assert!(e.starts_with(r#"invalid value "ops" for flag --api-key"#), "{e}");
    let e = load_err(&flags(&["--api-key", "Bad Name=X"]), &no_env);
    assert!(e.contains("api key name \"Bad Name\" is invalid"), "{e}");
    let e = load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_API_KEYS", "ops=1BAD")]));
    assert!(e.contains("environment variable AKRITAS_API_KEYS"), "{e}");
    let (e, _) =
        file_err(r#"{"version": 1, "api_keys": [{"name": "ok", "env": "A"}, {"name": "x", "env": "A", "extra": 1}]}"#);
    assert!(e.contains("$.api_keys[1].extra: unknown field"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "api_keys": [{"name": "ok"}]}"#);
    assert!(e.contains("$.api_keys[0].env: required field is missing"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "resources": "dir"}"#);
    assert!(e.contains("$.resources: expected a JSON array"), "{e}");
    let e = load_err(&flags(&["--resources", " "]), &no_env);
    assert!(e.contains("flag --resources"), "{e}");
    // Strings.
    let e = load_err(&flags(&["--model=-bad"]), &no_env);
    assert!(e.contains("flag --model"), "{e}");
    let e = load_err(&flags(&["--address", "localhost"]), &no_env);
    assert!(e.contains("flag --address: expected a socket address"), "{e}");
    let e = load_err(&flags(&["--log-format", "xml"]), &no_env);
    assert!(e.contains("expected text or json"), "{e}");
    let e = load_err(&flags(&["--upstream-api-key-env", "OPENAI-KEY"]), &no_env);
    assert!(e.contains("not a valid environment variable name"), "{e}");
}

#[test]
fn file_requires_version() {
    let (e, p) = file_err(r#"{"max_tokens": 5}"#);
    assert_eq!(e, format!(r#"config file {}: $.version: required field is missing; add "version": 1"#, p.display()));
}

#[test]
fn durations_print_in_whole_units_that_read_well() {
    let help = Cli::command().render_long_help().to_string();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for (env, shown) in [
        ("AKRITAS_AUDIT_RETENTION", "365d"),
        ("AKRITAS_ALERT_RETENTION", "90d"),
        ("AKRITAS_RECORD_RETENTION", "7d"),
        ("AKRITAS_JOURNAL_SEGMENT_AGE", "1d"),
        ("AKRITAS_CHANGE_APPROVAL_TTL", "30m"),
        ("AKRITAS_LEASE_DURATION", "15s"),
    ] {
        assert!(help.contains(&format!("[env: {env}] [default: {shown}]")), "{env}: {help}");
    }
    assert!(!help.contains("month"), "{help}");
    for (d, shown) in [
        (Duration::ZERO, "0s"),
        (Duration::from_secs(90_061), "1d 1h 1m 1s"),
        (Duration::from_secs(315_576_000), "3652d 12h"),
        (Duration::from_millis(1_500), "1s 500ms"),
        (Duration::from_nanos(2_000_003), "2ms 3ns"),
    ] {
        assert_eq!(value::SettingValue::to_text(&d), shown);
        assert_eq!(<Duration as value::SettingValue>::from_text(shown, "a duration"), Ok(d));
    }
}

/// What `--help` prints as a default is what the setting reads back: each printed
/// default, given as its environment variable, loads as the default itself.
#[test]
fn every_printed_default_reads_back_as_the_default() {
    let printed: Vec<(String, String)> = KEYS
        .iter()
        .filter_map(|key| {
            let help = flag_help_for(key);
            let shown = help.rsplit_once("[default: ")?.1.strip_suffix(']')?.to_string();
            (shown != "none").then(|| (env_var_name(key), shown))
        })
        .collect();
    assert!(printed.len() > 40, "{printed:?}");
    let pairs: Vec<(&str, &str)> = printed.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut loaded = load_ok(&ServeFlags::default(), &env_of(&pairs));
    assert_eq!(loaded.origins.len(), printed.len());
    loaded.origins.clear();
    assert_eq!(loaded, Settings::default());
}

#[test]
fn file_rejects_version_2() {
    let (e, _) = file_err(r#"{"version": 2}"#);
    assert!(e.contains("$.version: must be 1"), "{e}");
    let (e, _) = file_err(r#"{"version": "1"}"#);
    assert!(e.contains("$.version: must be 1"), "{e}");
}

#[test]
fn file_rejects_unknown_field() {
    let (e, _) = file_err(r#"{"version": 1, "foo": 1}"#);
    assert!(
        e.ends_with(
            "$.foo: unknown field; `akritas serve --help` lists the settings and docs/configuration.md their \
             sections (a flag's file key is its name with '_' for '-' in its section, such as budget.max_tokens \
             for --max-tokens)"
        ),
        "{e}"
    );
}

#[test]
fn file_suggests_the_nearest_keys_for_a_misspelt_one() {
    let (e, _) = file_err(r#"{"version": 1, "audit_retension": "30d"}"#);
    assert!(
        e.ends_with(
            r#"$.audit_retension: unknown field; did you mean one of "storage.audit_retention", "alerts.alert_retention"?"#
        ),
        "{e}"
    );
    let (e, _) = file_err(r#"{"version": 1, "max-tokens": 10}"#);
    assert!(e.ends_with(r#"$.max-tokens: unknown field; did you mean "budget.max_tokens"?"#), "{e}");
    assert!(!e.contains("address"), "{e}");
}

#[test]
fn file_rejects_trailing_data_and_non_objects() {
    let (e, _) = file_err(r#"{"version": 1} {"version": 1}"#);
    assert!(e.contains("trailing characters"), "{e}");
    let (e, _) = file_err(r#"[{"version": 1}]"#);
    assert!(e.contains("not a single JSON object"), "{e}");
    let (e, _) = file_err("42");
    assert!(e.contains("not a single JSON object"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "model": "a", "model": "b"}"#);
    assert!(e.contains("duplicate field \"model\""), "{e}");
}

#[test]
fn file_rejects_int_given_as_string_or_float() {
    let (e, _) = file_err(r#"{"version": 1, "search_top_k": "5"}"#);
    assert!(e.contains(r#"$.search_top_k: expected an integer from 1 to 50, got "5""#), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "search_top_k": 5.0}"#);
    assert!(e.contains("$.search_top_k"), "{e}");
}

#[test]
fn file_size_limits() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = br#"{"version": 1, "model": "x"}"#.to_vec();
    big.resize(MAX_FILE_BYTES as usize + 1, b' ');
    let p = write_file(&dir, "big.json", &big);
    let e = load_err(&flags(&["--config", p.to_str().unwrap()]), &no_env);
    assert!(e.contains("larger than the limit of 1048576 bytes"), "{e}");
    // Exactly 1 MiB is fine.
    big.truncate(MAX_FILE_BYTES as usize);
    let p = write_file(&dir, "max.json", &big);
    load_ok(&flags(&["--config", p.to_str().unwrap()]), &no_env);
    let p = write_file(&dir, "empty.json", b"");
    let e = load_err(&flags(&["--config", p.to_str().unwrap()]), &no_env);
    assert!(e.contains("is empty"), "{e}");
}

#[test]
fn file_must_be_a_readable_regular_utf8_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_err(&flags(&["--config", dir.path().to_str().unwrap()]), &no_env);
    assert!(e.contains("is a directory"), "{e}");
    let missing = dir.path().join("missing.json");
    let e = load_err(&flags(&["--config", missing.to_str().unwrap()]), &no_env);
    assert!(e.starts_with(&format!("config file {}: cannot read it", missing.display())), "{e}");
    let p = write_file(&dir, "latin1.json", b"{\"version\": 1, \"model\": \"caf\xe9\"}");
    let e = load_err(&flags(&["--config", p.to_str().unwrap()]), &no_env);
    assert!(e.contains("not valid UTF-8 (bad byte at offset 28)"), "{e}");
}

#[cfg(unix)]
#[test]
fn file_symlink_to_regular_file_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(&dir, "real.json", br#"{"version": 1, "max_tokens": 7}"#);
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink(&p, &link).unwrap();
    let s = load_ok(&flags(&["--config", link.to_str().unwrap()]), &no_env);
    assert_eq!(s.max_tokens, 7);
}

#[test]
fn empty_config_path_is_an_error() {
    let e = load_err(&ServeFlags::default(), &env_of(&[(CONFIG_ENV, "")]));
    assert!(e.contains("environment variable AKRITAS_CONFIG"), "{e}");
    let f = ServeFlags { config: Some(PathBuf::new()), ..ServeFlags::default() };
    let e = load_err(&f, &no_env);
    assert!(e.contains("flag --config"), "{e}");
}

#[test]
fn env_list_parsing() {
    assert_eq!(split_list(r#"["a", " b "]"#).unwrap(), vec!["a", "b"]);
    assert_eq!(split_list(" a , b,c ").unwrap(), vec!["a", "b", "c"]);
    assert_eq!(split_list("").unwrap(), Vec::<String>::new());
    assert!(split_list("a,,b").unwrap_err().contains("list item 2 is empty"));
    assert!(split_list(r#"["a", ""]"#).unwrap_err().contains("list item 2 is empty"));
    assert!(split_list(r#"["a"] x"#).unwrap_err().contains("trailing characters"));
    assert!(split_list(r#"["a", 1]"#).is_err());

    let env = |v: &str| env_of(&[("AKRITAS_RESOURCES", v)]);
    let s = load_ok(&ServeFlags::default(), &env(r#"["x", "y"]"#));
    assert_eq!(s.resources, vec![PathBuf::from("x"), PathBuf::from("y")]);
    let s = load_ok(&ServeFlags::default(), &env("x,y"));
    assert_eq!(s.resources, vec![PathBuf::from("x"), PathBuf::from("y")]);
    let e = load_err(&ServeFlags::default(), &env("x,,y"));
    assert!(e.contains("environment variable AKRITAS_RESOURCES: list item 2 is empty"), "{e}");
    let e = load_err(&ServeFlags::default(), &env(r#"["x"]]"#));
    assert!(e.contains("AKRITAS_RESOURCES: expected a JSON array of strings"), "{e}");
    // An empty value gives an empty list and overrides the file.
    let api = env_of(&[("AKRITAS_API_KEYS", "")]);
    let s = load_ok(&ServeFlags::default(), &api);
    assert!(s.api_keys.is_empty());
    let api = env_of(&[("AKRITAS_API_KEYS", r#"["a=A_KEY", "b = B_KEY"]"#)]);
    let s = load_ok(&ServeFlags::default(), &api);
    assert_eq!(s.api_keys, vec![key("a", "A_KEY"), key("b", "B_KEY")]);
}

#[test]
fn cross_field_max_tokens_limit() {
    let e = load_err(&flags(&["--max-tokens", "5000"]), &no_env);
    assert_eq!(
        e,
        "max_tokens_limit (4096, from default) must be >= max_tokens (5000, from flag --max-tokens); \
         raise max_tokens_limit or lower max_tokens"
    );
    let s = load_ok(&flags(&["--max-tokens", "5000"]), &env_of(&[("AKRITAS_MAX_TOKENS_LIMIT", "5000")]));
    assert_eq!((s.max_tokens, s.max_tokens_limit), (5000, 5000));
}

#[test]
fn cross_field_retrieved_context() {
    let e = load_err(
        &flags(&["--max-retrieved-context-bytes", "3000000"]),
        &env_of(&[("AKRITAS_MAX_TOOL_RESULT_BYTES", "2999999")]),
    );
    assert!(
        e.starts_with(
            "max_retrieved_context_bytes (3000000, from flag --max-retrieved-context-bytes) must be <= \
             max_tool_result_bytes (2999999, from environment variable AKRITAS_MAX_TOOL_RESULT_BYTES)"
        ),
        "{e}"
    );
}

#[test]
fn cross_field_kubernetes_and_resources() {
    let (r, p, _dir) = load_file(r#"{"version": 1, "resources": ["manifests"]}"#);
    r.unwrap();
    let f = flags(&["--config", p.to_str().unwrap(), "--kubernetes"]);
    let e = load_err(&f, &no_env);
    assert_eq!(
        e,
        format!(
            "kubernetes (true, from flag --kubernetes) cannot be combined with resources \
             (manifests, from config file {} ($.resources)); operator mode reads resources \
             from the cluster, so unset one of them",
            p.display()
        )
    );
    // An empty env list clears the file's resources.
    let s = load_ok(&f, &env_of(&[("AKRITAS_RESOURCES", "")]));
    assert!(s.kubernetes && s.resources.is_empty());
}

#[test]
fn duplicate_api_key_names() {
    let e = load_err(&flags(&["--api-key", "ops=A", "--api-key", "ops=B"]), &no_env);
    assert!(e.contains("flag --api-key") && e.contains("duplicate api key name \"ops\""), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "api_keys": [{"name": "a", "env": "A"}, {"name": "a", "env": "B"}]}"#);
    assert!(e.contains("$.api_keys: duplicate api key name \"a\""), "{e}");
    let many: Vec<String> = (0..33).map(|i| format!("k{i}=K{i}")).collect();
    let e = load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_API_KEYS", &many.join(","))]));
    assert!(e.contains("33 api keys given"), "{e}");
}

#[test]
fn mcp_server_limits_and_hosts() {
    let s = load_ok(&ServeFlags::default(), &no_env);
    assert_eq!((s.mcp_max_sessions, s.mcp_session_idle_timeout), (64, Duration::from_secs(300)));
    assert!(s.mcp_allowed_hosts.is_empty());
    let env = env_of(&[
        ("AKRITAS_MCP_ALLOWED_HOSTS", "Akritas.OPS.svc:8090, akritas.ops.svc:8090,[::1]:8090"),
        ("AKRITAS_MCP_MAX_SESSIONS", "8"),
        ("AKRITAS_MCP_SESSION_IDLE_TIMEOUT", "90s"),
    ]);
    let s = load_ok(&ServeFlags::default(), &env);
    assert_eq!(s.mcp_allowed_hosts, ["akritas.ops.svc:8090", "[::1]:8090"]);
    assert_eq!((s.mcp_max_sessions, s.mcp_session_idle_timeout), (8, Duration::from_secs(90)));
    let e = load_err(&flags(&["--mcp-allowed-hosts", "evil.example/x"]), &no_env);
    assert!(e.contains("not a host name or host:port"), "{e}");
    let e = load_err(&flags(&["--mcp-max-sessions", "0"]), &no_env);
    assert!(e.contains("--mcp-max-sessions"), "{e}");
}

#[test]
fn public_url_normalisation() {
    let s = load_ok(&flags(&["--public-url", "  HTTPS://Akritas.Example.com/ops/  "]), &no_env);
    assert_eq!(s.public_url.as_deref(), Some("https://akritas.example.com/ops"));
    assert_eq!(normalize_http_url("http://[::1]:8090/").unwrap(), "http://[::1]:8090");
    for bad in [
        "javascript:alert(1)",
        "javascript://alert(1)",
        "ftp://x.example",
        "https://user:pw@x.example",
        "https://x.example/?q=1",
        "https://x.example/#frag",
        "https:///path",
        "https://x.example:99999",
        "https://exa mple.com",
        "x.example",
    ] {
        assert!(normalize_http_url(bad).is_err(), "{bad} should be rejected");
    }
    let e = load_err(&flags(&["--public-url", "javascript:alert(1)"]), &no_env);
    assert!(e.starts_with(r#"invalid value "javascript:alert(1)" for flag --public-url"#), "{e}");
    // Empty means unset.
    let s = load_ok(&ServeFlags::default(), &env_of(&[("AKRITAS_PUBLIC_URL", "")]));
    assert_eq!(s.public_url, None);
}

#[test]
fn base_url_must_end_with_v1() {
    let s = load_ok(&flags(&["--base-url", "https://llm.example/openai/v1/"]), &no_env);
    assert_eq!(s.base_url, "https://llm.example/openai/v1");
    let e = load_err(&flags(&["--base-url", "https://llm.example/v2"]), &no_env);
    assert!(e.contains("flag --base-url: URL path does not end in /v1"), "{e}");
    let e = load_err(&flags(&["--base-url", "https://llm.example"]), &no_env);
    assert!(e.contains("does not end in /v1"), "{e}");
}

#[test]
fn language_tags() {
    assert_eq!(normalize_language("en").as_deref(), Some("en"));
    assert_eq!(normalize_language("EN-us").as_deref(), Some("en-US"));
    assert_eq!(normalize_language("zh-hant-tw").as_deref(), Some("zh-Hant-TW"));
    assert_eq!(normalize_language("es-419").as_deref(), Some("es-419"));
    assert_eq!(normalize_language("de-CH-x-PHONEBK").as_deref(), Some("de-CH-x-phonebk"));
    for bad in ["en_US", "123", "", "e", "engl", "en--us", "en-toolongsubtag", "en-US-"] {
        assert_eq!(normalize_language(bad), None, "{bad}");
    }
    let s = load_ok(&flags(&["--response-language", "zh-hant-tw"]), &no_env);
    assert_eq!(s.response_language, "zh-Hant-TW");
    let e = load_err(&ServeFlags::default(), &env_of(&[("AKRITAS_RESPONSE_LANGUAGE", "en_US")]));
    assert!(e.contains("AKRITAS_RESPONSE_LANGUAGE") && e.contains("not a valid language tag"), "{e}");
}

#[test]
fn source_display() {
    assert_eq!(Source::Default.to_string(), "default");
    assert_eq!(
        Source::File(Path::new("/p.json").into(), "$.max_tokens".into()).to_string(),
        "config file /p.json ($.max_tokens)"
    );
    assert_eq!(Source::Env("AKRITAS_MAX_TOKENS".into()).to_string(), "environment variable AKRITAS_MAX_TOKENS");
    assert_eq!(Source::Flag("--max-tokens".into()).to_string(), "flag --max-tokens");
}

#[test]
fn file_with_every_setting() {
    let (r, _p, _dir) = load_file(
        r#"{
        "version": 1,
        "address": "0.0.0.0:9000",
        "public_url": "https://ops.example.com/",
        "base_url": "http://llm:8080/v1",
        "upstream_model": "",
        "model_protocol": "json_schema",
        "model": "akritas:v2",
        "upstream_api_key_env": "LLM_KEY",
        "api_keys": [],
        "allow_unauthenticated": true,
        "system_instructions": "sys.md",
        "response_language": "fr-ca",
        "resources": [],
        "kubernetes": true,
        "namespace": "akritas-system",
        "namespaces": ["team-a", "akritas-system"],
        "shared_namespaces": ["platform"],
        "kubernetes_tools": false,
        "kubeconfig": "/etc/akritas/kubeconfig",
        "kubernetes_cluster_namespaces": ["ops"],
        "stdio_commands": ["akritas", "/usr/local/bin/mcp-grafana"],
        "stdio_env": ["GRAFANA_*", "team-a/TEAM_A_TOKEN"],
        "egress_allow": ["169.254.10.0/24", "metadata.internal"],
        "egress_proxy": "http://proxy.internal:3128/",
        "cleartext_credential_hosts": ["git.lab.internal"],
        "audit_key_env": "AKRITAS_AUDIT_KEY",
        "audit_input_namespaces": ["ops"],
        "audit_anchor_file": "/var/lib/akritas-anchor/audit.json",
        "alert_reserved_runs": 2,
        "max_runs_per_namespace": 3,
        "change_max_previews_per_namespace": 4,
        "mcp_max_sessions_per_key": 5,
        "validator_commands": ["yamllint", "/usr/local/bin/kubeconform"],
        "validator_env": ["KUBECONFORM_*"],
        "validator_sandbox": "off",
        "validator_read_paths": ["/nix/store"],
        "validator_sandbox_allow_weak_landlock": true,
        "validator_sandbox_landlock_abi_max": 5,
        "resource_env": ["TEAM_*", "VM_TOKEN"],
        "knowledge_roots": ["/srv/runbooks"],
        "workspace_roots": ["/srv/workspaces"],
        "skills_dir": "",
        "data_dir": "/var/lib/akritas",
        "storage_backend": "embedded",
        "database_url_env": "AKRITAS_PG_URL",
        "database_ca_file": "/etc/akritas/db-ca.pem",
        "database_max_connections": 256,
        "job_claim_timeout": "1h",
        "search_top_k": 50,
        "result_runes": 100000,
        "max_tokens": 10,
        "max_tokens_limit": 10,
        "max_tool_calls": 0,
        "max_iterations": 1000,
        "max_tool_result_bytes": 100,
        "max_retrieved_context_bytes": 100,
        "max_context_tokens": 1,
        "max_model_tokens": 1,
        "model_context_tokens": 2048,
        "temperature": 0,
        "request_timeout": "24h",
        "max_concurrent_runs": 256,
        "run_queue_timeout": "10m",
        "max_body_bytes": 1024,
        "body_timeout": "10m",
        "header_read_timeout": "1m",
        "max_connections": 100,
        "webhook_namespace": "monitoring",
        "database_health_interval": "1h",
        "shutdown_timeout": "1s",
        "alert_workers": 64,
        "alert_job_attempts": 20,
        "alert_job_backoff": "1h",
        "alert_source_rate": 100000,
        "alert_pending_jobs": 1,
        "alert_pending_jobs_per_namespace": 7,
        "alert_deferred_jobs": 10000,
        "journal_segment_bytes": 65536,
        "journal_segment_age": "30d",
        "snapshot_records": 100,
        "schedule_daily_tokens": 1000000,
        "audit_retention": "0s",
        "change_approval_ttl": "7d",
        "change_max_concurrent_previews": 64,
        "change_max_pending_per_namespace": 4,
        "alert_retention": "10y",
        "dedup_window": "30d",
        "dedup_max_keys": 1000,
        "resolved_incidents_kept": 100,
        "notification_timeout": "1m",
        "notification_attempts": 10,
        "record_retention": "30d",
        "lease_duration": "5m",
        "mcp_max_sessions": 8,
        "mcp_session_idle_timeout": "90s",
        "mcp_allowed_hosts": ["akritas.ops.svc:8090"],
        "allowed_hosts": ["akritas.ops.svc"],
        "log_format": "json"
    }"#,
    );
    let s = r.unwrap();
    assert_eq!(s.origins.len(), KEYS.len());
    assert_eq!(s.model_context_tokens, Some(2048));
    assert_eq!(s.webhook_namespace.as_deref(), Some("monitoring"));
    assert_eq!((s.header_read_timeout, s.max_connections), (Duration::from_secs(60), 100));
    assert_eq!(s.public_url.as_deref(), Some("https://ops.example.com"));
    assert_eq!(s.stdio_env, ["GRAFANA_*", "team-a/TEAM_A_TOKEN"]);
    assert_eq!(s.egress_allow, ["169.254.10.0/24", "metadata.internal"]);
    for bad in ["10.0.0.0/33", "http://x", "a b"] {
        let e = load_err(&flags(&["--egress-allow", bad]), &no_env);
        assert!(e.contains("flag --egress-allow") && e.contains("network"), "{e}");
    }
    assert_eq!(s.egress_proxy.as_deref(), Some("http://proxy.internal:3128"));
    for bad in ["https://proxy.internal:3128", "http://u:p@proxy.internal:3128", "http://proxy/x", "proxy:3128"] {
        let e = load_err(&flags(&["--egress-proxy", bad]), &no_env);
        assert!(e.contains("flag --egress-proxy") && e.contains("http:// proxy URL"), "{e}");
    }
    assert_eq!(s.cleartext_credential_hosts, ["git.lab.internal"]);
    assert_eq!(s.audit_key_env.as_deref(), Some("AKRITAS_AUDIT_KEY"));
    assert_eq!(s.audit_input_namespaces, ["ops"]);
    assert!(!s.on_database());
    assert_eq!(
        (s.database_url_env.as_str(), s.database_ca_file.as_deref(), s.database_max_connections),
        ("AKRITAS_PG_URL", Some("/etc/akritas/db-ca.pem"), 256)
    );
    assert_eq!(s.job_claim_timeout, Duration::from_secs(3600));
    assert_eq!(s.audit_anchor_file.as_deref(), Some("/var/lib/akritas-anchor/audit.json"));
    assert_eq!(
        (
            s.alert_reserved_runs,
            s.max_runs_per_namespace,
            s.change_max_previews_per_namespace,
            s.mcp_max_sessions_per_key
        ),
        (2, 3, 4, 5)
    );
    assert_eq!(s.upstream_model, None);
    assert_eq!(s.model_protocol.as_str(), "json_schema");
    assert_eq!(s.skills_dir, None);
    assert!(!s.kubernetes_tools);
    assert_eq!(s.kubeconfig.as_deref(), Some("/etc/akritas/kubeconfig"));
    assert_eq!(s.kubernetes_cluster_namespaces, ["ops"]);
    assert_eq!(s.validator_commands, ["yamllint", "/usr/local/bin/kubeconform"]);
    assert_eq!(s.validator_sandbox, crate::change::sandbox::SandboxMode::Off);
    assert_eq!(s.workspace_roots, [PathBuf::from("/srv/workspaces")]);
    assert_eq!(s.response_language, "fr-CA");
    assert_eq!(s.temperature, 0.0);
    assert_eq!(s.log_format, LogFormat::Json);
    assert_eq!((s.alert_workers, s.alert_job_attempts, s.notification_attempts), (64, 20, 10));
    assert_eq!((s.alert_job_backoff, s.notification_timeout), (Duration::from_secs(3600), Duration::from_secs(60)));
    assert_eq!(s.request_timeout, Duration::from_secs(86_400));
    assert_eq!(s.watched_namespaces(), ["akritas-system", "team-a"], "namespace and namespaces, once each");
    assert_eq!(s.shared_namespaces, ["platform"]);
    assert_eq!(s.resource_env, ["TEAM_*", "VM_TOKEN"]);
    assert_eq!((s.alert_source_rate, s.alert_pending_jobs, s.alert_deferred_jobs), (100_000, 1, 10_000));
    assert_eq!(s.alert_pending_jobs_per_namespace, 7);
    assert_eq!((s.change_approval_ttl, s.change_max_concurrent_previews), (Duration::from_secs(604_800), 64));
}

#[test]
fn a_key_with_a_namespace_and_no_scopes_is_refused_with_how_to_write_it() {
    let e = load_err(&flags(&["--api-key", "b=B_KEY@team-b"]), &no_env);
    assert!(e.contains("key \"b\" has namespace \"team-b\" but no scopes"), "{e}");
    assert!(e.contains("b=B_KEY:read+chat@team-b"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "api_keys": [{"name": "b", "env": "B_KEY", "namespace": "team-b"}]}"#);
    assert!(e.contains("api_keys[0].scopes") && e.contains("an admin of every namespace"), "{e}");
}

#[test]
fn api_keys_carry_scopes_and_a_namespace() {
    let s = load_ok(
        &flags(&[
            "--api-key",
            "prom=PROM_KEY:metrics",
            "--api-key",
            "team-a=A_KEY:read+chat@team-a",
            "--api-key",
            "ops=OPS_KEY",
        ]),
        &no_env,
    );
    assert_eq!(s.api_keys[0].scopes, [Scope::Metrics].into());
    assert_eq!(s.api_keys[0].namespace, None);
    assert_eq!(s.api_keys[1].scopes, [Scope::Read, Scope::Chat].into());
    assert_eq!(s.api_keys[1].namespace.as_deref(), Some("team-a"));
    assert_eq!(s.api_keys[2], key("ops", "OPS_KEY"), "no scopes = admin, as before scopes existed");
    assert!(s.api_keys[1].allows(Scope::Read) && !s.api_keys[1].allows(Scope::Metrics));
    assert!(!s.api_keys[0].allows(Scope::Read));

    let file = |json: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        std::fs::write(&path, json).unwrap();
        load(&ServeFlags { config: Some(path), ..Default::default() }, &no_env)
    };
    let s =
        file(r#"{"version": 1, "api_keys": [{"name": "ci", "env": "CI_KEY", "scopes": ["read"], "namespace": "ci"}]}"#)
            .unwrap();
    assert_eq!(s.api_keys[0].scopes, [Scope::Read].into());
    assert_eq!(s.api_keys[0].namespace.as_deref(), Some("ci"));

    for (args, problem) in [
        (["--api-key", "x=X_KEY:write"], "unknown scope \"write\""),
        (["--api-key", "x=X_KEY:read@Team_A"], "is not a Kubernetes namespace name"),
        (["--api-key", "x=X_KEY:"], "unknown scope \"\""),
    ] {
        let e = load_err(&flags(&args), &no_env);
        assert!(e.contains("flag --api-key") && e.contains(problem), "{e}");
    }
    let e =
        file(r#"{"version": 1, "api_keys": [{"name": "ci", "env": "CI_KEY", "scopes": []}]}"#).unwrap_err().to_string();
    assert!(e.contains("$.api_keys[0].scopes") && e.contains("non-empty array"), "{e}");
}

#[test]
fn what_resources_may_start_or_read_is_checked() {
    for (args, problem) in [
        (["--stdio-commands", "bash"], "neither `akritas` nor an absolute path"),
        (["--resource-env", "A*B"], "is not an environment variable name"),
        (["--knowledge-roots", "runbooks"], "is not an absolute path"),
        (["--shared-namespaces", "Platform"], "is not a namespace name"),
        (["--namespaces", "x_y"], "is not a namespace name"),
    ] {
        let e = load_err(&flags(&args), &no_env);
        assert!(e.contains(problem), "{args:?}: {e}");
    }
    let s = load_ok(&flags(&["--stdio-commands", "akritas,/opt/mcp/bin/server", "--resource-env", "VM_*"]), &no_env);
    assert_eq!(s.stdio_commands, ["akritas", "/opt/mcp/bin/server"]);
    assert_eq!(s.resource_env, ["VM_*"]);
}

#[test]
fn the_model_protocol_is_one_of_its_modes() {
    assert_eq!(load_ok(&flags(&[]), &no_env).model_protocol.as_str(), "auto");
    let s = load_ok(&flags(&["--model-protocol", "text"]), &no_env);
    assert_eq!(s.model_protocol.as_str(), "text");
    let e = load_err(&flags(&["--model-protocol", "tools"]), &no_env);
    assert!(e.contains("auto, tool_call, json_schema, json_object or text"), "{e}");
}

#[test]
fn model_context_tokens_is_unset_by_default_and_bounded_in_every_layer() {
    assert_eq!(Settings::default().model_context_tokens, None);
    assert_eq!(load_ok(&flags(&["--model-context-tokens", "2048"]), &no_env).model_context_tokens, Some(2048));
    let env = env_of(&[("AKRITAS_MODEL_CONTEXT_TOKENS", "8192")]);
    assert_eq!(load_ok(&flags(&[]), &env).model_context_tokens, Some(8192));
    let empty = env_of(&[("AKRITAS_MODEL_CONTEXT_TOKENS", "")]);
    assert_eq!(load_ok(&flags(&[]), &empty).model_context_tokens, None, "empty: discover it");
    assert_eq!(load_file(r#"{"version": 1, "model_context_tokens": null}"#).0.unwrap().model_context_tokens, None);
    assert_eq!(load_file(r#"{"version": 1, "model_context_tokens": 512}"#).0.unwrap().model_context_tokens, Some(512));
    let expect = "expected an integer from 512 to 10000000, or empty";
    for bad in ["511", "10000001", "2k"] {
        let e = load_err(&flags(&["--model-context-tokens", bad]), &no_env);
        assert!(e.contains("--model-context-tokens") && e.contains(expect), "{e}");
    }
    let (e, _) = file_err(r#"{"version": 1, "model_context_tokens": "4096"}"#);
    assert!(e.contains("$.model_context_tokens"), "{e}");
    let (e, _) = file_err(r#"{"version": 1, "model_context_tokens": 100}"#);
    assert!(e.contains(expect), "{e}");
    let e = load_err(&flags(&[]), &env_of(&[("AKRITAS_MODEL_CONTEXT_TOKENS", "0")]));
    assert!(e.contains("AKRITAS_MODEL_CONTEXT_TOKENS"), "{e}");
}

#[test]
fn the_storage_backend_is_embedded_or_postgres_and_the_database_keeps_no_anchor_file() {
    assert!(!load_ok(&flags(&[]), &no_env).on_database());
    let s = load_ok(&flags(&["--storage-backend", "postgres"]), &no_env);
    assert!(s.on_database());
    assert_eq!((s.database_url_env.as_str(), s.job_claim_timeout), ("AKRITAS_DATABASE_URL", Duration::from_secs(30)));
    let e = load_err(&flags(&["--storage-backend", "mysql"]), &no_env);
    assert!(e.contains("\"mysql\" is not a storage backend") && e.contains("`embedded` or `postgres`"), "{e}");
    let e = load_err(&flags(&["--storage-backend", "postgres", "--audit-anchor-file", "/anchors/a.json"]), &no_env);
    assert!(e.contains("audit_anchor_file") && e.contains("audit verify --database-env"), "{e}");
    let e = load_err(&flags(&["--database-max-connections", "1"]), &no_env);
    assert!(e.contains("database-max-connections"), "{e}");
}

/// Two flags that read alike bound different things (`--max-model-tokens` once had the help of
/// `--model-context-tokens`): no setting's help repeats another's, nor begins with another's whole text.
#[test]
fn every_settings_help_says_something_no_other_setting_says() {
    let about = |key: &str| {
        let help = flag_help_for(key);
        help.split(" [env: ").next().unwrap_or_default().trim().to_lowercase()
    };
    for (i, a) in KEYS.iter().enumerate() {
        assert!(!about(a).is_empty(), "{a} has no help");
        for b in &KEYS[i + 1..] {
            let (x, y) = (about(a), about(b));
            assert!(!x.starts_with(&y) && !y.starts_with(&x), "--{a} and --{b} read alike: {x:?} / {y:?}");
        }
    }
}
