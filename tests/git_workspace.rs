//! Git workspaces over our own smart-HTTP transport against the real `git
//! http-backend`: clone with a token, fetch, refs, branch publishing, hostile peers,
//! and a git Workspace served by the real binary becoming Ready.

use std::path::Path;
use std::time::{Duration, Instant};

use akritas::change::git::{self, Credentials, GitError, Limits, Remote, TransportError};
use akritas::change::{FileChange, Operation};
use akritas::resources::workspace::WorkspaceStatus;
use akritas_testkit::git_server::{GitServer, bare_repo, commit_files, git};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "tok-7f3a9c1e5b2d8e4f";

fn workspace_errors(spec: serde_json::Value) -> Vec<String> {
    let manifest = serde_json::json!({
        "apiVersion": "akritas.io/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "w", "namespace": "ops"}, "spec": spec,
    });
    match akritas::resources::validate::parse_manifest(manifest) {
        Ok(_) => Vec::new(),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn workspace_rules_https_only_and_a_git_workspace_is_written_by_publishing() {
    use serde_json::json;
    let git = json!({"url": "https://git.example/infra.git", "auth": {"token": {"env": "AKRITAS_GIT_TOKEN"}}});
    assert_eq!(workspace_errors(json!({"source": {"git": git}})), Vec::<String>::new());
    let ok = workspace_errors(json!({"source": {"git": git}, "writable": true, "publish": {}}));
    assert_eq!(ok, Vec::<String>::new());
    let ssh = workspace_errors(json!({"source": {"git": {"url": "ssh://git@git.example/infra.git"}}}));
    assert!(
        ssh.contains(&"spec.source.git.url: ssh remotes are not supported; use an https URL with a token".into()),
        "{ssh:?}"
    );
    let scp = workspace_errors(json!({"source": {"git": {"url": "git@git.example:infra.git"}}}));
    assert!(scp.iter().any(|e| e.contains("ssh remotes are not supported")), "{scp:?}");
    let inline = workspace_errors(json!({"source": {"git": {"url": "https://u:secret@git.example/i.git"}}}));
    assert!(inline.iter().any(|e| e.starts_with("spec.source.git.url: must not contain credentials")), "{inline:?}");
    let unpublished = workspace_errors(json!({"source": {"git": git}, "writable": true}));
    assert!(
        unpublished.contains(&"spec: a git workspace is written only by pushing a branch; set spec.publish".into()),
        "{unpublished:?}"
    );
    let local = workspace_errors(json!({"source": {"path": "/w"}, "publish": {}}));
    assert!(local.iter().any(|e| e.starts_with("spec: publish needs a git source")), "{local:?}");
    let interval =
        workspace_errors(json!({"source": {"git": {"url": "https://g.example/i.git", "fetchIntervalSeconds": 5}}}));
    assert!(
        interval.iter().any(|e| e.starts_with("spec.source.git.fetchIntervalSeconds: must be at least 30")),
        "{interval:?}"
    );
    let prefix = workspace_errors(json!({"source": {"git": git}, "publish": {"branchPrefix": "a/../b"}}));
    assert!(
        prefix.iter().any(|e| e.starts_with("spec.publish.branchPrefix: must be usable in a git branch name")),
        "{prefix:?}"
    );
}

fn remote(server: &GitServer, repo: &str, reference: &str, token: &str) -> Remote {
    Remote {
        url: format!("{}/{repo}.git", server.url),
        reference: reference.to_string(),
        credentials: Some(Credentials { username: "x-access-token".into(), token: token.into() }),
    }
}

fn rev_parse(bare: &Path, spec: &str) -> String {
    git(&["--git-dir", bare.to_str().unwrap(), "rev-parse", spec], Path::new(".")).trim().to_string()
}

#[test]
fn clone_over_http_with_a_token_checks_out_main_and_keeps_the_token_out_of_the_clone() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("pillar/prod/nftables.sls", "allow: [orders-v1]\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let dir = clone.path().join("ws");

    let head = git::sync(&remote(&server, "infra", "main", TOKEN), &dir).unwrap();

    assert_eq!(head.commit, rev_parse(&bare, "main"));
    assert_eq!(head.reference, "main");
    assert_eq!(std::fs::read_to_string(dir.join("pillar/prod/nftables.sls")).unwrap(), "allow: [orders-v1]\n");
    let config = std::fs::read_to_string(dir.join(".git/config")).unwrap();
    assert!(!config.contains(TOKEN), "the token must not be in .git/config:\n{config}");
    assert!(config.contains(&server.url), "the remote URL is configured:\n{config}");
    let requests = server.requests();
    assert!(requests.iter().any(|r| r.path.contains("info/refs?service=git-upload-pack")), "{requests:?}");
    assert!(requests.iter().any(|r| r.method == "POST" && r.path.ends_with("/git-upload-pack")), "{requests:?}");
    // Basic on challenge: the first request goes without the token; once the server asked
    // (401, `WWW-Authenticate: Basic`), every later one carries it.
    assert!(!requests[0].authorization, "the token waits for the server's challenge: {requests:?}");
    assert!(
        requests[1..].iter().all(|r| r.authorization),
        "after the challenge every request carries it: {requests:?}"
    );
    assert_eq!(requests.iter().filter(|r| !r.authorization).count(), 1, "{requests:?}");
    assert_eq!(git::head(&dir).unwrap().commit, head.commit, "the working tree is at the synced commit");
}

#[test]
fn a_wrong_token_is_a_clear_401_error_without_the_token() {
    let root = tempfile::tempdir().unwrap();
    bare_repo(root.path(), "infra", &[("a.txt", "a\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let wrong = "wrong-token-0123456789";

    let error = git::sync(&remote(&server, "infra", "main", wrong), &clone.path().join("ws")).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, GitError::Transport(TransportError::AuthRejected { status: 401, .. })), "{error:?}");
    assert!(message.contains("HTTP 401") && message.contains("spec.source.git.auth"), "{message}");
    assert!(!message.contains(wrong) && !message.contains(TOKEN), "{message}");
    assert!(!format!("{error:?}").contains(wrong));

    let anonymous = Remote { credentials: None, ..remote(&server, "infra", "main", TOKEN) };
    let error = git::sync(&anonymous, &clone.path().join("anon")).unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::AuthRequired { .. })), "{error:?}");

    let missing = git::sync(&remote(&server, "nothing-here", "main", TOKEN), &clone.path().join("missing"));
    let error = missing.unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::NotFound { .. })), "{error:?}");
}

