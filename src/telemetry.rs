//! Process-wide counters and latency histograms for `/metrics`: what happens at
//! the edges of the host (model calls, tool calls, Runs, notifications, journal
//! fsyncs and replays), recorded where it happens and rendered at scrape time.
//!
//! Label values come from the host (tool names of the registry, receiver keys,
//! outcome codes), never from a model or a caller; the number of series is still
//! bounded ([`MAX_SERIES`]) so that a bug cannot grow memory without limit —
//! what does not fit is counted in `akritas_metric_series_dropped_total`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::Duration;

/// Most series (name + label values) kept across all metrics.
pub const MAX_SERIES: usize = 10_000;

/// Upper bounds (seconds) of the latency histogram buckets.
const BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

/// A family: how it is described at scrape time.
struct Family {
    kind: &'static str,
    help: &'static str,
}

/// Name and label pairs of one series, in the order given.
type SeriesKey = (&'static str, Vec<(&'static str, String)>);

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct Store {
    families: BTreeMap<&'static str, Family>,
    counters: BTreeMap<SeriesKey, f64>,
    gauges: BTreeMap<SeriesKey, f64>,
    /// Gauges rendered as the seconds since the instant stored.
    ages: BTreeMap<SeriesKey, std::time::Instant>,
    histograms: BTreeMap<SeriesKey, Histogram>,
    dropped: u64,
}

impl Store {
    fn series(&self) -> usize {
        self.counters.len() + self.gauges.len() + self.ages.len() + self.histograms.len()
    }

    /// Whether a new series may be added; counts the refusal otherwise.
    fn admit(&mut self, exists: bool) -> bool {
        if exists || self.series() < MAX_SERIES {
            return true;
        }
        self.dropped += 1;
        false
    }
}

/// A set of metrics; the process has one ([`count`], [`set`], [`observe`], [`render`]).
#[derive(Default)]
pub struct Metrics {
    store: Mutex<Store>,
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::default);

