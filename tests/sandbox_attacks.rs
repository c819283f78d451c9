//! Attacks on the validator sandbox through the real `akritas serve` binary: a chat key asks
//! for a change preview, the scripted model writes `attack.sh` into the change, and the
//! Workspace's ValidatorProfile runs it (`sh attack.sh`). Each attack runs twice where the
//! test runs as root: with the host as root, and with the host as an unprivileged uid that
//! owns its data, resource and workspace directories (the chart's way); and each of those
//! under both confinements, `validator_sandbox: namespaces` and `landlock`. The
//! PostgreSQL-on-a-local-socket attack is in the e2e tier (`sandbox_postgres`).

use akritas_testkit as support;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::Value;
use support::attack::{self, DEV_KEY, Identity, PLATFORM_KEY, TEAM_B_KEY, Target};

const BIN: &str = env!("CARGO_BIN_EXE_akritas");

fn output(body: &Value) -> &str {
    attack::validator(body)["output"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_cannot_connect_to_a_hosts_unix_socket_or_list_sockets_over_netlink() {
    for (identity, mode) in attack::setups() {
        let target = Target::new(identity, mode);
        let (listener, path) = target.host_socket();
        let script = format!(
            "python3 - <<'EOF'\nimport socket\n\
             try:\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect({path:?}); print('unix connected')\n\
             except OSError as e: print('unix errno', e.errno)\n\
             try:\n    s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4); print('sock_diag opened')\n\
             except OSError as e: print('netlink errno', e.errno)\n\
             try:\n    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0); print('packet opened')\n\
             except OSError as e: print('packet errno', e.errno)\n\
             a, b = socket.socketpair(); a.send(b'x'); print('socketpair', b.recv(1))\nEOF\n"
        );
        let (server, _llm) = target.start(BIN, &script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        let out = output(&body);
        assert!(out.contains("unix errno 13"), "{identity:?}/{mode}: {out}");
        assert!(out.contains("netlink errno 13"), "{identity:?}/{mode}: {out}");
        assert!(out.contains("packet errno 13"), "{identity:?}/{mode}: {out}");
        // What connects a program to itself still works.
        assert!(out.contains("socketpair b'x'"), "{identity:?}/{mode}: {out}");
        assert!(
            matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "{identity:?}/{mode}: a validator connected to the host's socket"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_nesting_directories_deeper_than_a_stack_does_not_take_the_host_down() {
    // Each level costs the validator a walk up the tree under Landlock, so the slowest attack
    // runs twice, not four times: every identity and every mode once.
    let setups = attack::setups();
    let setups = [setups[0], setups[setups.len() - 1]];
    for (identity, mode) in setups {
        let target = Target::new(identity, mode);
        // However deep it gets before its timeout on a busy machine, the tree is far past
        // what the host accepts; it usually reaches all 15,000 levels.
        target.declare("default", "app", &target.workspace.clone(), &[], 90);
        let script =
            "python3 -c \"import os\nfor i in range(15000):\n    os.mkdir('d'); os.chdir('d')\nprint('nested')\"\n";
        let (server, _llm) = target.start(BIN, script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        let result = attack::validator(&body);
        assert_eq!(result["status"], "failed", "{identity:?}/{mode}: {result}");
        assert!(output(&body).contains("directories deeper than 256 levels"), "{identity:?}/{mode}: {result}");
        // The copy is gone before the answer, and the host is still there.
        assert_eq!(target.leftovers(), Vec::<String>::new(), "{identity:?}/{mode}");
        let (status, _) = attack::get(&server.url, "/health").await;
        assert_eq!(status, 200, "{identity:?}/{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_cannot_change_modes_owners_or_times_of_the_hosts_data_directory() {
    for (identity, mode) in attack::setups() {
        let target = Target::new(identity, mode);
        let data = target.data.display().to_string();
        let script = format!(
            "chmod 000 {data} {data}/audit; chown 0:0 {data}; touch -d 2001-01-01 {data}/audit; \
             python3 -c \"import os\ntry:\n    os.chmod('{data}', 0)\nexcept OSError as e: print('chmod errno', e.errno)\"; \
             chmod 600 app.yaml || echo chmod in the copy refused too; echo end\n"
        );
        let (server, _llm) = target.start(BIN, &script).await;
        let before = std::fs::metadata(&target.data).unwrap();
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        let out = output(&body);
        assert!(out.contains("chmod errno 1"), "{identity:?}/{mode}: {out}");
        assert!(out.contains("chmod in the copy refused too"), "{identity:?}/{mode}: {out}");
        let after = std::fs::metadata(&target.data).unwrap();
        assert_eq!(after.permissions().mode(), before.permissions().mode(), "{identity:?}/{mode}: {out}");
        let audit = std::fs::metadata(target.data.join("audit")).unwrap();
        assert_ne!(audit.permissions().mode() & 0o777, 0, "{identity:?}/{mode}: {out}");
        assert!(std::os::unix::fs::MetadataExt::mtime(&audit) > 978_307_200, "{identity:?}/{mode}: the time was set");
        // The host starts again on its data directory.
        assert_eq!(server.terminate(), Some(0), "{identity:?}/{mode}");
        let (server, _llm) = target.start(BIN, "echo fine\n").await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_cannot_read_akritas_resources_or_configuration_under_a_read_path() {
    for (identity, mode) in attack::setups() {
        let mut target = Target::new(identity, mode);
        let etc = target.resources_under_a_read_path();
        let resources = target.resources.clone();
        std::fs::write(etc.join("tool.conf"), "readable\n").unwrap();
        let receiver = "apiVersion: akritas.io/v1alpha1\nkind: NotificationReceiver\nmetadata:\n  name: team-a-hook\n  \
                        namespace: team-a\nspec:\n  webhook:\n    url: https://hooks.example.com/services/T0/secret-hook-9c3e\n";
        std::fs::write(resources.join("team-a.yaml"), receiver).unwrap();
        let script = format!(
            "cat {etc}/tool.conf; cat {resources}/team-a.yaml; ls {etc}/akritas; grep -r secret-hook {etc}; echo end\n",
            etc = etc.display(),
            resources = resources.display()
        );
        let (server, _llm) = target.start(BIN, &script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        let out = output(&body);
        assert!(out.contains("readable\n"), "{identity:?}/{mode}: the rest of the read path stays readable: {out}");
        assert!(!out.contains("secret-hook-9c3e"), "{identity:?}/{mode}: {out}");
        // Under Landlock it is there but denied; in namespaces it does not exist at all.
        assert!(
            out.contains("Permission denied") || out.contains("No such file or directory"),
            "{identity:?}/{mode}: {out}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_landlock_abi_6_validators_do_not_run_unless_weak_landlock_is_allowed() {
    for identity in Identity::all() {
        let mut target = Target::new(identity, "landlock");
        target.env.push(("AKRITAS_VALIDATOR_SANDBOX_LANDLOCK_ABI_MAX".into(), "5".into()));
        let (server, _llm) = target.start_with(BIN, vec!["echo ran\n".into()]).await;
        let refused = support::wait_for("the ValidatorProfile's refusal", Duration::from_secs(60), || async {
            let (_, body) = attack::get(&server.url, "/api/v1/resources").await;
            let profile = body["resources"].as_array()?.iter().find(|r| r["kind"] == "ValidatorProfile")?.clone();
            let ready = profile["conditions"].as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
            (ready["status"] == "False").then_some(ready)
        })
        .await;
        assert!(refused["message"].as_str().unwrap().contains("Landlock ABI 5 is below the 6"), "{refused}");
        let (_, health) = attack::get(&server.url, "/health").await;
        let sandbox = health["validator_sandbox"].as_str().unwrap_or_default().to_string();
        assert!(sandbox.starts_with("unavailable: Landlock ABI 5"), "{identity:?}: {health}");
        let (_, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert!(output(&body).starts_with("validators cannot run: Landlock ABI 5"), "{identity:?}: {body}");
        drop(server);

        // Allowed explicitly: it runs, the status says what is lost, and a validator that
        // kills its supervisor does not keep the preview open.
        target.env.push(("AKRITAS_VALIDATOR_SANDBOX_ALLOW_WEAK_LANDLOCK".into(), "true".into()));
        target.declare("default", "app", &target.workspace.clone(), &[], 3);
        let script = "setsid sleep 120 & kill -9 $PPID; echo supervisor killed; sleep 120\n";
        let (server, _llm) = target.start(BIN, script).await;
        let (_, resources) = attack::get(&server.url, "/api/v1/resources").await;
        let profile = resources["resources"].as_array().unwrap().iter().find(|r| r["kind"] == "ValidatorProfile");
        let said = profile.unwrap()["status"]["sandbox"].as_str().unwrap_or_default().to_string();
        assert!(said.contains("landlock ABI 5") && said.contains("signals are not scoped"), "{said}");
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}: {body}");
        assert_eq!(attack::validator(&body)["status"], "failed", "{identity:?}: {body}");
        assert!(output(&body).contains("supervisor killed"), "{identity:?}: {body}");
        if identity == Identity::Own && unsafe { libc::geteuid() } == 0 {
            // A root host kills the tree itself (its fresh user, its cgroup).
            support::wait_for("the tree to be gone", Duration::from_secs(30), || async {
                target.validator_processes().is_empty().then_some(())
            })
            .await;
        }
        for pid in target.validator_processes() {
            // The loss the status names: nothing kills an unprivileged host's survivors.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn below_landlock_abi_3_a_validator_cannot_truncate_a_data_file() {
    for identity in Identity::all() {
        let mut target = Target::new(identity, "landlock");
        target.env.push(("AKRITAS_VALIDATOR_SANDBOX_LANDLOCK_ABI_MAX".into(), "2".into()));
        target.env.push(("AKRITAS_VALIDATOR_SANDBOX_ALLOW_WEAK_LANDLOCK".into(), "true".into()));
        std::fs::write(target.data.join("keep.json"), "{\"kept\":true}\n").unwrap();
        let script = format!(
            "python3 -c \"import os\ntry:\n    os.truncate('{}', 0); print('truncated')\nexcept OSError as e: print('truncate errno', e.errno)\"\n",
            target.data.join("keep.json").display()
        );
        let (server, _llm) = target.start(BIN, &script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}: {body}");
        assert!(output(&body).contains("truncate errno"), "{identity:?}: {body}");
        assert_eq!(std::fs::read_to_string(target.data.join("keep.json")).unwrap(), "{\"kept\":true}\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_preview_kills_its_validator_tree_and_frees_its_slot_only_then() {
    for (identity, mode) in attack::setups() {
        let target = Target::new(identity, mode);
        target.declare("default", "app", &target.workspace.clone(), &[], 300);
        let scripts = vec!["setsid sleep 600 & sleep 600\n".to_string(), "echo second\n".to_string()];
        let (server, _llm) = target.start_with(BIN, scripts).await;
        attack::wait_ready(&server.url).await;
        let url = server.url.clone();
        let first = tokio::spawn(async move { attack::preview(&url, DEV_KEY, None, "app").await });
        support::wait_for("the validator to start", Duration::from_secs(60), || async {
            (target.validator_processes().len() >= 2).then_some(())
        })
        .await;
        // The client goes away.
        first.abort();
        support::wait_for("the abandoned validator's tree to be killed", Duration::from_secs(60), || async {
            target.validator_processes().is_empty().then_some(())
        })
        .await;
        // The namespace's one preview slot is free again, and the copy is gone.
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        assert!(output(&body).contains("second"), "{identity:?}/{mode}: {body}");
        assert_eq!(target.leftovers(), Vec::<String>::new(), "{identity:?}/{mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_previewing_a_shared_workspace_gets_none_of_its_validator_environment() {
    let mut target = Target::new(Identity::Own, "landlock");
    let value = "platform-value-7d2e";
    target.env.extend([
        ("AKRITAS_SHARED_NAMESPACES".into(), "platform".into()),
        ("AKRITAS_VALIDATOR_ENV".into(), "platform/PLATFORM_SETTING".into()),
        ("PLATFORM_SETTING".into(), value.into()),
    ]);
    let tree = target.root().join("workspaces/infra");
    support::copy_dir(&target.workspace, &tree);
    target.declare("platform", "infra", &tree, &["PLATFORM_SETTING"], 30);
    let (server, _llm) = target.start(BIN, "echo \"setting is $PLATFORM_SETTING\"\n").await;

    // Team B may preview the shared Workspace, but not with the platform's variable.
    let (status, body) = attack::preview(&server.url, TEAM_B_KEY, Some("platform"), "infra").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(attack::validator(&body)["status"], "failed", "{body}");
    assert!(
        output(&body).contains("\"PLATFORM_SETTING\" may not be passed to validators of namespace team-b"),
        "{body}"
    );
    assert!(!body.to_string().contains(value), "{body}");

    // The platform's own preview gets it, and the value is masked in the answer, the
    // audit and the approval.
    let (status, body) = attack::preview(&server.url, PLATFORM_KEY, None, "infra").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(attack::validator(&body)["status"], "passed", "{body}");
    assert!(output(&body).contains("setting is [redacted]"), "{body}");
    assert!(!body.to_string().contains(value), "{body}");
    for file in support::files_under(&target.data) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        assert!(!text.contains(value), "{} holds the value", file.display());
    }
    assert!(!server.log_text().contains(value), "the log holds the value");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_in_namespaces_sees_only_a_read_only_view_and_its_own_processes() {
    for identity in Identity::all() {
        let target = Target::new(identity, "namespaces");
        let script = format!(
            "ls /; echo uid $(id -u); ls /proc | grep -c '^[0-9]'; touch /usr/escaped || echo usr read-only; \
             ls {data} || echo data directory absent; kill -9 1 || echo init unreachable; echo end\n",
            data = target.data.display()
        );
        let (server, _llm) = target.start(BIN, &script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}: {body}");
        let out = output(&body);
        // The root holds the system directories, the devices, /proc, /tmp and the way to
        // the copy, nothing of the host's own.
        let top: Vec<&str> = out.lines().take_while(|l| !l.starts_with("uid ")).collect();
        for name in &top {
            let allowed = ["bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "sbin", "tmp", "usr"];
            assert!(allowed.contains(name), "{identity:?}: /{name} is in the view: {out}");
        }
        assert!(out.contains("uid 0\n"), "{identity:?}: uid 0 of its own user namespace, without capabilities: {out}");
        assert!(out.contains("usr read-only"), "{identity:?}: {out}");
        assert!(out.contains("data directory absent"), "{identity:?}: {out}");
        assert!(out.contains("init unreachable"), "{identity:?}: {out}");
        assert!(out.ends_with("end\n"), "{identity:?}: {out}");
        assert!(!std::path::Path::new("/usr/escaped").exists());
    }
}
