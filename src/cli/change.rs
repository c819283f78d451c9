//! `akritas change`: previews and applies through a running host's native API
//! (`simulate`, `show`, `apply`, `workspaces`). Applying needs an API key with the
//! `admin` scope, exactly as over HTTP: the CLI is a client, never a side door.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

/// `change` arguments.
#[derive(Args, Debug)]
pub struct ChangeArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ChangeCommand,
    /// Base URL of the Akritas host.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8080", env = "AKRITAS_URL")]
    pub url: String,
    /// Environment variable holding the API key (empty value: no key).
    #[arg(long, global = true, default_value = "AKRITAS_API_KEY")]
    pub api_key_env: String,
    /// Print the JSON response instead of the Markdown answer.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `change` subcommands.
#[derive(Subcommand, Debug)]
pub enum ChangeCommand {
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
    if let Some(key) = key.filter(|k| !k.is_empty()) {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(|e| format!("cannot reach {base}: {e}"))?;
    let status = response.status();
    let value: Value = response.json().await.map_err(|e| format!("{base} answered {status} without JSON: {e}"))?;
    if !status.is_success() {
        let message = value["error"]["message"].as_str().unwrap_or("request failed");
        eprintln!("akritas change: {status}: {message}");
        if let Some(details) = value["error"].get("details") {
            eprintln!("{}", serde_json::to_string_pretty(details).unwrap_or_default());
        }
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    match &args.command {
        ChangeCommand::Simulate { .. } | ChangeCommand::Show { .. } => {
            println!("{}", value["answer"].as_str().unwrap_or_default());
            if let Some(id) = value["approval"]["id"].as_str() {
                println!("\nApproval id: {id} (expires {})", value["approval"]["expires_at"].as_str().unwrap_or("?"));
                println!("Apply with: akritas change apply {id} --yes");
            }
            if let Some(state) = value.get("state") {
                println!("\nState: {state}");
            }
        }
        ChangeCommand::Apply { .. } => {
            let files = value["changed_files"].as_array().map(Vec::len).unwrap_or_default();
            match value["branch"].as_str() {
                Some(branch) => println!("published {files} file(s) on branch {branch} (Run {})", value["run_id"]),
                None => println!("applied {files} file(s) (Run {})", value["run_id"]),
            }
        }
        ChangeCommand::Workspaces => println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default()),
    }
    Ok(ExitCode::SUCCESS)
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
