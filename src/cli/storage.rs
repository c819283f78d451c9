//! `akritas storage migrate`: moves a data directory's stores into the shared database.

use super::stdout::outln;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use crate::config::{self, ServeFlags};

/// `storage` arguments.
#[derive(Args, Debug)]
pub(crate) struct StorageArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: StorageCommand,
}

/// Where stores can go.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum Backend {
    /// The PostgreSQL database of `database_url_env`.
    Postgres,
    /// Journals in `data_dir`.
    Embedded,
}

/// Storage subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum StorageCommand {
    /// `--to postgres`: copy the embedded journals of `data_dir` (audit, alerts, change
    /// approvals, bot sessions) into the PostgreSQL database named by `database_url_env`,
    /// verbatim, then verify every chain there. `--to embedded`: write the database's stores
    /// back as journals in `data_dir` (a backup, or a return to one replica). Resumable and
    /// idempotent: run it again after an interruption. Stop every `serve` of the data
    /// directory and of the database first.
    Migrate {
        /// The backend to copy into.
        #[arg(long, value_enum)]
        to: Backend,
        /// The service configuration, as for `serve` (`data_dir`, `database_url_env`, …).
        #[command(flatten)]
        flags: Box<ServeFlags>,
    },
}

/// Runs a storage subcommand.
pub(crate) fn run(args: StorageArgs) -> ExitCode {
    let StorageCommand::Migrate { to, flags } = args.command;
    let fail = |message: String| {
        eprintln!("akritas storage migrate: {}", crate::redact::redact(&message));
        ExitCode::FAILURE
    };
    let settings = match config::load(&flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => return fail(error.to_string()),
    };
    crate::app::policy::register_service_secrets(&settings, &|name| std::env::var(name).ok());
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(format!("cannot start the async runtime: {error}")),
    };
    let moved = runtime.block_on(async {
        let db = crate::app::storage::connect(&settings)?;
        let migrated = db.migrate().await?;
        if migrated.from != migrated.to {
            outln!("database schema migrated from version {} to {}", migrated.from, migrated.to);
        }
        let mut progress = |store: &crate::app::migrate::Moved| outln!("{store}");
        match to {
            Backend::Postgres => crate::app::migrate::to_database(&settings, &db, &mut progress).await,
            Backend::Embedded => crate::app::migrate::to_journals(&settings, &db, &mut progress).await,
        }
    });
    match moved {
        Ok(moved) => {
            let copied: u64 = moved.iter().map(|m| m.copied).sum();
            let records: u64 = moved.iter().map(|m| m.records).sum();
            outln!("done: {copied} record(s) copied; {records} record(s) in {} store(s) verified", moved.len());
            ExitCode::SUCCESS
        }
        Err(error) => fail(format!("{error:#}")),
    }
}
