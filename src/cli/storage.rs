//! `akritas storage migrate`: moves a data directory's stores into the shared database.

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
}

/// Storage subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum StorageCommand {
    /// Copy the embedded journals of `data_dir` (audit, alerts, change approvals, bot sessions)
    /// into the PostgreSQL database named by `database_url_env`, verbatim, then verify every
    /// chain there. Resumable and idempotent: run it again after an interruption. Stop every
    /// `serve` of the data directory and of the database first.
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
    let StorageCommand::Migrate { to: Backend::Postgres, flags } = args.command;
    let fail = |message: String| {
        eprintln!("akritas storage migrate: {message}");
        ExitCode::FAILURE
    };
    let settings = match config::load(&flags, &|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) => return fail(error.to_string()),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(format!("cannot start the async runtime: {error}")),
    };
    let moved = runtime.block_on(async {
        let db = crate::app::storage::connect(&settings)?;
        let migrated = db.migrate().await?;
        if migrated.from != migrated.to {
            println!("database schema migrated from version {} to {}", migrated.from, migrated.to);
        }
        crate::app::migrate::to_database(&settings, &db, &mut |store| println!("{store}")).await
    });
    match moved {
        Ok(moved) => {
            let copied: u64 = moved.iter().map(|m| m.copied).sum();
            let records: u64 = moved.iter().map(|m| m.records).sum();
            println!("done: {copied} record(s) copied; {records} record(s) in {} store(s) verified", moved.len());
            ExitCode::SUCCESS
        }
        Err(error) => fail(format!("{error:#}")),
    }
}
