//! Checks the schema and CEL rules cannot express: URLs, glob syntax, names that
//! must be unique inside a list.

use std::collections::BTreeSet;

use super::Resource;
use super::common::NamedValue;
use super::field_error::FieldError;

/// Appends the semantic problems of a resource.
pub fn check(resource: &Resource, errors: &mut Vec<FieldError>) {
    match resource {
        Resource::McpAdapter(adapter) => {
            let transport = &adapter.spec.transport;
            if let Some(stdio) = &transport.stdio {
                check_named_values(
                    &stdio.env,
                    "spec.transport.stdio.env",
                    is_env_name,
                    "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                    false,
                    errors,
                );
            }
            if let Some(http) = &transport.http {
                check_http_url(&http.url, "spec.transport.http.url", true, errors);
                check_named_values(
                    &http.headers,
                    "spec.transport.http.headers",
                    is_header_name,
                    "an HTTP header name (letters, digits and '-')",
                    true,
                    errors,
                );
            }
        }
        Resource::NotificationReceiver(receiver) => {
            let spec = &receiver.spec;
            if let Some(url) = spec.webhook.as_ref().and_then(|w| w.url.as_deref()) {
                check_http_url(url, "spec.webhook.url", true, errors);
            }
            if let Some(url) = spec.telegram.as_ref().and_then(|t| t.base_url.as_deref()) {
                check_http_url(url, "spec.telegram.baseUrl", false, errors);
            }
            if let Some(mattermost) = &spec.mattermost {
                check_http_url(&mattermost.base_url, "spec.mattermost.baseUrl", false, errors);
            }
            if let Some(url) = spec.slack.as_ref().and_then(|s| s.base_url.as_deref()) {
                check_http_url(url, "spec.slack.baseUrl", false, errors);
            }
            for (field, reason) in spec.routing.as_ref().map(|r| r.problems()).unwrap_or_default() {
                errors.push(FieldError::new(&format!("spec.routing.{field}"), reason));
            }
        }
        Resource::ValidatorProfile(profile) => {
            for (i, pattern) in profile.spec.files.iter().enumerate() {
                if let Err(error) = globset::Glob::new(pattern) {
                    errors.push(FieldError::new(
                        &format!("spec.files[{i}]"),
                        format!("invalid glob {pattern:?}: {}", error.kind()),
                    ));
                }
            }
        }
        Resource::Workspace(workspace) => {
            if let Some(path) = &workspace.spec.source.path {
                check_path(path, "spec.source.path", errors);
            }
            if let Some(git) = &workspace.spec.source.git {
                check_http_url(&git.url, "spec.source.git.url", false, errors);
            }
        }
        Resource::KnowledgeBase(base) => {
            for (i, source) in base.spec.sources.iter().enumerate() {
                if let Some(dir) = &source.directory {
                    check_path(&dir.path, &format!("spec.sources[{i}].directory.path"), errors);
                }
                if let Some(git) = &source.git
                    && (git.path.starts_with('/') || git.path.split('/').any(|part| part == ".."))
                {
                    errors.push(FieldError::new(
                        &format!("spec.sources[{i}].git.path"),
                        "must be a relative path inside the workspace without '..'",
                    ));
                }
            }
        }
        Resource::RunSchedule(schedule) => {
            if let Err(error) = crate::cron::Cron::parse(&schedule.spec.schedule) {
                errors.push(FieldError::new("spec.schedule", error.to_string()));
            }
            if let Err(error) = crate::cron::time_zone(schedule.spec.time_zone.as_deref()) {
                errors.push(FieldError::new("spec.timeZone", error.to_string()));
            }
        }
        Resource::Skill(_) | Resource::AlertSource(_) | Resource::Run(_) | Resource::Incident(_) => {}
    }
}

fn check_named_values(
    values: &[NamedValue],
    field: &str,
    valid: fn(&str) -> bool,
    expected: &str,
    case_insensitive: bool,
    errors: &mut Vec<FieldError>,
) {
    let mut seen = BTreeSet::new();
    for (i, item) in values.iter().enumerate() {
        let path = format!("{field}[{i}].name");
        if !valid(&item.name) {
            errors.push(FieldError::new(&path, format!("{:?} is not {expected}", item.name)));
        }
        let key = if case_insensitive { item.name.to_ascii_lowercase() } else { item.name.clone() };
        if !seen.insert(key) {
            errors.push(FieldError::new(&path, format!("duplicate name {:?}", item.name)));
        }
    }
}

fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('-') && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// An absolute http(s) URL with a host and no credentials or fragment; a query only when allowed.
pub fn check_http_url(value: &str, field: &str, query_allowed: bool, errors: &mut Vec<FieldError>) {
    let reason = match url::Url::parse(value) {
        Err(error) => Some(format!("is not a valid URL: {error}")),
        Ok(url) if url.scheme() != "http" && url.scheme() != "https" => {
            Some(format!("must use http or https, not {:?}", url.scheme()))
        }
        Ok(url) if url.host_str().is_none_or(str::is_empty) => Some("must name a host".to_string()),
        Ok(url) if !url.username().is_empty() || url.password().is_some() => {
            Some("must not contain credentials; use a secret reference for them".to_string())
        }
        Ok(url) if url.fragment().is_some() => Some("must not contain a fragment (#...)".to_string()),
        Ok(url) if !query_allowed && url.query().is_some() => Some("must not contain a query (?...)".to_string()),
        Ok(_) => None,
    };
    if let Some(reason) = reason {
        errors.push(FieldError::new(field, reason));
    }
}

fn check_path(path: &str, field: &str, errors: &mut Vec<FieldError>) {
    if path.contains('\0') {
        errors.push(FieldError::new(field, "must not contain NUL bytes"));
    }
}
