//! Alert adapters: each provider's webhook body, as Alertmanager, Grafana, Uptime Kuma,
//! Pingdom or any client posts it.

use akritas::alerts::adapters::{DecodeContext, MAX_BODY_BYTES};
use akritas::alerts::{Event, adapter};
use jiff::Timestamp;

use super::harness::{self, Verdict};
use super::mutate::{self, Syntax};

/// `invalid` names the fixtures the adapter must reject as they are (another provider's format).
fn fuzz_adapter(target: &'static str, provider: &'static str, fixtures: &str, invalid: &[&str]) {
    let seeds = harness::seeds(target, &[fixtures], &[".json"], Syntax::Json);
    let adapter = adapter(provider).expect("registered adapter");
    let ctx = DecodeContext {
        source_type: provider,
        source_name: "fuzz-source",
        observed_at: Timestamp::from_second(1_780_000_000).expect("valid time"),
    };
    harness::run(target, mutate::input(seeds.len()), |input| {
        let body = mutate::render(&seeds, input);
        match adapter.decode(&body, &ctx) {
            Ok(_) if mutate::is_unchanged(input) && mutate::seed(&seeds, input).is_named(invalid) => {
                Err(format!("seed {} is accepted", mutate::seed(&seeds, input).name))
            }
            Ok(events) => {
                // Big groups are accepted whole (the store bounds what it keeps); every
                // event still comes from bytes of the body.
                if events.is_empty() || events.len() > body.len() {
                    return Err(format!("{} events accepted from {} bytes", events.len(), body.len()));
                }
                if body.len() > MAX_BODY_BYTES {
                    return Err(format!("a body of {} bytes was accepted", body.len()));
                }
                for event in &events {
                    if event.source.kind != provider || event.source.name != "fuzz-source" {
                        return Err(format!("source taken from the payload: {:?}", event.source));
                    }
                }
                // The store journals events as JSON and replays them at start: they must come back equal.
                let text =
                    serde_json::to_string(&events).map_err(|e| format!("accepted events do not serialize: {e}"))?;
                let back: Vec<Event> =
                    serde_json::from_str(&text).map_err(|e| format!("accepted events do not replay: {e}: {text}"))?;
                if back != events {
                    return Err(format!("accepted events change on replay: {text}"));
                }
                Ok(Verdict::Accepted)
            }
            Err(error) if mutate::is_unchanged(input) && !mutate::seed(&seeds, input).is_named(invalid) => {
                Err(format!("seed {} is rejected: {error}", mutate::seed(&seeds, input).name))
            }
            Err(error) if error.to_string().trim().is_empty() => Err("rejected without a message".into()),
            Err(_) => Ok(Verdict::Rejected),
        }
    });
}

#[test]
fn alertmanager_webhook() {
    fuzz_adapter("alertmanager", "alertmanager", "tests/fixtures/alertmanager", &["post-alerts-v2"]);
}

#[test]
fn grafana_webhook() {
    fuzz_adapter("grafana", "grafana", "tests/fixtures/grafana", &[]);
}

#[test]
fn generic_webhook() {
    fuzz_adapter("generic", "generic", "tests/fixtures/generic", &[]);
}

#[test]
fn uptime_kuma_webhook() {
    fuzz_adapter("uptime_kuma", "uptime-kuma", "tests/fixtures/uptime_kuma", &[]);
}

#[test]
fn pingdom_webhook() {
    fuzz_adapter("pingdom", "pingdom", "tests/fixtures/pingdom", &[]);
}