/// Adds `by` to a counter of the process.
pub fn count(name: &'static str, help: &'static str, labels: &[(&'static str, &str)], by: f64) {
    GLOBAL.count(name, help, labels, by);
}

/// Sets a gauge of the process.
pub fn set(name: &'static str, help: &'static str, labels: &[(&'static str, &str)], value: f64) {
    GLOBAL.set(name, help, labels, value);
}

/// Restarts a gauge of the process that shows the seconds since now (an age).
pub fn stamp(name: &'static str, help: &'static str, labels: &[(&'static str, &str)]) {
    GLOBAL.stamp(name, help, labels);
}

/// Records one duration in a histogram of the process (seconds).
pub fn observe(name: &'static str, help: &'static str, labels: &[(&'static str, &str)], elapsed: Duration) {
    GLOBAL.observe(name, help, labels, elapsed);
}

/// Appends the process's metrics in the Prometheus text format.
pub fn render(out: &mut String) {
    GLOBAL.render(out);
}

fn key(name: &'static str, labels: &[(&'static str, &str)]) -> SeriesKey {
    (name, labels.iter().map(|(k, v)| (*k, (*v).to_string())).collect())
}

fn describe(store: &mut Store, name: &'static str, kind: &'static str, help: &'static str) {
    store.families.entry(name).or_insert(Family { kind, help });
}

impl Metrics {
    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Adds `by` to a counter.
    pub fn count(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], by: f64) {
        let mut store = self.store();
        describe(&mut store, name, "counter", help);
        let key = key(name, labels);
        let exists = store.counters.contains_key(&key);
        if store.admit(exists) {
            *store.counters.entry(key).or_default() += by;
        }
    }

    /// Sets a gauge.
    pub fn set(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], value: f64) {
        let mut store = self.store();
        describe(&mut store, name, "gauge", help);
        let key = key(name, labels);
        let exists = store.gauges.contains_key(&key);
        if store.admit(exists) {
            store.gauges.insert(key, value);
        }
    }

    /// Restarts a gauge that shows the seconds since now.
    pub fn stamp(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)]) {
        let mut store = self.store();
        describe(&mut store, name, "gauge", help);
        let key = key(name, labels);
        let exists = store.ages.contains_key(&key);
        if store.admit(exists) {
            store.ages.insert(key, std::time::Instant::now());
        }
    }

    /// Records one duration in a histogram (seconds).
    pub fn observe(&self, name: &'static str, help: &'static str, labels: &[(&'static str, &str)], elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let mut store = self.store();
        describe(&mut store, name, "histogram", help);
        let key = key(name, labels);
        let exists = store.histograms.contains_key(&key);
        if !store.admit(exists) {
            return;
        }
        let histogram = store.histograms.entry(key).or_default();
        for (bucket, bound) in histogram.buckets.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        histogram.count += 1;
        histogram.sum += seconds;
    }

    /// Appends every recorded family in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let store = self.store();
        for (name, family) in &store.families {
            let _ = writeln!(out, "# HELP {name} {}\n# TYPE {name} {}", family.help, family.kind);
            for ((_, labels), value) in store.counters.range((*name, Vec::new())..).take_while(|((n, _), _)| n == name)
            {
                let _ = writeln!(out, "{name}{} {value}", labels_text(labels, None));
            }
            for ((_, labels), value) in store.gauges.range((*name, Vec::new())..).take_while(|((n, _), _)| n == name) {
                let _ = writeln!(out, "{name}{} {value}", labels_text(labels, None));
            }
            for ((_, labels), since) in store.ages.range((*name, Vec::new())..).take_while(|((n, _), _)| n == name) {
                let _ = writeln!(out, "{name}{} {}", labels_text(labels, None), since.elapsed().as_secs_f64());
            }
            for ((_, labels), histogram) in
                store.histograms.range((*name, Vec::new())..).take_while(|((n, _), _)| n == name)
            {
                for (bucket, bound) in histogram.buckets.iter().zip(BUCKETS) {
                    let _ =
                        writeln!(out, "{name}_bucket{} {bucket}", labels_text(labels, Some(("le", bound.to_string()))));
                }
                let _ = writeln!(
                    out,
                    "{name}_bucket{} {}",
                    labels_text(labels, Some(("le", "+Inf".into()))),
                    histogram.count
                );
                let _ = writeln!(out, "{name}_sum{} {}", labels_text(labels, None), histogram.sum);
                let _ = writeln!(out, "{name}_count{} {}", labels_text(labels, None), histogram.count);
            }
        }
        let _ = writeln!(
            out,
            "# HELP akritas_metric_series_dropped_total Series not recorded because {MAX_SERIES} already exist.\n\
         # TYPE akritas_metric_series_dropped_total counter\nakritas_metric_series_dropped_total {}",
            store.dropped
        );
    }
}

/// Escapes a label value (backslash, quote, newline).
pub fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn labels_text(labels: &[(&'static str, String)], extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", label(v))).collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() { String::new() } else { format!("{{{}}}", parts.join(",")) }
}

/// Gives memory freed after a big transient use (an indexing pass, a journal replay, a
/// snapshot) back to the operating system; glibc keeps it in the process otherwise.
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases unused heap pages; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_and_histograms_render_in_the_text_format() {
        let metrics = Metrics::default();
        metrics.count("akritas_test_calls_total", "Test calls.", &[("tool", "a\"b"), ("outcome", "ok")], 2.0);
        metrics.count("akritas_test_calls_total", "Test calls.", &[("tool", "a\"b"), ("outcome", "ok")], 1.0);
        metrics.set("akritas_test_bytes", "Test bytes.", &[], 42.0);
        metrics.observe("akritas_test_seconds", "Test latency.", &[("op", "x")], Duration::from_millis(20));
        let mut out = String::new();
        metrics.render(&mut out);
        assert!(out.contains("# TYPE akritas_test_calls_total counter"), "{out}");
        assert!(out.contains("akritas_test_calls_total{tool=\"a\\\"b\",outcome=\"ok\"} 3"), "{out}");
        assert!(out.contains("akritas_test_bytes 42"), "{out}");
        assert!(out.contains("akritas_test_seconds_bucket{op=\"x\",le=\"0.01\"} 0"), "{out}");
        assert!(out.contains("akritas_test_seconds_bucket{op=\"x\",le=\"0.025\"} 1"), "{out}");
        assert!(out.contains("akritas_test_seconds_bucket{op=\"x\",le=\"+Inf\"} 1"), "{out}");
        assert!(out.contains("akritas_test_seconds_count{op=\"x\"} 1"), "{out}");
    }

    #[test]
    fn the_number_of_series_is_bounded() {
        let metrics = Metrics::default();
        for n in 0..(MAX_SERIES + 5) {
            metrics.count("akritas_test_many_total", "Many.", &[("n", &n.to_string())], 1.0);
        }
        assert_eq!(metrics.store().series(), MAX_SERIES);
        assert_eq!(metrics.store().dropped, 5);
    }
}
