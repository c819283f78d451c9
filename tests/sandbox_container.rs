//! The validator sandbox where the chart runs it: `akritas serve` in a container of the image
//! built from the Dockerfile's runtime stage (`e2e/sandbox-image.sh`, with python3 added as
//! a validator language in a derived image), started as the chart starts the pod: an
//! unprivileged uid, read-only root filesystem, every capability dropped,
//! `no-new-privileges`, podman's default seccomp profile. The attacks of
//! `tests/sandbox_attacks.rs` that matter most there, under both confinements.

use akritas_testkit as support;

use std::os::unix::fs::PermissionsExt;

use support::attack::{self, DEV_KEY, Identity, MODES, Target};

fn target(mode: &str) -> Target {
    let image = attack::sandbox_image(env!("CARGO_BIN_EXE_akritas"));
    let mut target = Target::new(Identity::User(54_321), mode);
    target.container = Some(image.to_string());
    target
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_charts_container_a_validator_reaches_no_socket_no_mode_change_and_no_resource() {
    for mode in MODES {
        let mut target = target(mode);
        let (listener, socket) = target.host_socket();
        target.resources_under_a_read_path();
        let resources = target.resources.clone();
        std::fs::write(resources.join("team-a.txt"), "secret-hook-5b1d\n").unwrap();
        let data = target.data.display().to_string();
        let script = format!(
            "python3 - <<'EOF'\nimport os, socket\n\
             try:\n    s = socket.socket(socket.AF_UNIX); s.connect({socket:?}); print('unix connected')\n\
             except OSError as e: print('unix errno', e.errno)\n\
             try:\n    os.chmod({data:?}, 0); print('chmod done')\n\
             except OSError as e: print('chmod errno', e.errno)\nEOF\n\
             cat {resources}/team-a.txt; echo end\n",
            resources = resources.display()
        );
        let (server, _llm) = target.start(env!("CARGO_BIN_EXE_akritas"), &script).await;
        let (_, health) = attack::get(&server.url, "/health").await;
        let sandbox = health["validator_sandbox"].as_str().unwrap_or_default().to_string();
        assert!(sandbox.contains("seccomp filter"), "{mode}: {sandbox}");
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{mode}: {body}");
        let out = attack::validator(&body)["output"].as_str().unwrap_or_default().to_string();
        assert!(out.contains("unix errno 13"), "{mode}: {out}");
        assert!(out.contains("chmod errno"), "{mode}: {out}");
        assert!(!out.contains("secret-hook-5b1d"), "{mode}: {out}");
        assert!(out.ends_with("end\n"), "{mode}: {out}");
        assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "{mode}");
        assert_ne!(std::fs::metadata(&target.data).unwrap().permissions().mode() & 0o777, 0, "{mode}");
        drop(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_charts_container_an_abandoned_preview_kills_its_validator_tree() {
    for mode in MODES {
        let target = target(mode);
        target.declare("default", "app", &target.workspace.clone(), &[], 300);
        let scripts = vec!["setsid sleep 600 & sleep 600\n".to_string(), "echo second\n".to_string()];
        let (server, _llm) = target.start_with(env!("CARGO_BIN_EXE_akritas"), scripts).await;
        attack::wait_ready(&server.url).await;
        let url = server.url.clone();
        let first = tokio::spawn(async move { attack::preview(&url, DEV_KEY, None, "app").await });
        support::wait_for("the validator to start", std::time::Duration::from_secs(60), || async {
            (target.validator_processes().len() >= 2).then_some(())
        })
        .await;
        first.abort();
        support::wait_for("the tree to be killed", std::time::Duration::from_secs(60), || async {
            target.validator_processes().is_empty().then_some(())
        })
        .await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{mode}: {body}");
        assert_eq!(attack::validator(&body)["status"], "passed", "{mode}: {body}");
    }
}
