//! Redaction of every Kubernetes tool output, applied once to the whole result:
//! values of env entries (any `{name, value}` pair) and of annotations and ConfigMap
//! keys whose names look secret are replaced, `last-applied-configuration` (a copy
//! of the whole spec, env values included) is dropped, and token-shaped strings
//! anywhere (JWTs, provider key prefixes, private keys, credentials in URLs,
//! `password=...`, every secret value the host resolved) are masked. The result
//! says how many values of each sort were redacted.

use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;
use serde_json::Value;

use crate::redact::REDACTED;

/// What was redacted in one output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Redactions {
    /// Values of `{name, value}` entries (container env, headers) with a secret-looking name.
    pub env_values: u32,
    /// Annotations with a secret-looking name, and `last-applied-configuration`.
    pub annotations: u32,
    /// ConfigMap keys with a secret-looking name.
    pub data_values: u32,
    /// Token-shaped strings and credentials masked inside any text.
    pub tokens: u32,
}

impl Redactions {
    /// Whether nothing was redacted.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Redactions) {
        self.env_values += other.env_values;
        self.annotations += other.annotations;
        self.data_values += other.data_values;
        self.tokens += other.tokens;
    }
}

/// The annotation `kubectl apply` keeps: the whole last applied object, env values included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Name fragments that make a name look secret (matched on the lower-cased name with
/// `-`, `.` and `/` read as `_`).
const SECRET_NAME_PARTS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "api_key",
    "access_key",
    "accesskey",
    "private_key",
    "privatekey",
    "credential",
    "auth",
    "dsn",
    "connection_string",
    "connstr",
    "signing_key",
    "encryption_key",
    "session_key",
    "client_key",
    "webhook_url",
    "cookie",
];

/// Whether a variable, annotation or key name looks like it holds a secret.
pub fn secret_name(name: &str) -> bool {
    let normal: String =
        name.chars().map(|c| if matches!(c, '-' | '.' | '/') { '_' } else { c.to_ascii_lowercase() }).collect();
    SECRET_NAME_PARTS.iter().any(|part| normal.contains(part))
}

/// Token shapes masked wherever they occur.
static TOKENS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // JSON Web Tokens (service-account tokens among them).
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        // Provider key prefixes.
        r"|\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}",
        r"|xox[abposr]-[A-Za-z0-9-]{10,}|sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{35})",
        // PEM private keys.
        r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)",
        // Long random-looking strings: letters of both cases and digits, 32 or more.
        r"|\b[A-Za-z0-9+/_-]{32,}={0,2}",
    ))
    .expect("token pattern compiles")
});

/// `user:password@` in URLs.
static URL_CREDENTIALS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(://[^/\s:@]+:)[^/\s@]+@").expect("URL credential pattern compiles"));

/// Whether a long run of characters looks random (mixed case and digits), not a
/// hex digest, a path or a word.
fn looks_random(candidate: &str) -> bool {
    let body = candidate.trim_end_matches('=');
    let upper = body.bytes().filter(u8::is_ascii_uppercase).count();
    let lower = body.bytes().filter(u8::is_ascii_lowercase).count();
    let digits = body.bytes().filter(u8::is_ascii_digit).count();
    upper >= 3 && lower >= 3 && digits >= 3
}

/// Masks token-shaped text in `text`; returns the new text and how many were masked.
pub fn mask_text(text: &str) -> (String, u32) {
    let mut count = 0u32;
    let masked = TOKENS.replace_all(text, |caps: &regex::Captures<'_>| {
        let found = &caps[0];
        let random_only = !found.starts_with("eyJ")
            && !found.starts_with("-----BEGIN")
            && !TOKEN_PREFIXES.iter().any(|p| found.starts_with(p));
        if random_only && !looks_random(found) {
            return found.to_string();
        }
        count += 1;
        REDACTED.to_string()
    });
    let masked = URL_CREDENTIALS.replace_all(&masked, |caps: &regex::Captures<'_>| {
        count += 1;
        format!("{}{REDACTED}@", &caps[1])
    });
    // Credential fragments (`password=x`, `Bearer x`) and every secret value the host resolved.
    let cleaned = crate::redact::redact(&masked);
    count += u32::try_from(cleaned.matches(REDACTED).count().saturating_sub(masked.matches(REDACTED).count()))
        .unwrap_or(u32::MAX);
    (cleaned, count)
}

