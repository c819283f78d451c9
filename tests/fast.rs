//! The fast tier: every integration test that needs nothing but this crate, git and python3 (a
//! validator command in the sandbox tests). No Alertmanager, Prometheus, VictoriaMetrics, Kubernetes
//! binaries, Node, Chromium, Python clients or model servers: `cargo test` runs it on a bare
//! machine. One binary links the crate once; each file below is a module, named as before.
//! `tiers.rs` (a module here) fails when a module of this tier reaches a harness that
//! starts a third-party program.

mod alert_admission;
mod alert_backoff;
mod alert_contract;
mod alert_fair_share;
mod alert_groups;
mod alert_ingress;
mod alert_signatures;
mod alert_storage;
mod alert_tenancy;
mod alert_worker;
mod ask_cli;
mod audit_contract;
mod audit_integrity;
mod audit_journal;
mod audit_keyed;
mod audit_storage;
mod bad_input;
mod bot_gateway;
mod bot_providers;
mod chat_api;
mod closed_stdout;
mod context_fit;
mod crash_recovery;
mod crds;
mod eval_suite;
mod git_workspace;
mod golden_flow;
mod http_edge;
mod http_router;
mod incident_threads;
mod knowledge_bases;
mod knowledge_cli;
mod layers;
mod llm_client;
mod model_servers;
mod notify_delivery;
mod packaging;
mod release_layout;
mod release_sbom;
mod resource_policy;
mod resource_rules;
mod resource_watch;
mod run_budget;
mod run_replay;
mod sandbox_attacks;
mod schedules;
mod serve_http;
mod short_urls;
mod slack_providers;
mod storage_compat;
mod tenancy;
mod tiers;
mod validate_cli;
mod validator_sandbox;
