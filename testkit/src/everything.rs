//! Locating and running the real `@modelcontextprotocol/server-everything` MCP server (npm).

use std::path::PathBuf;
use std::time::Duration;

/// Version the suite is written against.
pub const VERSION: &str = "2026.8.31";

/// Entry JS of server-everything: `$AKRITAS_TEST_EVERYTHING`, else the copy installed under
/// `target/npm`. Panics with install instructions when neither exists.
pub fn entry() -> PathBuf {
    if let Some(path) = std::env::var_os("AKRITAS_TEST_EVERYTHING") {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "AKRITAS_TEST_EVERYTHING={} is not a file", path.display());
        return path;
    }
    let fallback = crate::root().join("target/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        fallback.is_file(),
        "the MCP test server is not installed: run `npm install --prefix target/npm \
         @modelcontextprotocol/server-everything@{VERSION}` in the crate root, or set \
         AKRITAS_TEST_EVERYTHING to the path of its dist/index.js"
    );
    fallback
}

/// The manifest of an McpAdapter `everything` that runs the server over stdio with the
/// namespace `mcp.everything` and its read tools (a YAML document, no `---`).
pub fn adapter_manifest() -> String {
    format!(
        "apiVersion: akritas.io/v1alpha1\nkind: McpAdapter\nmetadata: {{name: everything}}\nspec:\n  transport:\n    \
         stdio:\n      command: {}\n      args: [\"{}\", stdio]\n  namespace: mcp.everything\n  allow: [read]\n",
        node().display(),
        entry().display()
    )
}

/// Absolute path of `node` from PATH (the adapter's child gets no inherited lookup surprises).
pub fn node() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("node"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("`node` (Node.js >= 20) is not on PATH; the MCP tests need it"))
}

/// server-everything in streamable HTTP mode on `port`; killed on drop.
pub struct HttpServer {
    pub child: tokio::process::Child,
    pub port: u16,
}

impl HttpServer {
    pub async fn start(port: u16) -> Self {
        let child = tokio::process::Command::new(node())
            .arg(entry())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "server-everything did not listen on {port}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Self { child, port }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
