//! Entry point: install the TLS provider, parse the command line, dispatch.

use std::process::ExitCode;

fn main() -> ExitCode {
    akritas::install_crypto_provider();
    akritas::cli::run()
}
