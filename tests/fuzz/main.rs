//! Fuzz targets on the stable toolchain: in-process, proptest-driven, structure-aware
//! harnesses for every parser of untrusted input. Each target mutates the
//! seed corpus (the test fixtures and `tests/fixtures/fuzz/<target>/`) and checks its
//! property: no panic, no hang, an accepted input satisfies the parser's bounds and
//! invariants, a rejected one has a typed error with a message, valid seeds stay valid.
//!
//! Smoke run (the default test run): `cargo test --locked --test fuzz`.
//! Long run: `AKRITAS_FUZZ_CASES=200000 AKRITAS_FUZZ_SEED=random cargo test --release
//! --locked --test fuzz -- --nocapture` (docs/benchmarks.md, "Fuzzing").

mod alerts;
mod config;
mod decisions;
mod harness;
mod journal;
mod manifests;
mod mutate;
mod segments;
mod skills;
mod tools;
