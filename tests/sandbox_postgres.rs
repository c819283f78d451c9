//! The validator sandbox against a real PostgreSQL on a local socket (trust authentication,
//! the socket connectable by every local user, as a Debian cluster's is to its peers), which
//! is also the host's own database: the attack of `tests/sandbox_attacks.rs` with the
//! service's store at stake. With the host as root and as the uid that owns the cluster and
//! its socket, each in namespaces and under Landlock alone.

use akritas_testkit as support;

use support::attack::{self, DEV_KEY, Identity, Target};
use support::postgres::Postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validator_cannot_log_into_the_hosts_postgresql_over_its_local_socket() {
    let pg = Postgres::start();
    // As the usual Debian setup has it: the host runs as the uid that owns the cluster's
    // socket (its `postgres` user here), and as root.
    let owner = std::process::Command::new("id").args(["-u", "postgres"]).output().expect("id runs");
    let owner: u32 = String::from_utf8_lossy(&owner.stdout).trim().parse().expect("a postgres user");
    let identities = [Identity::Own, Identity::User(owner)];
    let setups = identities.into_iter().flat_map(|identity| attack::MODES.map(|mode| (identity, mode)));
    for (n, (identity, mode)) in setups.enumerate() {
        let mut target = Target::new(identity, mode);
        target.env.push(("AKRITAS_STORAGE_BACKEND".into(), "postgres".into()));
        target.env.push(("AKRITAS_DATABASE_URL".into(), pg.url("disable")));
        let script = format!(
            "{psql} -h {socket} -p {port} -U akritas -d postgres -tAc 'create table pwned_{n} (x int); select 1' 2>&1; echo end\n",
            psql = pg.psql_program().display(),
            socket = pg.socket_dir().display(),
            port = pg.port,
        );
        let (server, _llm) = target.start(env!("CARGO_BIN_EXE_akritas"), &script).await;
        let (status, body) = attack::preview(&server.url, DEV_KEY, None, "app").await;
        assert_eq!(status, 200, "{identity:?}/{mode}: {body}");
        let output = attack::validator(&body)["output"].as_str().unwrap_or_default().to_string();
        assert!(output.contains("Permission denied"), "{identity:?}/{mode}: {output}");
        assert!(output.ends_with("end\n"), "{identity:?}/{mode}: {output}");
        let tables = pg.psql("select count(*) from pg_tables where tablename like 'pwned%'");
        assert_eq!(tables, "0", "{identity:?}/{mode}: the validator created a table: {output}");
    }
}
