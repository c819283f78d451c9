use super::*;
use tokio_util::sync::CancellationToken;

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

fn never() -> CancellationToken {
    CancellationToken::new()
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
    let outcome =
        sandbox.run(request(dir.path(), &["sh", "-c", "echo out; echo err >&2; exit 7"]), &never()).await.unwrap();
    assert_eq!(outcome.ending, Ending::Exited(7));
    assert_eq!(String::from_utf8_lossy(&outcome.output), "out\nerr\n");
    let outcome = sandbox.run(request(dir.path(), &["sh", "-c", "kill -9 $$"]), &never()).await.unwrap();
    assert_eq!(outcome.ending, Ending::Signaled(9));
}

#[tokio::test]
async fn a_program_that_cannot_execute_reports_the_step_and_error() {
    let dir = scratch();
    let mut bad = request(dir.path(), &["sh"]);
    bad.program = dir.path().join("tree/missing");
    let outcome = sandbox().run(bad, &never()).await.unwrap();
    assert_eq!(outcome.ending, Ending::NotStarted { step: Step::Exec, errno: libc::ENOENT });
}

#[test]
fn a_hidden_directory_under_a_read_path_is_carved_out_and_a_read_path_inside_one_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let read = scratch.path().join("read");
    for dir in ["read/a/akritas/resources", "read/a/other", "read/b"] {
        fs::create_dir_all(scratch.path().join(dir)).unwrap();
    }
    fs::write(read.join("a/file"), "x").unwrap();
    std::os::unix::fs::symlink("/", read.join("a/root")).unwrap();
    let hidden = read.join("a/akritas");
    let mut granted = carve(std::slice::from_ref(&read), std::slice::from_ref(&hidden));
    granted.sort();
    assert_eq!(granted, [read.join("a/file"), read.join("a/other"), read.join("b")], "symlinks are left out");
    let sandbox =
        Sandbox::with(Options { read_paths: vec![read.clone()], hidden: vec![hidden.clone()], ..Options::default() });
    assert!(sandbox.refusal().is_none(), "{:?}", sandbox.availability());
    assert!(!sandbox.reaches(&hidden.join("resources")));
    assert!(sandbox.reaches(&read.join("a/file")));
    // A read path inside Akritas's directory cannot be carved: refused.
    let inside = Sandbox::new(SandboxMode::Landlock, &[hidden.join("resources")], &hidden);
    let why = inside.refusal().expect("refused");
    assert!(why.contains("is inside Akritas's own directory"), "{why}");
    // Unconfined, nothing is kept from anything anyway.
    let off = Sandbox::new(SandboxMode::Off, &[], Path::new("/etc"));
    assert_eq!(off.availability(), &Availability::Unconfined);
    assert!(off.reaches(Path::new("/nonexistent")));
}

#[test]
fn below_the_minimum_abi_nothing_runs_unless_weak_landlock_is_allowed_and_then_the_loss_is_said() {
    let weak = |allow| {
        Sandbox::with(Options {
            mode: SandboxMode::Landlock,
            abi_limit: Some(5),
            allow_weak_landlock: allow,
            hidden: vec![std::env::temp_dir().join("akritas-sandbox-test-data")],
            ..Options::default()
        })
    };
    let refused = weak(false);
    let why = refused.refusal().expect("refused below ABI 6");
    assert!(why.contains("Landlock ABI 5 is below the 6 validators need"), "{why}");
    assert!(why.contains("validator_sandbox_allow_weak_landlock: true"), "{why}");
    let allowed = weak(true);
    assert!(allowed.refusal().is_none());
    let described = allowed.describe();
    assert!(described.starts_with("landlock ABI 5"), "{described}");
    assert!(described.contains("signals are not scoped"), "{described}");
    assert!(lost_below_minimum(4).iter().any(|l| l.contains("ioctl on devices")));
    assert!(lost_below_minimum(MIN_ABI).is_empty());
}

#[test]
fn programs_outside_the_read_paths_are_not_reached() {
    let sandbox = sandbox();
    assert!(sandbox.reaches(Path::new("/bin/sh")));
    assert!(!sandbox.reaches(&std::env::temp_dir().join("x")));
}
