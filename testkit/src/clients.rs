//! Locating the third-party clients `e2e/install-test-deps.sh` installs: the Python venv
//! (`openai`, `mcp`, `schemathesis`), `playwright-core` and Debian's Chromium.

use std::path::PathBuf;

const INSTALL: &str = "run e2e/install-test-deps.sh from the repository root";

/// The venv's Python (`target/py/bin/python`, or `$AKRITAS_TEST_PYTHON`).
pub fn python() -> PathBuf {
    let path = std::env::var_os("AKRITAS_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::root().join("target/py/bin/python"));
    assert!(path.is_file(), "the test Python venv is missing at {}: {INSTALL}", path.display());
    path
}

/// The `node_modules` directory holding `playwright-core` (`target/npm/node_modules`).
pub fn node_modules() -> PathBuf {
    let path = crate::root().join("target/npm/node_modules");
    assert!(path.join("playwright-core/package.json").is_file(), "playwright-core is not installed: {INSTALL}");
    path
}

/// Debian's Chromium (`/usr/bin/chromium`, or `$AKRITAS_TEST_CHROMIUM`).
pub fn chromium() -> PathBuf {
    let path = std::env::var_os("AKRITAS_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    assert!(path.is_file(), "Chromium is not installed at {}: {INSTALL}", path.display());
    path
}
