//! The embedded web UI: page weight (bytes of the page and every asset, and their gzip
//! size as `tests/clients/ui.mjs --bench` measures it) and time to interactive in headless
//! Chromium (median of cold loads until the app's `akritas-ready` performance mark: the
//! header is built and the first view rendered). Prints numbers; asserts nothing about speed.

use std::process::Command;

use akritas::web::auth::ApiKeys;
use akritas::web::ui::{ASSETS, INDEX};
use akritas_testkit::host;
use akritas_testkit::scripted_llm::ScriptedLlm;

const LOADS: usize = 25;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let mut total = 0;
    for asset in std::iter::once(&INDEX).chain(ASSETS.iter()) {
        println!("{:>14} {:>7} bytes", asset.name, asset.body.len());
        total += asset.body.len();
    }
    println!("{:>14} {total:>7} bytes (HTML + CSS + JS, uncompressed)", "total");

    let llm = ScriptedLlm::start(vec![]).await;
    let catalog = host::catalog_from(&akritas_testkit::root().join("config/samples"));
    let (tools, _) = host::standard_tools();
    let engine = host::engine(&llm, host::settings(), tools, catalog.clone(), None, None);
    let server = host::serve(engine, catalog, ApiKeys::default()).await;
    let url = server.url.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(akritas_testkit::root().join("tests/clients/ui.mjs"))
            .args(["--bench", &url, &LOADS.to_string()])
            .env("NODE_PATH", akritas_testkit::clients::node_modules())
            .env("AKRITAS_TEST_CHROMIUM", akritas_testkit::clients::chromium())
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    print!("{}", String::from_utf8_lossy(&output.stdout));
    assert!(output.status.success(), "the bench script failed: {}", String::from_utf8_lossy(&output.stderr));
}