#[test]
fn fetch_picks_up_a_new_commit_and_resets_local_edits() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("a.txt", "one\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let dir = clone.path().join("ws");
    let spec = remote(&server, "infra", "main", TOKEN);
    let first = git::sync(&spec, &dir).unwrap();
    std::fs::write(dir.join("a.txt"), "edited locally\n").unwrap();
    std::fs::write(dir.join("stray.txt"), "untracked\n").unwrap();

    let second_commit = commit_files(&bare, "main", &[("a.txt", "two\n"), ("b.txt", "new\n")], "second");
    let second = git::sync(&spec, &dir).unwrap();

    assert_ne!(first.commit, second.commit);
    assert_eq!(second.commit, second_commit);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "two\n");
    assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "new\n");
    assert!(!dir.join("stray.txt").exists(), "the clone is ours: untracked files are removed");
    assert_eq!(git::blob_at(&dir, &first.commit, "a.txt").unwrap().as_deref(), Some(&b"one\n"[..]));
    assert_eq!(git::blob_at(&dir, &first.commit, "b.txt").unwrap(), None);
}

#[test]
fn sync_checks_out_a_tag_or_a_commit_id() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("v.txt", "1\n")]);
    let first = rev_parse(&bare, "main");
    git(&["--git-dir", bare.to_str().unwrap(), "tag", "-a", "-m", "release", "v1", &first], Path::new("."));
    commit_files(&bare, "main", &[("v.txt", "2\n")], "second");
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();

    let tagged = git::sync(&remote(&server, "infra", "v1", TOKEN), &clone.path().join("tag")).unwrap();
    assert_eq!(tagged.commit, first);
    assert_eq!(std::fs::read_to_string(clone.path().join("tag/v.txt")).unwrap(), "1\n");

    let pinned = git::sync(&remote(&server, "infra", &first, TOKEN), &clone.path().join("pin")).unwrap();
    assert_eq!(pinned.commit, first);

    let error = git::sync(&remote(&server, "infra", "no-such-branch", TOKEN), &clone.path().join("x")).unwrap_err();
    assert!(
        matches!(error, GitError::UnknownRef { .. }) && error.to_string().contains("spec.source.git.ref"),
        "{error}"
    );
}

