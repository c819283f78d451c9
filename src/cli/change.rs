//! `akritas change`: previews and applies through a running host's native API
//! (`simulate`, `show`, `apply`, `workspaces`). Applying needs an API key with the
//! `admin` scope, exactly as over HTTP: the CLI is a client, never a side door.

use super::stdout::outln;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::change::approvals::ChangeState;

/// Where the API key is read from unless `--api-key-env` names another variable.
const DEFAULT_KEY_ENV: &str = "AKRITAS_API_KEY";

/// `change` arguments.
#[derive(Args, Debug)]
pub(crate) struct ChangeArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ChangeCommand,
    /// Base URL of the Akritas host.
    #[arg(long, global = true, default_value = crate::config::DEFAULT_API_URL, env = "AKRITAS_URL")]
    pub url: String,
    /// Environment variable holding the API key (empty value: no key).
    #[arg(long, global = true, default_value = DEFAULT_KEY_ENV)]
    pub api_key_env: String,
    /// Print the JSON response instead of the Markdown answer.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `change` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum ChangeCommand {
    /// Prepare a change (never writes): proposal, host-built diff, validators, approval id.
    Simulate {
        /// Workspace name.
        #[arg(long)]
        workspace: String,
        /// Namespace of the Workspace (default: the API key's).
        #[arg(long)]
        namespace: Option<String>,
        /// What to change.
        #[arg(long, conflicts_with = "request_file", required_unless_present = "request_file")]
        request: Option<String>,
        /// Read the request from a file.
        #[arg(long)]
        request_file: Option<PathBuf>,
        /// Files to read (relative to the workspace root); none: automatic discovery.
        #[arg(long = "file")]
        files: Vec<String>,
        /// Output tokens of the proposal call.
        #[arg(long)]
        max_tokens: Option<u32>,
    },
    /// Show a pending or finished change.
    Show {
        /// The approval id a preview returned.
        id: String,
    },
    /// Apply a pending change once (needs an admin key and --yes).
    Apply {
        /// The approval id a preview returned.
        id: String,
        /// Confirm the write.
        #[arg(long)]
        yes: bool,
    },
    /// List the Workspaces.
    Workspaces,
}

