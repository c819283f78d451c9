//! A real PostgreSQL server for integration tests (Debian package `postgresql`).
//!
//! The server programs are looked up in `$POSTGRES_BIN_DIR`, then the newest
//! `/usr/lib/postgresql/*/bin`. A missing server FAILS the test (nothing is skipped). As root
//! the cluster is made and run as the `postgres` user, which refuses to run as root. Each
//! [`Postgres`] is its own cluster in a temporary directory, on a free loopback port, stopped
//! on drop; [`Postgres::start_tls`] also serves TLS with a certificate of a fresh CA.
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A running PostgreSQL cluster; stopped on drop.
pub struct Postgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
    /// The CA that signed the server's certificate (PEM), when it serves TLS.
    pub ca_pem: Option<Vec<u8>>,
}

fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("POSTGRES_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("pg_ctl").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server in /usr/lib/postgresql/*/bin; install the Debian package: \
             `apt-get install -y postgresql` (or set POSTGRES_BIN_DIR)"
        )
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `program args…` as the cluster's owner (`postgres` when this process is root).
fn run_as_owner(program: &Path, args: &[&str]) -> Output {
    let output = if is_root() {
        let mut line = shell_quote(&program.display().to_string());
        for arg in args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        Command::new("su").args(["postgres", "-s", "/bin/sh", "-c", &line]).stdin(Stdio::null()).output()
    } else {
        Command::new(program).args(args).stdin(Stdio::null()).output()
    };
    output.unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn give_to_owner(path: &Path) {
    if is_root() {
        let status = Command::new("chown").args(["-R", "postgres:postgres"]).arg(path).status().expect("chown");
        assert!(status.success(), "chown {}", path.display());
    }
}

impl Postgres {
    /// Starts a new cluster (user `akritas`, trust authentication) on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// As [`Postgres::start`], also serving TLS with a certificate for `localhost` and
    /// `127.0.0.1` signed by a fresh CA ([`Postgres::ca_pem`]).
    pub fn start_tls() -> Self {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> Self {
        let bin = bin_dir();
        let dir = tempfile::Builder::new().prefix("akritas-pg").tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        give_to_owner(dir.path());
        let data = dir.path().join("data");
        let data_arg = data.display().to_string();
        let init = run_as_owner(&bin.join("initdb"), &["-D", &data_arg, "-A", "trust", "-U", "akritas", "--no-sync"]);
        assert!(init.status.success(), "initdb failed: {}", String::from_utf8_lossy(&init.stderr));
        let ca_pem = tls.then(|| make_certificates(dir.path()));
        let mut last = String::new();
        for _attempt in 0..3 {
            let port = crate::free_port();
            let mut options = format!("-p {port} -k {} -c listen_addresses=127.0.0.1", dir.path().display());
            if tls {
                let certs = dir.path().display();
                options.push_str(&format!(
                    " -c ssl=on -c ssl_cert_file={certs}/server.crt -c ssl_key_file={certs}/server.key"
                ));
            }
            let log = dir.path().join("log").display().to_string();
            let started =
                run_as_owner(&bin.join("pg_ctl"), &["-D", &data_arg, "-o", &options, "-l", &log, "-w", "start"]);
            if started.status.success() {
                return Postgres { bin, dir, port, ca_pem };
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
            );
        }
        panic!("PostgreSQL did not start: {last}");
    }

    /// A connection string for the `postgres` database as `akritas` (`sslmode` as given).
    pub fn url(&self, sslmode: &str) -> String {
        format!("host=127.0.0.1 port={} user=akritas dbname=postgres sslmode={sslmode}", self.port)
    }

    /// The directory of the server's Unix socket (`.s.PGSQL.<port>`, trust authentication,
    /// connectable by every local user).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The `psql` client of this server's version.
    pub fn psql_program(&self) -> PathBuf {
        self.bin.join("psql")
    }

    /// Runs `sql` with `psql` and returns what it printed (tuples only, unaligned).
    pub fn psql(&self, sql: &str) -> String {
        let port = self.port.to_string();
        let output = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "akritas",
                "-d",
                "postgres",
                "-tAq",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        assert!(output.status.success(), "psql {sql:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// The server's log so far (what `log_statement` and the server wrote).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Stops the server at once (as a crash would) and starts it again on the same port.
    pub fn restart(&self) {
        self.stop();
        self.start_again();
    }

    /// Stops the server at once, as a crash would.
    pub fn stop(&self) {
        let data = self.dir.path().join("data").display().to_string();
        let stopped = run_as_owner(&self.bin.join("pg_ctl"), &["-D", &data, "-m", "immediate", "stop"]);
        assert!(stopped.status.success(), "pg_ctl stop: {}", String::from_utf8_lossy(&stopped.stderr));
    }

    /// Starts a stopped server again on the same port.
    pub fn start_again(&self) {
        let data = self.dir.path().join("data").display().to_string();
        let mut options = format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        if self.ca_pem.is_some() {
            let certs = self.dir.path().display();
            options.push_str(&format!(
                " -c ssl=on -c ssl_cert_file={certs}/server.crt -c ssl_key_file={certs}/server.key"
            ));
        }
        let log = self.dir.path().join("log").display().to_string();
        let started = run_as_owner(&self.bin.join("pg_ctl"), &["-D", &data, "-o", &options, "-l", &log, "-w", "start"]);
        assert!(started.status.success(), "pg_ctl start: {}", String::from_utf8_lossy(&started.stderr));
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data").display().to_string();
        let _ = run_as_owner(&self.bin.join("pg_ctl"), &["-D", &data, "-m", "immediate", "stop"]);
    }
}

/// Writes `server.crt` and `server.key` (for `localhost` and 127.0.0.1) signed by a new CA into
/// `dir` with openssl, and returns the CA certificate (PEM).
fn make_certificates(dir: &Path) -> Vec<u8> {
    let openssl = |args: &[&str]| {
        let output =
            Command::new("openssl").args(args).current_dir(dir).stdin(Stdio::null()).output().expect("openssl");
        assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=akritas test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").expect("write san.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    ]);
    std::fs::set_permissions(dir.join("server.key"), std::fs::Permissions::from_mode(0o600)).expect("chmod key");
    give_to_owner(dir);
    std::fs::read(dir.join("ca.crt")).expect("read ca.crt")
}