fn changes() -> Vec<FileChange> {
    vec![
        FileChange {
            path: "pillar/prod/nftables.sls".into(),
            operation: Operation::Replace,
            before: Some("allow: [orders-v1]\n".into()),
            after: "allow: [orders-v1, orders-v2]\n".into(),
            mode: 0o644,
        },
        FileChange {
            path: "scripts/check.sh".into(),
            operation: Operation::Create,
            before: None,
            after: "#!/bin/sh\nexit 0\n".into(),
            mode: 0o755,
        },
    ]
}

#[test]
fn publish_pushes_exactly_one_commit_on_a_new_branch_and_leaves_main_alone() {
    let root = tempfile::tempdir().unwrap();
    let files = [("pillar/prod/nftables.sls", "allow: [orders-v1]\n"), ("README.md", "infra\n")];
    let bare = bare_repo(root.path(), "infra", &files);
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let dir = clone.path().join("ws");
    let spec = remote(&server, "infra", "main", TOKEN);
    let base = git::sync(&spec, &dir).unwrap().commit;
    let main_before = rev_parse(&bare, "main");

    let published = git::publish(
        &dir,
        &spec,
        &base,
        &changes(),
        "akritas/change-1",
        "Allow orders-v2\n\nRun: r-1",
        ("Akritas", "akritas@example.com"),
    )
    .unwrap();

    let bare_text = bare.to_str().unwrap();
    assert_eq!(published.branch, "akritas/change-1");
    assert_eq!(rev_parse(&bare, "refs/heads/akritas/change-1"), published.commit);
    assert_eq!(rev_parse(&bare, "akritas/change-1^"), base, "the parent is the base commit");
    assert_eq!(rev_parse(&bare, "main"), main_before, "main is untouched");
    let count =
        git(&["--git-dir", bare_text, "rev-list", "--count", &format!("{base}..akritas/change-1")], Path::new("."));
    assert_eq!(count.trim(), "1");
    let changed = git(&["--git-dir", bare_text, "diff", "--name-only", &base, &published.commit], Path::new("."));
    assert_eq!(changed.lines().collect::<Vec<_>>(), ["pillar/prod/nftables.sls", "scripts/check.sh"]);
    let tree = git(&["--git-dir", bare_text, "ls-tree", "-r", &published.commit], Path::new("."));
    assert!(tree.lines().any(|l| l.starts_with("100755 ") && l.ends_with("scripts/check.sh")), "{tree}");
    assert!(tree.lines().any(|l| l.starts_with("100644 ") && l.ends_with("README.md")), "{tree}");
    let content = git(&["--git-dir", bare_text, "show", "akritas/change-1:pillar/prod/nftables.sls"], Path::new("."));
    assert_eq!(content, "allow: [orders-v1, orders-v2]\n");
    let message =
        git(&["--git-dir", bare_text, "log", "-1", "--format=%an <%ae>%n%B", "akritas/change-1"], Path::new("."));
    assert!(message.starts_with("Akritas <akritas@example.com>\nAllow orders-v2"), "{message}");
    // The working tree of the clone is not touched.
    assert_eq!(git::head(&dir).unwrap().commit, base);
    assert_eq!(std::fs::read_to_string(dir.join("pillar/prod/nftables.sls")).unwrap(), "allow: [orders-v1]\n");
    assert!(!dir.join("scripts/check.sh").exists());

    let again = git::publish(&dir, &spec, &base, &changes(), "akritas/change-1", "again", ("A", "a@example.com"));
    assert!(matches!(again, Err(GitError::BranchExists { .. })), "{again:?}");
}

