//! SKILL.md of the standalone skills directory: front matter, then the same manifest
//! validation as any `Skill` resource.

use akritas::catalog::skills_dir::{MAX_SKILL_BYTES, parse};
use akritas::resources::validate::parse_manifest;

use super::harness::{self, Verdict};
use super::mutate::{self, Seed, Syntax};

fn skill_seeds() -> Vec<Seed> {
    let mut dirs: Vec<_> = std::fs::read_dir(harness::root().join("skills"))
        .expect("skills/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("SKILL.md").is_file())
        .collect();
    dirs.sort();
    let mut seeds: Vec<Seed> = dirs
        .iter()
        .map(|dir| Seed {
            name: dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string(),
            text: std::fs::read_to_string(dir.join("SKILL.md")).expect("SKILL.md"),
            syntax: Syntax::Text,
        })
        .collect();
    // Extra seeds: `<skill name>.md`.
    for mut seed in harness::seeds("skills", &[], &[".md"], Syntax::Text) {
        seed.name = seed.name.rsplit('/').next().unwrap_or_default().trim_end_matches(".md").to_string();
        seeds.push(seed);
    }
    seeds
}

#[test]
fn skill_front_matter() {
    let seeds = skill_seeds();
    harness::run("skills", mutate::input(seeds.len()), |input| {
        let bytes = mutate::render(&seeds, input);
        if bytes.len() as u64 > MAX_SKILL_BYTES {
            // The reader refuses larger files before parsing.
            return Ok(Verdict::Rejected);
        }
        let text = String::from_utf8_lossy(&bytes);
        let seed = mutate::seed(&seeds, input);
        let verdict = match parse(&seed.name, &text) {
            Ok(manifest) => match parse_manifest(manifest) {
                Ok(_) => Verdict::Accepted,
                Err(errors) if errors.is_empty() || errors.iter().any(|e| e.to_string().trim().is_empty()) => {
                    return Err(format!("a rejection without a message: {errors:?}"));
                }
                Err(errors) if mutate::is_unchanged(input) => {
                    return Err(format!("seed {} is invalid: {errors:?}", seed.name));
                }
                Err(_) => Verdict::Rejected,
            },
            Err(message) if message.trim().is_empty() => return Err("a rejection without a message".into()),
            Err(message) if mutate::is_unchanged(input) => {
                return Err(format!("seed {} is rejected: {message}", seed.name));
            }
            Err(_) => Verdict::Rejected,
        };
        Ok(verdict)
    });
}
