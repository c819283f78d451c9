//! A git smart-HTTP server: the real `git http-backend` (from `git --exec-path`) run as
//! a CGI program behind a small axum server, with HTTP Basic authentication by token.
//! A request whose password is the token runs with `REMOTE_USER` set (which enables
//! pushes); any other request gets 401 with `WWW-Authenticate: Basic`. Every request
//! is recorded (method, path, whether credentials were presented; never the token).
//!
//! Plus helpers that build bare repositories with the `git` command.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use base64::Engine as _;
use tokio::io::AsyncWriteExt;

/// One request the server received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// `GET` or `POST`.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Whether an `Authorization` header came with it.
    pub authorization: bool,
}

/// A running server; stopped on drop.
pub struct GitServer {
    /// `http://127.0.0.1:PORT`; repositories are at `<url>/<name>.git`.
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    runtime: Option<tokio::runtime::Runtime>,
}

struct Config {
    root: PathBuf,
    token: String,
    backend: PathBuf,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl GitServer {
    /// Serves the bare repositories under `root`, accepting `token` as the Basic password.
    pub fn start(root: &Path, token: &str) -> GitServer {
        let exec_path = git(&["--exec-path"], Path::new("."));
        let backend = Path::new(exec_path.trim()).join("git-http-backend");
        assert!(backend.is_file(), "git-http-backend not found at {}", backend.display());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let config = Arc::new(Config {
            root: root.to_path_buf(),
            token: token.to_string(),
            backend,
            requests: requests.clone(),
        });
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (listener, url) = loopback_listener(&runtime);
        let app = axum::Router::new().fallback(move |request: Request<Body>| cgi(config.clone(), request));
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        GitServer { url, requests, runtime: Some(runtime) }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn basic_password(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get("authorization")?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

async fn cgi(config: Arc<Config>, request: Request<Body>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    config.requests.lock().unwrap().push(Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path_and_query().map(|p| p.to_string()).unwrap_or_default(),
        authorization: parts.headers.contains_key("authorization"),
    });
    let user = match basic_password(&parts.headers) {
        Some((user, password)) if password == config.token => user,
        _ => {
            let mut response = Response::new(Body::from("authentication required\n"));
            *response.status_mut() = StatusCode::UNAUTHORIZED;
            response.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"git\""));
            return response;
        }
    };
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let mut child = tokio::process::Command::new(&config.backend)
        .env_clear()
        .env("GIT_PROJECT_ROOT", &config.root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("REMOTE_USER", user)
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", &config.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&body).await;
    });
    let output = child.wait_with_output().await.unwrap();
    let _ = writer.await;
    parse_cgi(&output.stdout)
}

/// Turns CGI output (headers, a blank line, the body) into a response.
fn parse_cgi(output: &[u8]) -> Response<Body> {
    let split = output
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4))
        .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, gap)) = split else {
        let mut response = Response::new(Body::from("bad CGI output"));
        *response.status_mut() = StatusCode::BAD_GATEWAY;
        return response;
    };
    let mut response = Response::new(Body::from(output[end + gap..].to_vec()));
    for line in String::from_utf8_lossy(&output[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(500);
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        } else if let (Ok(name), Ok(value)) =
            (axum::http::HeaderName::from_bytes(name.trim().as_bytes()), HeaderValue::from_str(value))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Runs `git` in `dir` with a fixed identity and no user or system configuration;
/// panics with its stderr on failure; returns stdout.
pub fn git(args: &[&str], dir: &Path) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}

/// Creates the bare repository `<root>/<name>.git` whose `main` branch has one commit
/// with `files` (path, content); returns its path.
pub fn bare_repo(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let bare = root.join(format!("{name}.git"));
    std::fs::create_dir_all(&bare).unwrap();
    git(&["init", "--quiet", "--bare", "--initial-branch=main"], &bare);
    commit_files(&bare, "main", files, "initial");
    bare
}

/// Commits `files` (path, content) on `branch` of the bare repository (created from
/// nothing when the branch does not exist yet); returns the new commit id.
pub fn commit_files(bare: &Path, branch: &str, files: &[(&str, &str)], message: &str) -> String {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    git(&["init", "--quiet", "--initial-branch", branch], dir);
    let bare_text = bare.to_str().unwrap();
    git(&["remote", "add", "origin", bare_text], dir);
    let has_branch = !git(&["ls-remote", "--heads", bare_text, branch], dir).trim().is_empty();
    if has_branch {
        git(&["fetch", "--quiet", "origin", branch], dir);
        git(&["reset", "--quiet", "--hard", "FETCH_HEAD"], dir);
    }
    for (path, content) in files {
        let target = dir.join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, content).unwrap();
    }
    git(&["add", "--all"], dir);
    git(&["commit", "--quiet", "-m", message], dir);
    git(&["push", "--quiet", "origin", &format!("HEAD:refs/heads/{branch}")], dir);
    git(&["rev-parse", "HEAD"], dir).trim().to_string()
}

/// A listener on a free loopback port registered with `runtime`, and its `http://` URL.
/// Bound without `block_on`, so that a server can start inside an async test.
pub fn loopback_listener(runtime: &tokio::runtime::Runtime) -> (tokio::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let listener = {
        let _context = runtime.enter();
        tokio::net::TcpListener::from_std(listener).unwrap()
    };
    let url = format!("http://{}", listener.local_addr().unwrap());
    (listener, url)
}