#[test]
fn publish_refuses_a_branch_the_remote_already_has_even_at_the_base_commit() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("pillar/prod/nftables.sls", "allow: [orders-v1]\n")]);
    let bare_text = bare.to_str().unwrap();
    // A branch at main's commit: pushing on top of it would be a fast-forward.
    git(&["--git-dir", bare_text, "branch", "akritas/taken", "main"], Path::new("."));
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let dir = clone.path().join("ws");
    let spec = remote(&server, "infra", "main", TOKEN);
    let base = git::sync(&spec, &dir).unwrap().commit;

    let error =
        git::publish(&dir, &spec, &base, &changes()[..1], "akritas/taken", "m", ("A", "a@example.com")).unwrap_err();
    assert!(matches!(&error, GitError::BranchExists { .. }), "{error:?}");
    assert!(error.to_string().contains("already exists on"), "{error}");
    assert_eq!(rev_parse(&bare, "akritas/taken"), base, "the remote branch is unchanged");

    // The failed attempt leaves no local branch behind: another name works.
    let ok = git::publish(&dir, &spec, &base, &changes()[..1], "akritas/free", "m", ("A", "a@example.com")).unwrap();
    assert_eq!(rev_parse(&bare, "akritas/free"), ok.commit);

    let mut stale = changes();
    stale[0].before = Some("something else\n".into());
    let error =
        git::publish(&dir, &spec, &base, &stale[..1], "akritas/stale", "m", ("A", "a@example.com")).unwrap_err();
    assert!(matches!(error, GitError::InvalidChange { .. }), "{error:?}");

    let wrong_token = remote(&server, "infra", "main", "not-the-token");
    let error = git::publish(&dir, &wrong_token, &base, &changes()[..1], "akritas/denied", "m", ("A", "a@example.com"))
        .unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::AuthRejected { .. })), "{error:?}");
    assert!(!error.to_string().contains("not-the-token"));
}

/// A peer that answers every connection with `answer(request head)`, then either
/// closes or stays silent.
struct Hostile {
    url: String,
    runtime: Option<tokio::runtime::Runtime>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

enum Answer {
    /// These bytes, then close.
    Bytes(Vec<u8>),
    /// Headers of a 200 advertisement, then `total` body bytes without a length.
    Endless { total: usize },
    /// Headers and a few bytes, then nothing.
    Stall,
}

impl Hostile {
    fn start(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Hostile {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (listener, url) = akritas_testkit::git_server::loopback_listener(&runtime);
        let answer = std::sync::Arc::new(answer);
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = connections.clone();
        runtime.spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else { return };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let advertisement = "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\n\
                                         Connection: close\r\n\r\n";
                    match answer(&String::from_utf8_lossy(&head)) {
                        Answer::Bytes(bytes) => {
                            let _ = socket.write_all(&bytes).await;
                        }
                        Answer::Endless { total } => {
                            let _ = socket.write_all(advertisement.as_bytes()).await;
                            let _ = socket.write_all(b"001e# service=git-upload-pack\n0000").await;
                            // Well-formed ref lines, so that only the size limit stops the reader.
                            let line = format!("{:04x}{} refs/heads/x\n", 4 + 40 + 14, "a".repeat(40));
                            let piece = line.repeat(1024).into_bytes();
                            let mut sent = 0;
                            while sent < total {
                                if socket.write_all(&piece).await.is_err() {
                                    return;
                                }
                                sent += piece.len();
                            }
                        }
                        Answer::Stall => {
                            let _ = socket.write_all(advertisement.as_bytes()).await;
                            let _ = socket.write_all(b"001e# service=git-upload-pack\n").await;
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                    }
                });
            }
        });
        Hostile { url, runtime: Some(runtime), connections }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn anonymous(url: &str) -> Remote {
    Remote { url: format!("{url}/repo.git"), reference: "main".into(), credentials: None }
}

