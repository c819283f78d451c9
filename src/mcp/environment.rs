//! What a stdio child process gets: a cleared environment with only the allowed host variables
//! and its own entries, and a bounded stderr that goes to our log at debug level (redacted: a
//! child may print the secrets it was given).

use std::ffi::OsString;

use tokio::io::AsyncReadExt;

use super::error::McpError;

/// Maximum bytes of one logged stderr line; the rest of the line is dropped.
const MAX_STDERR_LINE: usize = 1024;
/// Maximum stderr lines logged per child; later output is drained but not logged.
const MAX_STDERR_LINES: usize = 1000;

/// Environment of a child: `base_env` names copied from `lookup` (the host environment), then
/// the adapter's own entries, which win.
pub fn child_env(
    base_env: &[String],
    own: &[(String, String)],
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Vec<(OsString, OsString)> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    for name in base_env {
        if own.iter().any(|(k, _)| k == name) || out.iter().any(|(k, _)| k == name.as_str()) {
            continue;
        }
        if let Some(value) = lookup(name) {
            out.push((OsString::from(name), value));
        }
    }
    for (name, value) in own {
        out.retain(|(k, _)| k != name.as_str());
        out.push((OsString::from(name), OsString::from(value)));
    }
    out
}

/// Checks an environment variable name; the error names the variable, never a value.
pub fn check_env_name(name: &str) -> Result<(), McpError> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(McpError::EnvName(name.to_owned()));
    }
    Ok(())
}

/// Checks an environment value without revealing it.
pub fn check_env_value(name: &str, value: &str) -> Result<(), McpError> {
    if value.contains('\0') {
        return Err(McpError::EnvValue(name.to_owned()));
    }
    Ok(())
}

/// Reads the child's stderr to its end, logging at most [`MAX_STDERR_LINES`] lines of at most
/// [`MAX_STDERR_LINE`] bytes each at debug level.
pub async fn pump_stderr(key: String, mut stderr: tokio::process::ChildStderr) {
    let mut buf = [0u8; 4096];
    let mut line: Vec<u8> = Vec::with_capacity(256);
    let mut logged = 0usize;
    let emit = |line: &mut Vec<u8>, logged: &mut usize| {
        if *logged < MAX_STDERR_LINES {
            let text = crate::redact::redact(&String::from_utf8_lossy(line));
            tracing::debug!(adapter = key.as_str(), line = text.trim_end(), "mcp child stderr");
            *logged += 1;
            if *logged == MAX_STDERR_LINES {
                tracing::debug!(adapter = key.as_str(), "mcp child stderr: further output is not logged");
            }
        }
        line.clear();
    };
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for &b in &buf[..n] {
            if b == b'\n' {
                emit(&mut line, &mut logged);
            } else if line.len() < MAX_STDERR_LINE {
                line.push(b);
            }
        }
    }
    if !line.is_empty() {
        emit(&mut line, &mut logged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_base_names_and_own_entries() {
        let host = |name: &str| match name {
            "PATH" => Some(OsString::from("/usr/bin")),
            "HOME" => Some(OsString::from("/root")),
            "AKRITAS_API_KEY" => Some(OsString::from("secret")),
            _ => None,
        };
        let env = child_env(
            &["PATH".into(), "HOME".into(), "TZ".into()],
            &[("HOME".into(), "/tmp".into()), ("TOKEN".into(), "t".into())],
            host,
        );
        let env: Vec<(String, String)> = env
            .into_iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(
            env,
            vec![("PATH".into(), "/usr/bin".into()), ("HOME".into(), "/tmp".into()), ("TOKEN".into(), "t".into())]
        );
    }

    #[test]
    fn names_are_checked_without_values() {
        assert!(check_env_name("A_B").is_ok());
        assert!(check_env_name("").is_err());
        assert!(check_env_name("A=B").is_err());
        let err = check_env_value("TOKEN", "sec\0ret").unwrap_err().to_string();
        assert!(err.contains("TOKEN") && !err.contains("sec"), "{err}");
    }
}