/// Runs `akritas change`.
pub fn run(args: ChangeArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("akritas change: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(&args)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("akritas change: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(args: &ChangeArgs) -> Result<ExitCode, String> {
    let base = args.url.trim_end_matches('/');
    let (method, path, body) = match &args.command {
        ChangeCommand::Simulate { workspace, namespace, request, request_file, files, max_tokens } => {
            let request = match (request, request_file) {
                (Some(text), _) => text.clone(),
                (None, Some(path)) => std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the request file {}: {e}", path.display()))?,
                (None, None) => return Err("give --request or --request-file".into()),
            };
            let mut body = json!({"workspace": workspace, "request": request, "files": files});
            if let Some(namespace) = namespace {
                body["namespace"] = json!(namespace);
            }
            if let Some(max_tokens) = max_tokens {
                body["max_tokens"] = json!(max_tokens);
            }
            (reqwest::Method::POST, "/api/v1/change/simulations".to_string(), Some(body))
        }
        ChangeCommand::Show { id } => {
            (reqwest::Method::GET, format!("/api/v1/change/simulations/{}", segment(id)?), None)
        }
        ChangeCommand::Apply { id, yes } => {
            if !yes {
                return Err("applying writes to the workspace; add --yes to confirm".into());
            }
            let path = format!("/api/v1/change/simulations/{}/apply", segment(id)?);
            (reqwest::Method::POST, path, Some(json!({"confirm": true})))
        }
        ChangeCommand::Workspaces => (reqwest::Method::GET, "/api/v1/workspaces".to_string(), None),
    };
    let client = crate::outbound::client(Duration::from_secs(15 * 60)).map_err(|e| format!("HTTP client: {e}"))?;
    let mut request = client.request(method, format!("{base}{path}"));
    let key = if args.api_key_env.is_empty() { None } else { std::env::var(&args.api_key_env).ok() };
    let key_sent = key.filter(|k| !k.is_empty());
    if let Some(key) = &key_sent {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|e| format!("cannot reach {base}: {e}"))?;
    let value = match akritas_answer(&args.command, &format!("{base}{path}"), response).await? {
        Answer::Success(value) => value,
        Answer::Refused { status, error } => {
            eprintln!("akritas change: {status}: {}", error["message"].as_str().unwrap_or_default());
            if let Some(details) = error.get("details") {
                eprintln!("{}", serde_json::to_string_pretty(details).unwrap_or_default());
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    match &args.command {
        ChangeCommand::Simulate { .. } | ChangeCommand::Show { .. } => {
            outln!("{}", value["answer"].as_str().unwrap_or_default());
            let pending = value.get("state").is_none_or(|state| state["status"] == "pending");
            if let Some(id) = value["approval"]["id"].as_str().filter(|_| pending) {
                outln!("\nApproval id: {id} (expires {})", value["approval"]["expires_at"].as_str().unwrap_or("?"));
                outln!("Apply with: {}", apply_command(id, args));
                if key_sent.is_none() {
                    // The preview went through without a key: this host lets anonymous callers
                    // preview, and never apply.
                    outln!(
                        "Applying needs an API key with the admin scope, and none was sent: configure one on the \
                         host (api_keys: NAME=ENV_VAR:read+chat+admin, see docs/changes.md) and put it in {} here.",
                        if args.api_key_env.is_empty() { DEFAULT_KEY_ENV } else { &args.api_key_env }
                    );
                }
            }
            if let Some(state) = value.get("state") {
                outln!("\nState: {}", describe_state(state));
            }
        }
        ChangeCommand::Apply { .. } => {
            let files = value["changed_files"].as_array().map(Vec::len).unwrap_or_default();
            let run = value["run_id"].as_str().unwrap_or("?");
            match value["branch"].as_str() {
                Some(branch) => outln!("published {files} file(s) on branch {branch} (Run {run})"),
                None => outln!("applied {files} file(s) (Run {run})"),
            }
        }
        ChangeCommand::Workspaces => outln!("{}", serde_json::to_string_pretty(&value).unwrap_or_default()),
    }
    Ok(ExitCode::SUCCESS)
}

/// What an Akritas host answered.
enum Answer {
    /// A success body with the fields the command prints.
    Success(Value),
    /// An API error: its status and `error` object (`message`, maybe `details`).
    Refused { status: reqwest::StatusCode, error: Value },
}

/// The host's answer when it is one an Akritas host gives to `command`: JSON, with
/// the fields the command prints or an API error. Anything else (a web server's HTML
/// page, another API's JSON) is an error naming what came back.
async fn akritas_answer(command: &ChangeCommand, url: &str, response: reqwest::Response) -> Result<Answer, String> {
    let status = response.status();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content type")
        .to_string();
    let body = response.bytes().await.map_err(|e| format!("{url} answered {status} but the body broke off: {e}"))?;
    let json = content_type.starts_with("application/json").then(|| serde_json::from_slice::<Value>(&body).ok());
    let fields = if status.is_success() { success_fields(command) } else { &["error"] };
    match json.flatten() {
        Some(value) if status.is_success() && fields.iter().all(|f| value.get(f).is_some()) => {
            Ok(Answer::Success(value))
        }
        Some(mut value) if !status.is_success() && value["error"]["message"].is_string() => {
            Ok(Answer::Refused { status, error: value["error"].take() })
        }
        _ => Err(not_akritas(url, status, &content_type, fields, &body)),
    }
}

/// The fields an Akritas host's success answer to `command` always has.
fn success_fields(command: &ChangeCommand) -> &'static [&'static str] {
    match command {
        ChangeCommand::Simulate { .. } => &["run_id", "answer"],
        ChangeCommand::Show { .. } => &["state", "expires_at"],
        ChangeCommand::Apply { .. } => &["run_id", "changed_files"],
        ChangeCommand::Workspaces => &["workspaces"],
    }
}

/// Says that `url` did not answer as an Akritas host: what it got and what to check.
fn not_akritas(url: &str, status: reqwest::StatusCode, content_type: &str, fields: &[&str], body: &[u8]) -> String {
    let excerpt =
        crate::text::truncate_chars(&crate::text::one_line(&String::from_utf8_lossy(body)), 120, crate::text::ELLIPSIS);
    let excerpt = if excerpt.is_empty() { "an empty body".to_string() } else { format!("{excerpt:?}") };
    format!(
        "{url} did not answer as an Akritas host: it answered {status} ({content_type}) with {excerpt}, \
         not a JSON body with {}; check that --url (or AKRITAS_URL) is the base URL of the Akritas API, \
         such as {}",
        fields.join(" and "),
        crate::config::DEFAULT_API_URL
    )
}

/// The `change apply` command for approval `id`, with the connection flags this
/// command was given so it can be pasted as is (the key stays in its variable).
fn apply_command(id: &str, args: &ChangeArgs) -> String {
    let mut command = format!("akritas change apply {id} --yes --url {}", shell_word(&args.url));
    if args.api_key_env != DEFAULT_KEY_ENV {
        command.push_str(&format!(" --api-key-env {}", shell_word(&args.api_key_env)));
    }
    command
}

/// `text` as one POSIX shell word: as is when it is plain, else single-quoted.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// A change's state as a word, with what else is known about it
/// (`applied by ops at … (Run …), branch akritas/…`).
fn describe_state(state: &Value) -> String {
    let Ok(typed) = serde_json::from_value::<ChangeState>(state.clone()) else {
        return state["status"].as_str().map_or_else(|| state.to_string(), str::to_string);
    };
    let word = typed.name();
    match typed {
        ChangeState::Pending => format!("{word} (waiting for approval)"),
        ChangeState::Applying | ChangeState::Expired => word.to_string(),
        ChangeState::Applied { run_id, approver, at, detail } => {
            let mut text = format!("{word} by {approver} at {at} (Run {run_id})");
            for (key, value) in detail.as_object().into_iter().flatten() {
                let value = match value {
                    Value::Null => continue,
                    Value::String(s) => s.clone(),
                    Value::Array(items) => items
                        .iter()
                        .map(|i| i.as_str().map_or(i.to_string(), str::to_string))
                        .collect::<Vec<_>>()
                        .join(", "),
                    other => other.to_string(),
                };
                text.push_str(&format!("\n  {}: {value}", key.replace('_', " ")));
            }
            text
        }
        ChangeState::Failed { run_id, approver, at, error } => {
            format!("{word} at {at} (Run {run_id}, approved by {approver})\n  error: {error}")
        }
    }
}

/// An approval id as one URL path segment (32 lowercase hex characters).
fn segment(id: &str) -> Result<&str, String> {
    let id = id.trim();
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(id)
    } else {
        Err(format!("{id:?} is not an approval id (32 lowercase hex characters, as the preview printed)"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str, api_key_env: &str) -> ChangeArgs {
        ChangeArgs { command: ChangeCommand::Workspaces, url: url.into(), api_key_env: api_key_env.into(), json: false }
    }

    #[test]
    fn the_apply_hint_keeps_the_url_and_a_non_default_key_variable_but_no_key() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            apply_command(id, &args("https://akritas.example.com:8443", DEFAULT_KEY_ENV)),
            format!("akritas change apply {id} --yes --url https://akritas.example.com:8443")
        );
        assert_eq!(
            apply_command(id, &args("http://10.0.0.5:8080/", "OPS_KEY")),
            format!("akritas change apply {id} --yes --url http://10.0.0.5:8080/ --api-key-env OPS_KEY")
        );
        assert_eq!(
            apply_command(id, &args("http://h:1/a b", "")),
            format!("akritas change apply {id} --yes --url 'http://h:1/a b' --api-key-env ''")
        );
    }

    #[test]
    fn shell_words_are_quoted_only_when_the_shell_would_split_or_expand_them() {
        assert_eq!(shell_word("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(shell_word("a'b $c"), r"'a'\''b $c'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn a_state_reads_as_a_word_with_its_details() {
        assert_eq!(describe_state(&json!({"status": "pending"})), "pending (waiting for approval)");
        assert_eq!(describe_state(&json!({"status": "expired"})), "expired");
        let applied = json!({"status": "applied", "run_id": "r1", "approver": "ops", "at": "2025-01-02T03:04:05Z",
            "detail": {"branch": "akritas/r1", "commit": null, "changed_files": ["a.yaml", "b.yaml"]}});
        assert_eq!(
            describe_state(&applied),
            "applied by ops at 2025-01-02T03:04:05Z (Run r1)\n  branch: akritas/r1\n  changed files: a.yaml, b.yaml"
        );
        let failed = json!({"status": "failed", "run_id": "r2", "approver": "ops", "at": "t", "error": "stale source"});
        assert_eq!(describe_state(&failed), "failed at t (Run r2, approved by ops)\n  error: stale source");
        // A state this CLI does not know still prints its word.
        assert_eq!(describe_state(&json!({"status": "archived", "x": 1})), "archived");
    }

    #[test]
    fn a_host_that_is_not_akritas_is_named_with_what_it_answered() {
        let message = not_akritas(
            "http://127.0.0.1:9/api/v1/workspaces",
            reqwest::StatusCode::OK,
            "text/html; charset=utf-8",
            &["workspaces"],
            b"<html>\n  <h1>It works!</h1>\n</html>",
        );
        assert_eq!(
            message,
            "http://127.0.0.1:9/api/v1/workspaces did not answer as an Akritas host: it answered 200 OK \
             (text/html; charset=utf-8) with \"<html> <h1>It works!</h1> </html>\", not a JSON body with workspaces; \
             check that --url (or AKRITAS_URL) is the base URL of the Akritas API, such as http://127.0.0.1:8090"
        );
    }
}