fn redirect_to(location: String) -> Answer {
    Answer::Bytes(
        format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .into_bytes(),
    )
}

#[test]
fn a_redirect_to_another_host_is_refused_and_never_followed() {
    let elsewhere = Hostile::start(|_| Answer::Bytes(b"HTTP/1.1 500 No\r\nContent-Length: 0\r\n\r\n".to_vec()));
    // Same port number, other host name: another origin.
    let target = elsewhere.url.replace("127.0.0.1", "localhost");
    let peer = Hostile::start(move |_| redirect_to(format!("{target}/repo.git/info/refs?service=git-upload-pack")));
    let dir = tempfile::tempdir().unwrap();
    let mut with_token = anonymous(&peer.url);
    with_token.credentials = Some(Credentials { username: "u".into(), token: TOKEN.into() });

    let error = git::sync(&with_token, &dir.path().join("ws")).unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::CrossOriginRedirect { .. })), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("localhost") && message.contains("only same-origin redirects"), "{message}");
    assert!(!message.contains(TOKEN));
    assert_eq!(elsewhere.connections.load(std::sync::atomic::Ordering::SeqCst), 0, "the redirect was not followed");
}

#[test]
fn same_origin_redirects_stop_after_three() {
    let peer = Hostile::start(|head| {
        let n: u32 =
            head.split("/hop").nth(1).and_then(|s| s.split('/').next()).and_then(|s| s.parse().ok()).unwrap_or(0);
        redirect_to(format!("/hop{}/repo.git/info/refs?service=git-upload-pack", n + 1))
    });
    let dir = tempfile::tempdir().unwrap();
    let error = git::sync(&anonymous(&peer.url), &dir.path().join("ws")).unwrap_err();
    assert!(error.to_string().contains("more than 3 redirects"), "{error}");
    assert_eq!(peer.connections.load(std::sync::atomic::Ordering::SeqCst), 4);
}

#[test]
fn an_oversized_ref_advertisement_is_cut_off_at_the_limit() {
    let peer = Hostile::start(|_| Answer::Endless { total: 16 << 20 });
    let dir = tempfile::tempdir().unwrap();
    let error = git::sync(&anonymous(&peer.url), &dir.path().join("ws")).unwrap_err();
    assert!(
        matches!(error, GitError::Transport(TransportError::TooLarge { limit, .. }) if limit == 8 << 20),
        "{error:?}"
    );
    assert!(error.to_string().contains("exceeds 8388608 bytes"), "{error}");

    let announced = Hostile::start(|_| {
        Answer::Bytes(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: 999999999\r\n\r\n"
                .to_vec(),
        )
    });
    let error = git::sync(&anonymous(&announced.url), &dir.path().join("ws2")).unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::TooLarge { .. })), "{error:?}");
}

#[test]
fn a_server_that_stalls_mid_response_fails_within_the_read_timeout() {
    let peer = Hostile::start(|_| Answer::Stall);
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits { read_timeout: Duration::from_millis(500), ..Limits::default() };
    let started = Instant::now();
    let error = git::sync_with(&anonymous(&peer.url), &dir.path().join("ws"), &limits).unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::Stalled { .. })), "{error:?}");
    assert!(error.to_string().contains("the server stalled"), "{error}");
    // A hang would never return; this bound only tells a hang from a timeout.
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
}

