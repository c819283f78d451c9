//! The strict, versioned JSON service config file (`--config`).

use akritas::config::{ServeFlags, load};

use super::harness::{self, Verdict};
use super::mutate::{self, Syntax};

#[test]
fn service_config_file() {
    let seeds = harness::seeds("config", &["config/examples"], &[".json"], Syntax::Json);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("akritas.json");
    let flags = ServeFlags { config: Some(path.clone()), ..ServeFlags::default() };
    harness::run("config", mutate::input(seeds.len()), |input| {
        std::fs::write(&path, mutate::render(&seeds, input)).map_err(|e| e.to_string())?;
        match load(&flags, &|_| None) {
            Ok(_) => Ok(Verdict::Accepted),
            Err(error) if mutate::is_unchanged(input) => {
                Err(format!("seed {} is rejected: {error}", mutate::seed(&seeds, input).name))
            }
            Err(error) if !error.to_string().contains("akritas.json") => {
                Err(format!("the error does not name the file: {error}"))
            }
            Err(_) => Ok(Verdict::Rejected),
        }
    });
}