const TOKEN_PREFIXES: &[&str] = &["gh", "github_pat_", "glpat-", "xox", "sk-", "AKIA", "AIza"];

/// Redacts `value` in place and says what was redacted.
pub fn scrub(value: &mut Value) -> Redactions {
    let mut counts = Redactions::default();
    walk(value, None, &mut counts);
    counts
}

fn walk(value: &mut Value, key: Option<&str>, counts: &mut Redactions) {
    match value {
        Value::String(text) => {
            let (masked, n) = mask_text(text);
            if n > 0 {
                *text = masked;
                counts.tokens += n;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| walk(item, None, counts)),
        Value::Object(map) => {
            match key {
                Some("annotations") => {
                    for (name, annotation) in map.iter_mut() {
                        if (name == LAST_APPLIED || secret_name(name)) && annotation.as_str() != Some(REDACTED) {
                            *annotation = Value::String(REDACTED.to_string());
                            counts.annotations += 1;
                        }
                    }
                }
                Some("data" | "binaryData" | "stringData") => {
                    for (name, entry) in map.iter_mut() {
                        if secret_name(name) && entry.as_str() != Some(REDACTED) {
                            *entry = Value::String(REDACTED.to_string());
                            counts.data_values += 1;
                        }
                    }
                }
                _ => {}
            }
            let secret_pair = map.get("name").and_then(Value::as_str).is_some_and(secret_name)
                && map.get("value").is_some_and(|v| v.as_str() != Some(REDACTED) && !v.is_null());
            if secret_pair {
                map.insert("value".to_string(), Value::String(REDACTED.to_string()));
                counts.env_values += 1;
            }
            for (name, child) in map.iter_mut() {
                walk(child, Some(name.as_str()), counts);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_looking_env_values_annotations_and_keys_are_replaced_and_counted() {
        let mut pod = json!({
            "metadata": {"annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"env\":[{\"name\":\"DB_PASSWORD\",\"value\":\"hunter2-planted\"}]}",
                "vault.example.com/api-token": "v-123",
                "team": "payments"
            }},
            "spec": {"containers": [{"env": [
                {"name": "DB_PASSWORD", "value": "hunter2-planted"},
                {"name": "LOG_LEVEL", "value": "debug"},
                {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "api", "key": "key"}}}
            ]}]},
            "data": {"client-secret": "s3", "mode": "fast"}
        });
        let counts = scrub(&mut pod);
        let text = pod.to_string();
        assert!(!text.contains("hunter2-planted") && !text.contains("v-123") && !text.contains("\"s3\""), "{text}");
        assert!(text.contains("debug") && text.contains("payments") && text.contains("fast"), "{text}");
        assert_eq!(counts, Redactions { env_values: 1, annotations: 2, data_values: 1, tokens: 0 });
        // The reference to a Secret stays: it names where the value is, not the value.
        assert_eq!(pod["spec"]["containers"][0]["env"][2]["valueFrom"]["secretKeyRef"]["name"], "api");
    }

    #[test]
    fn token_shaped_strings_are_masked_in_any_text() {
        let jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJlLWJ5dGVz";
        let line = format!(
            "connecting with {jwt} to postgres://app:pw-planted@db:5432/x, key ghp_abcdefghijklmnopqrstuvwxyz0123 \
             password=opensesame and random Zk3uQ9vX2mB7nL4pR8sT1wY6cE5hJ0aF"
        );
        let (masked, n) = mask_text(&line);
        for secret in
            [jwt, "pw-planted", "ghp_abcdefghijklmnopqrstuvwxyz0123", "opensesame", "Zk3uQ9vX2mB7nL4pR8sT1wY6cE5hJ0aF"]
        {
            assert!(!masked.contains(secret), "{secret} in {masked}");
        }
        assert_eq!(n, 5, "{masked}");
    }

    #[test]
    fn ordinary_text_digests_and_paths_stay() {
        let text = "image sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef pulled; \
                    path /var/lib/kubelet/pods/containers/application-server-configuration";
        let (masked, n) = mask_text(text);
        assert_eq!((masked.as_str(), n), (text, 0));
        assert!(!secret_name("LOG_LEVEL") && !secret_name("app.kubernetes.io/name"));
        assert!(
            secret_name("db-password")
                && secret_name("GITHUB_TOKEN")
                && secret_name("aws.accessKey".replace('K', "_k").as_str())
        );
    }
}