#[test]
fn a_server_that_is_not_smart_http_is_named() {
    let peer = Hostile::start(|_| {
        Answer::Bytes(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi".to_vec())
    });
    let dir = tempfile::tempdir().unwrap();
    let error = git::sync(&anonymous(&peer.url), &dir.path().join("ws")).unwrap_err();
    assert!(error.to_string().contains("not a smart HTTP git server"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_runs_in_spawn_blocking_inside_a_runtime() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("a.txt", "a\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let clone = tempfile::tempdir().unwrap();
    let (spec, dir) = (remote(&server, "infra", "main", TOKEN), clone.path().join("ws"));
    let head = tokio::task::spawn_blocking(move || git::sync(&spec, &dir)).await.unwrap().unwrap();
    assert_eq!(head.commit, rev_parse(&bare, "main"));
    drop(server);
}

#[test]
fn a_git_workspace_served_by_the_binary_is_ready_once_cloned() {
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("a.txt", "a\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let resources = tempfile::tempdir().unwrap();
    let manifest = format!(
        "apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: infra}}\nspec:\n  source:\n    git:\n      \
         url: {}/infra.git\n      ref: main\n      auth: {{token: {{env: GITWS_TOKEN}}}}\n---\n\
         apiVersion: akritas.io/v1alpha1\nkind: Workspace\nmetadata: {{name: denied}}\nspec:\n  source:\n    git:\n      \
         url: {}/infra.git\n      auth: {{token: {{env: GITWS_WRONG}}}}\n",
        server.url, server.url
    );
    std::fs::write(resources.path().join("ws.yaml"), manifest).unwrap();
    let mut command = akritas_testkit::serve_command(env!("CARGO_BIN_EXE_akritas"));
    command
        .arg("--resources")
        .arg(resources.path())
        .env("AKRITAS_RESOURCE_ENV", "GITWS_*")
        .env("GITWS_TOKEN", TOKEN)
        .env("GITWS_WRONG", "wrong-token-for-test");
    let host = akritas_testkit::Server::start(command);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let workspace = |name: &'static str| {
        let url = format!("{}/api/v1/resources", host.url);
        async move {
            let body: serde_json::Value = reqwest::get(url).await.ok()?.json().await.ok()?;
            body["resources"].as_array()?.iter().find(|r| r["kind"] == "Workspace" && r["name"] == name).cloned()
        }
    };
    let ready = |report: &serde_json::Value, status: &str| {
        report["conditions"].as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == status))
    };
    let (report, _) = runtime
        .block_on(akritas_testkit::poll(Duration::from_secs(30), || async {
            workspace("infra").await.filter(|r| ready(r, "True"))
        }))
        .unwrap_or_else(|| panic!("workspace never Ready; log:\n{}", host.log_text()));
    let checked = report["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Checked").unwrap();
    assert_eq!(checked["reason"], "Cloned", "{report}");
    assert!(checked["message"].as_str().unwrap().contains(&rev_parse(&bare, "main")), "{report}");

    let (denied, _) = runtime
        .block_on(akritas_testkit::poll(Duration::from_secs(30), || async {
            workspace("denied").await.filter(|r| r.to_string().contains("CloneFailed"))
        }))
        .unwrap_or_else(|| panic!("denied workspace never failed; log:\n{}", host.log_text()));
    assert!(ready(&denied, "False"), "{denied}");
    let text = denied.to_string();
    assert!(text.contains("HTTP 401") && !text.contains("wrong-token-for-test"), "{text}");
    assert!(!host.log_text().contains(TOKEN) && !host.log_text().contains("wrong-token-for-test"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manager_clones_fetches_on_demand_and_keeps_the_checkout_when_a_fetch_fails() {
    use akritas::app::workspaces::Workspaces;
    use akritas::catalog::readiness::Needs;
    use akritas::catalog::secrets::EnvSecrets;
    use akritas::catalog::status::{BoardSnapshot, InForce, ResourceReport, StatusBoard};
    use akritas::catalog::{CatalogStore, Entry, ObjectKey};
    use akritas::resources::Kind;
    use std::sync::Arc;

    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "infra", &[("a.txt", "one\n")]);
    let server = GitServer::start(root.path(), TOKEN);
    let manifest = serde_json::json!({
        "apiVersion": "akritas.io/v1alpha1", "kind": "Workspace",
        "metadata": {"name": "infra", "namespace": "ops"},
        "spec": {"source": {"git": {"url": format!("{}/infra.git", server.url),
                                    "auth": {"token": {"env": "AKRITAS_GIT_TOKEN"}}}}},
    });
    let resource = Arc::new(akritas::resources::validate::parse_manifest(manifest).unwrap());
    let key = ObjectKey { kind: Kind::Workspace, namespace: "ops".into(), name: "infra".into() };
    let board = StatusBoard::default();
    board.set(BoardSnapshot {
        resources: vec![ResourceReport {
            key: key.clone(),
            source: "test".into(),
            in_force: InForce::Current,
            conditions: Vec::new(),
            spec: None,
            errors: Vec::new(),
            needs: Needs::of(&resource),
        }],
        ..BoardSnapshot::default()
    });
    // What the discovered-facts task reports for the token reference in the host.
    board.set_secrets(&key, Some(Ok(())));
    let condition = |board: &StatusBoard, type_: &str| {
        let snapshot = board.get();
        let found = snapshot.resources[0].conditions.iter().find(|c| c.type_ == type_).cloned();
        found.map(|c| (format!("{:?}", c.status), c.reason, c.message)).unwrap_or_default()
    };
    let store = CatalogStore::new();
    let entry = Entry { resource, source: "test".into(), base_dir: None };
    store.publish([(key.clone(), entry)].into_iter().collect(), Default::default());
    let data = tempfile::tempdir().unwrap();
    let secrets =
        Arc::new(EnvSecrets::with_lookup(|name: &str| (name == "AKRITAS_GIT_TOKEN").then(|| TOKEN.to_string())));
    let policy = akritas::catalog::policy::ResourcePolicy { data_dir: data.path().to_path_buf(), ..Default::default() };
    let workspaces = Workspaces::new(data.path().to_path_buf(), secrets, board.clone(), Arc::new(policy));
    let cancel = tokio_util::sync::CancellationToken::new();
    let (_secrets_tx, secrets_rx) = tokio::sync::watch::channel(0);
    let running = tokio::spawn(workspaces.clone().run(store.clone(), secrets_rx, cancel.clone()));

    let (local, _) = akritas_testkit::poll(Duration::from_secs(30), || async {
        workspaces.local("ops", "infra").filter(|l| l.head.is_some())
    })
    .await
    .expect("the workspace is cloned");
    assert_eq!(local.dir, data.path().join("workspaces/ops/infra"));
    assert_eq!(local.head.as_ref().unwrap().commit, rev_parse(&bare, "main"));
    let credentials = local.remote.as_ref().and_then(|r| r.credentials.as_ref()).expect("credentials resolved");
    assert_eq!(credentials.token, TOKEN);
    assert!(!format!("{local:?}").contains(TOKEN), "Debug of a workspace hides the token");
    assert_eq!(condition(&board, "Ready").0, "True");
    assert_eq!(condition(&board, "Checked").1, "Cloned");

    let second = commit_files(&bare, "main", &[("a.txt", "two\n")], "second");
    let head = workspaces.fetch_now("ops", "infra").await.unwrap();
    assert_eq!(head.commit, second);
    assert_eq!(std::fs::read_to_string(local.dir.join("a.txt")).unwrap(), "two\n");
    let facts: WorkspaceStatus = board.facts_of(&key).unwrap();
    assert_eq!(facts.head_commit.as_deref(), Some(second.as_str()));
    assert!(facts.last_fetch.is_some() && facts.last_error.is_none(), "{facts:?}");

    drop(server);
    let error = workspaces.fetch_now("ops", "infra").await.unwrap_err();
    assert!(matches!(error, GitError::Transport(TransportError::Unreachable { .. })), "{error:?}");
    let facts: WorkspaceStatus = board.facts_of(&key).unwrap();
    assert_eq!(facts.head_commit.as_deref(), Some(second.as_str()), "the previous checkout stays in use");
    assert!(facts.last_error.as_deref().unwrap().contains("cannot reach"), "{facts:?}");
    assert_eq!(condition(&board, "Ready").0, "True", "a fetch failure after a clone keeps the workspace usable");
    let (status, reason, message) = condition(&board, "Checked");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "FetchFailed"));
    assert!(message.contains("cannot reach"), "{message}");
    assert_eq!(workspaces.local("ops", "infra").unwrap().head.unwrap().commit, second);
    assert!(workspaces.fetch_now("ops", "nothing").await.is_err());

    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(30), running).await.unwrap().unwrap();
}
