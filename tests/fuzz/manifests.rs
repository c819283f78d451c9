//! Resource manifests through `akritas validate` (the directory scan every standalone
//! host runs): YAML/JSON documents, identity, schema, CEL rules, typed decoding,
//! semantic and cross-object checks.

use akritas::catalog::directory::{problem_lines, scan};

use super::harness::{self, Verdict};
use super::mutate::{self, Syntax};

#[test]
fn manifests_and_validate() {
    let seeds = harness::seeds("manifests", &["config/samples", "tests/fixtures/broken"], &[".yaml"], Syntax::Yaml);
    let invalid = ["tests/fixtures/broken/"];
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("manifest.yaml");
    let dirs = [dir.path().to_path_buf()];
    harness::run("manifests", mutate::input(seeds.len()), |input| {
        std::fs::write(&file, mutate::render(&seeds, input)).map_err(|e| e.to_string())?;
        let result = scan(&dirs, None);
        let problems = problem_lines(&result);
        if problems.iter().any(|line| line.trim().is_empty() || !line.contains(':')) {
            return Err(format!("a problem without a message: {problems:?}"));
        }
        let valid = result.objects.iter().filter(|o| o.result.is_ok()).count();
        if mutate::is_unchanged(input) {
            let seed = mutate::seed(&seeds, input);
            if seed.is_named(&invalid) == problems.is_empty() {
                return Err(format!("seed {}: unexpected outcome: {problems:?}", seed.name));
            }
        }
        Ok(if problems.is_empty() && valid > 0 { Verdict::Accepted } else { Verdict::Rejected })
    });
}
