//! The e2e tier: tests against real third-party programs (Alertmanager, Prometheus,
//! VictoriaMetrics, etcd and kube-apiserver, helm and kubectl, the MCP reference server on Node,
//! Chromium, the Python clients, schemathesis, amtool, a tmpfs mount, the yamllint validator, PostgreSQL). `e2e/install-test-deps.sh`
//! installs them; a missing one fails its test, nothing is skipped. This target has `test =
//! false`, so plain `cargo test` leaves it out; `cargo test --test e2e` runs it, and the README's
//! test command runs both tiers.

mod alert_e2e;
mod bots_e2e;
mod change_e2e;
mod changes_example;
mod chart;
mod database_alerts;
mod database_audit;
mod database_stores;
mod disk_full;
mod facade_openai;
mod image_e2e;
mod kube_harness;
mod kube_tools_history;
mod kube_tools_status;
mod kubernetes_e2e;
mod mcp_host;
mod mcp_run;
mod mcp_server;
mod openapi_schemathesis;
mod operator_e2e;
mod prometheus_pipeline;
mod readme_tour;
mod replicas_e2e;
mod sandbox_container;
mod sandbox_postgres;
mod schedules_e2e;
mod secret_scan;
mod slack_e2e;
mod victoriametrics;
mod web_ui;
