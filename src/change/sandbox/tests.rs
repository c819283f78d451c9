use super::*;

fn sandbox() -> Sandbox {
    Sandbox::new(SandboxMode::Landlock, &[], &std::env::temp_dir().join("akritas-sandbox-test-data"))
}

fn request(dir: &Path, argv: &[&str]) -> Request {
    let program = crate::change::validators::resolve(argv[0], std::env::var_os("PATH").as_ref()).unwrap();
    Request {
        program,
        argv: argv.iter().map(|a| a.to_string()).collect(),
        cwd: dir.join("tree"),
        writable: Vec::new(),
        root: dir.to_path_buf(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        timeout: Duration::from_secs(20),
        output_limit: 4096,
    }
}

fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("tree")).unwrap();
    dir
}

#[tokio::test]
async fn exit_codes_signals_and_output_are_reported() {
    let dir = scratch();
    let sandbox = sandbox();
    let outcome = sandbox.run(request(dir.path(), &["sh", "-c", "echo out; echo err >&2; exit 7"])).await.unwrap();
    assert_eq!(outcome.ending, Ending::Exited(7));
    assert_eq!(String::from_utf8_lossy(&outcome.output), "out\nerr\n");
    let outcome = sandbox.run(request(dir.path(), &["sh", "-c", "kill -9 $$"])).await.unwrap();
    assert_eq!(outcome.ending, Ending::Signaled(9));
}

#[tokio::test]
async fn a_program_that_cannot_execute_reports_the_step_and_error() {
    let dir = scratch();
    let mut bad = request(dir.path(), &["sh"]);
    bad.program = dir.path().join("tree/missing");
    let outcome = sandbox().run(bad).await.unwrap();
    assert_eq!(outcome.ending, Ending::NotStarted { step: Step::Exec, errno: libc::ENOENT });
}

#[test]
fn the_data_directory_under_a_read_path_makes_the_sandbox_unavailable() {
    let sandbox = Sandbox::new(SandboxMode::Landlock, &[], Path::new("/etc/akritas-data"));
    let why = sandbox.refusal().expect("refused");
    assert!(why.contains("overlaps the validators' read path /etc"), "{why}");
    // Unconfined, nothing is kept from the data directory anyway.
    let off = Sandbox::new(SandboxMode::Off, &[], Path::new("/etc/akritas-data"));
    assert_eq!(off.availability(), &Availability::Unconfined);
    assert!(off.reaches(Path::new("/nonexistent")));
}

#[test]
fn programs_outside_the_read_paths_are_not_reached() {
    let sandbox = sandbox();
    assert!(sandbox.reaches(Path::new("/bin/sh")));
    assert!(!sandbox.reaches(&std::env::temp_dir().join("x")));
}
