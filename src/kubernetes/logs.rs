//! `kubernetes.logs`: a container's log (current or previous), read through the API
//! server's `pods/log`, at most `limitBytes` taken from the stream whatever the
//! kubelet sends, cut to whole lines, optionally filtered by a substring or a regex.

use futures_util::io::{AsyncBufRead, AsyncBufReadExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use regex::{Regex, RegexBuilder};
use serde_json::{Value, json};

use super::api::{self, Ctx, Failure};
use crate::text::{ELLIPSIS, truncate_bytes};

pub const NAME: &str = "kubernetes.logs";

pub const DESCRIPTION: &str = "The log of one container of a pod, newest lines last. Use it to see why a container \
fails: `previous: true` reads the instance before the last restart (what a crash-looping or OOM-killed container \
printed before it died); `tailLines`, `sinceSeconds` and `limitBytes` bound what is read; `filter` (a substring) or \
`regex` keeps matching lines only, such as \"error\" or \"(?i)panic|fatal|exception\". A pod with several containers \
needs `container` (the first is read otherwise, and the result names the others). `truncated: true` means the byte \
cap was reached before the end: ask for fewer `tailLines` to see the newest lines. Secret-looking values are \
redacted.";

/// Most bytes of one returned line.
const LINE_BYTES: usize = 2048;
/// Most bytes of a `filter` or `regex`.
const PATTERN_BYTES: usize = 256;
/// Most bytes of a compiled `regex`.
const REGEX_SIZE: usize = 1 << 20;

pub fn schema(limits: &api::Limits) -> Value {
    api::arguments_schema(
        &["name"],
        json!({
            "name": api::name_schema("Pod name."),
            "namespace": api::namespace_schema(),
            "container": {"type": "string", "minLength": 1, "maxLength": 253,
                "description": "Container name; default: the pod's first container."},
            "previous": {"type": "boolean", "description": "The log of the container instance before its last restart."},
            "tailLines": {"type": "integer", "minimum": 1, "maximum": 5000,
                "description": format!("Lines from the end of the log; default {}.", limits.log_default_lines)},
            "sinceSeconds": {"type": "integer", "minimum": 1, "maximum": 604800},
            "limitBytes": {"type": "integer", "minimum": 1, "maximum": limits.log_max_bytes,
                "description": format!("Most log bytes read; default {}.", limits.log_default_bytes)},
            "filter": {"type": "string", "minLength": 1, "maxLength": PATTERN_BYTES,
                "description": "Keep only lines containing this text."},
            "regex": {"type": "string", "minLength": 1, "maxLength": PATTERN_BYTES,
                "description": "Keep only lines matching this regular expression (Rust syntax)."},
        }),
    )
}

/// How lines are kept.
enum LineFilter {
    All,
    Substring(String),
    Pattern(Regex),
}

impl LineFilter {
    fn parse(filter: Option<&str>, regex: Option<&str>) -> Result<Self, Failure> {
        match (filter, regex) {
            (Some(_), Some(_)) => Err(Failure::new("give either `filter` or `regex`, not both")),
            (Some(text), None) => Ok(Self::Substring(text.to_string())),
            (None, Some(pattern)) => RegexBuilder::new(pattern)
                .size_limit(REGEX_SIZE)
                .build()
                .map(Self::Pattern)
                .map_err(|e| Failure::new(format!("`regex` is not a valid regular expression: {e}"))),
            (None, None) => Ok(Self::All),
        }
    }

    fn keeps(&self, line: &str) -> bool {
        match self {
            Self::All => true,
            Self::Substring(text) => line.contains(text.as_str()),
            Self::Pattern(regex) => regex.is_match(line),
        }
    }
}

/// At most `cap` bytes of `reader` (never more than `cap` plus the reader's one
/// buffered chunk in memory), whether the cap was reached, and the read error that
/// ended the stream early, if any.
pub async fn read_capped<R: AsyncBufRead + Unpin>(mut reader: R, cap: usize) -> (Vec<u8>, bool, Option<String>) {
    let mut out = Vec::with_capacity(cap.min(64 * 1024));
    while out.len() < cap {
        let chunk = match reader.fill_buf().await {
            Ok(chunk) => chunk,
            Err(e) => return (out, false, Some(e.to_string())),
        };
        if chunk.is_empty() {
            return (out, false, None);
        }
        let take = chunk.len().min(cap - out.len());
        out.extend_from_slice(&chunk[..take]);
        reader.consume_unpin(take);
    }
    (out, true, None)
}

/// The longest prefix of `bytes` that does not end inside a UTF-8 sequence.
fn utf8_prefix(bytes: &[u8]) -> &[u8] {
    // The start of the last character: back over at most 3 continuation bytes.
    let mut start = bytes.len();
    while start > 0 && bytes.len() - start < 3 && bytes[start - 1] & 0xC0 == 0x80 {
        start -= 1;
    }
    let Some(lead) = start.checked_sub(1).map(|i| bytes[i]) else {
        return bytes;
    };
    let needed = match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return bytes,
    };
    if bytes.len() - (start - 1) < needed { &bytes[..start - 1] } else { bytes }
}

/// The lines of what was read. When the cap cut the stream, the partial last line is
/// dropped (or, when there is a single line, cut on a character boundary).
fn split_lines(bytes: &[u8], capped: bool) -> Vec<String> {
    let whole = match (capped, bytes.iter().rposition(|b| *b == b'\n')) {
        (true, Some(end)) => &bytes[..=end],
        (true, None) => utf8_prefix(bytes),
        (false, _) => bytes,
    };
    let text = String::from_utf8_lossy(whole);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    if text.is_empty() {
        return Vec::new();
    }
    text.split('\n').map(|line| truncate_bytes(line.strip_suffix('\r').unwrap_or(line), LINE_BYTES, ELLIPSIS)).collect()
}

/// The kept lines, and how many oldest lines were dropped to stay within `budget`
/// bytes of JSON text.
fn within_budget(mut lines: Vec<String>, budget: usize) -> (Vec<String>, usize) {
    let mut used = 0;
    let mut keep_from = lines.len();
    for line in lines.iter().rev() {
        let size = api::json_len(&json!(line)) + 1;
        if used + size > budget {
            break;
        }
        used += size;
        keep_from -= 1;
    }
    let dropped = keep_from;
    lines.drain(..keep_from);
    (lines, dropped)
}

/// A pod's containers, by sort: (regular, init, ephemeral).
fn containers(pod: &Pod) -> (Vec<String>, Vec<String>, Vec<String>) {
    let spec = pod.spec.as_ref();
    let regular = spec.map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .map(|cs| cs.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let ephemeral = spec
        .and_then(|s| s.ephemeral_containers.as_ref())
        .map(|cs| cs.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    (regular, init, ephemeral)
}

/// The container to read and a note when it was chosen for the caller.
fn pick_container(pod_name: &str, pod: &Pod, requested: Option<&str>) -> Result<(String, Option<String>), Failure> {
    let (regular, init, ephemeral) = containers(pod);
    let mut listing = format!("containers: {}", regular.join(", "));
    if !init.is_empty() {
        listing.push_str(&format!("; init containers: {}", init.join(", ")));
    }
    if !ephemeral.is_empty() {
        listing.push_str(&format!("; ephemeral containers: {}", ephemeral.join(", ")));
    }
    match requested {
        Some(name) if regular.iter().chain(&init).chain(&ephemeral).any(|c| c == name) => Ok((name.to_string(), None)),
        Some(name) => Err(Failure::new(format!("pod {pod_name:?} has no container {name:?} ({listing})"))),
        None => match regular.first() {
            None => Err(Failure::new(format!("pod {pod_name:?} has no containers"))),
            Some(first) if regular.len() == 1 && init.is_empty() => Ok((first.clone(), None)),
            Some(first) => Ok((
                first.clone(),
                Some(format!("no `container` was named; read {first:?}, the first of the pod's {listing}")),
            )),
        },
    }
}

/// Restarts of `container` from the pod's status.
fn restarts(pod: &Pod, container: &str) -> Option<i32> {
    let status = pod.status.as_ref()?;
    [&status.container_statuses, &status.init_container_statuses]
        .into_iter()
        .flatten()
        .flatten()
        .find(|s| s.name == container)
        .map(|s| s.restart_count)
}

/// `kubernetes.logs`.
pub async fn logs(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let name = api::text(&args, "name").unwrap_or_default();
    let previous = api::flag(&args, "previous");
    let filter = LineFilter::parse(api::text(&args, "filter"), api::text(&args, "regex"))?;
    let (pods, namespace) = ctx.namespaced::<Pod>(api::text(&args, "namespace"))?;
    let what = format!("get pods {name:?} in namespace {namespace:?}");
    let pod = pods.get(name).await.map_err(|e| Failure::from_kube(e, &what))?;
    let (container, chosen) = pick_container(name, &pod, api::text(&args, "container"))?;
    if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_none_or(str::is_empty) {
        return Err(Failure::new(format!(
            "pod {name:?} in namespace {namespace:?} has no logs: it is not scheduled to a node yet (see \
             kubernetes.events for why it is pending)"
        )));
    }

    let limit_bytes = api::number(&args, "limitBytes")
        .map_or(ctx.limits.log_default_bytes, |n| n.min(u64::from(ctx.limits.log_max_bytes)) as u32)
        .max(1);
    let tail_lines = api::number(&args, "tailLines").map_or(u64::from(ctx.limits.log_default_lines), |n| n.min(5000));
    let params = LogParams {
        container: Some(container.clone()),
        limit_bytes: Some(i64::from(limit_bytes)),
        previous,
        since_seconds: api::number(&args, "sinceSeconds").map(|s| s.min(604_800) as i64),
        tail_lines: Some(tail_lines as i64),
        ..LogParams::default()
    };
    let stream = pods.log_stream(name, &params).await.map_err(|e| {
        let what = format!("read the log of container {container:?} of pod {name:?} in namespace {namespace:?}");
        log_failure(e, &what, previous, &container, restarts(&pod, &container))
    })?;
    let (bytes, capped, broken) = read_capped(stream, limit_bytes as usize).await;

    let read_lines = split_lines(&bytes, capped);
    let lines_read = read_lines.len();
    let filtering = !matches!(filter, LineFilter::All);
    let matched: Vec<String> = read_lines.into_iter().filter(|line| filter.keeps(line)).collect();
    let lines_matched = matched.len();
    let budget = ctx.limits.output_bytes.max(limit_bytes as usize);
    let (lines, dropped) = within_budget(matched, budget);

    let mut notes = Vec::new();
    notes.extend(chosen);
    if capped {
        notes.push(format!(
            "the {limit_bytes} byte cap was reached before the end of the log: newer lines were not read; ask for \
             fewer tailLines (or a smaller sinceSeconds) to see the newest"
        ));
    }
    if dropped > 0 {
        notes.push(format!("{dropped} older lines were left out to keep the output within {budget} bytes"));
    }
    if let Some(error) = broken {
        notes.push(format!(
            "the log stream broke after {} bytes: {}",
            bytes.len(),
            truncate_bytes(&error, 256, ELLIPSIS)
        ));
    }
    let mut out = json!({
        "pod": name,
        "namespace": namespace,
        "container": container,
        "previous": previous,
        "bytes_read": bytes.len(),
        "truncated": capped,
        "lines_read": lines_read,
        "lines_returned": lines.len(),
        "lines": lines,
    });
    if filtering {
        out["lines_matched"] = json!(lines_matched);
    }
    if !notes.is_empty() {
        out["notes"] = json!(notes);
    }
    Ok(out)
}

/// The API's answer worded for the caller; a missing previous instance says so.
fn log_failure(error: kube::Error, what: &str, previous: bool, container: &str, restarts: Option<i32>) -> Failure {
    if let kube::Error::Api(status) = &error
        && previous
        && (status.message.contains("previous terminated container")
            || (matches!(status.code, 400 | 404) && status.message.contains("not found")))
    {
        let restarts = restarts.map_or(String::new(), |n| format!(" (restartCount {n})"));
        return Failure::new(format!(
            "no previous container: {container:?} has not restarted{restarts}, so there is no previous log; read \
             the current log with previous: false"
        ));
    }
    Failure::from_kube(error, what)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::io::{AsyncReadExt, BufReader, Cursor};

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
    }

    #[test]
    fn an_endless_stream_is_read_up_to_the_cap_and_no_further() {
        let endless = BufReader::with_capacity(4096, futures_util::io::repeat(b'x'));
        let (bytes, capped, broken) = block_on(read_capped(endless, 10_000));
        assert_eq!(bytes.len(), 10_000);
        assert!(capped);
        assert!(broken.is_none());
    }

    #[test]
    fn a_short_log_is_read_whole_and_not_truncated() {
        let (bytes, capped, _) = block_on(read_capped(Cursor::new(b"a\nb\n".to_vec()), 100));
        assert_eq!(bytes, b"a\nb\n");
        assert!(!capped);
        assert_eq!(split_lines(&bytes, capped), ["a", "b"]);
    }

    #[test]
    fn the_cap_cuts_at_the_last_whole_line() {
        let log = "first line\nsecond line\nthird line\n".repeat(3);
        let reader = BufReader::with_capacity(7, Cursor::new(log.into_bytes()));
        let (bytes, capped, _) = block_on(read_capped(reader, 30));
        assert_eq!(bytes.len(), 30);
        assert!(capped);
        assert_eq!(split_lines(&bytes, capped), ["first line", "second line"]);
    }

    #[test]
    fn a_single_long_line_is_cut_on_a_character_boundary() {
        // "é" is two bytes; a cap of 5 ends inside the third one.
        let (bytes, capped, _) = block_on(read_capped(Cursor::new("ééé".as_bytes().to_vec()), 5));
        assert!(capped);
        assert_eq!(split_lines(&bytes, capped), ["éé"]);
        // A 4-byte character cut after 1, 2 and 3 bytes.
        let crab = "a🦀".as_bytes();
        for cut in 2..5 {
            assert_eq!(utf8_prefix(&crab[..cut]), b"a", "{cut}");
        }
        assert_eq!(utf8_prefix(crab), crab);
    }

    #[test]
    fn long_lines_and_carriage_returns_are_bounded() {
        let long = format!("{}\r\nok\r\n", "y".repeat(5000));
        let lines = split_lines(long.as_bytes(), false);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].len(), LINE_BYTES);
        assert!(lines[0].ends_with(ELLIPSIS));
        assert_eq!(lines[1], "ok");
    }

    #[test]
    fn filters_keep_matching_lines() {
        let lines = ["INFO started", "ERROR db down", "warn: Panic soon", "error: retry"];
        let substring = LineFilter::parse(Some("ERROR"), None).unwrap();
        assert_eq!(lines.iter().filter(|l| substring.keeps(l)).count(), 1);
        let pattern = LineFilter::parse(None, Some("(?i)error|panic")).unwrap();
        assert_eq!(lines.iter().filter(|l| pattern.keeps(l)).count(), 3);
        let invalid = LineFilter::parse(None, Some("(unclosed")).err().unwrap();
        assert!(invalid.message().contains("not a valid regular expression"), "{}", invalid.message());
        assert!(LineFilter::parse(Some("a"), Some("b")).is_err());
        // A pattern whose compiled program exceeds the size limit is refused, not built.
        let huge = LineFilter::parse(None, Some(r"\w{1000}\w{1000}\w{1000}")).err().unwrap();
        assert!(huge.message().contains("not a valid regular expression"), "{}", huge.message());
    }

    #[test]
    fn the_output_budget_keeps_the_newest_lines() {
        let lines: Vec<String> = (0..100).map(|i| format!("line {i:03}")).collect();
        let (kept, dropped) = within_budget(lines, 12 * 10);
        assert_eq!(kept.len(), 10);
        assert_eq!(dropped, 90);
        assert_eq!(kept.last().unwrap(), "line 099");
    }

    #[test]
    fn the_container_is_validated_and_a_choice_is_explained() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "app"}, {"name": "proxy"}], "initContainers": [{"name": "migrate"}]}
        }))
        .unwrap();
        let unknown = pick_container("web", &pod, Some("sidecar")).unwrap_err();
        assert_eq!(
            unknown.message(),
            "pod \"web\" has no container \"sidecar\" (containers: app, proxy; init containers: migrate)"
        );
        assert_eq!(pick_container("web", &pod, Some("migrate")).unwrap(), ("migrate".to_string(), None));
        let (chosen, note) = pick_container("web", &pod, None).unwrap();
        assert_eq!(chosen, "app");
        assert!(note.unwrap().contains("proxy"));
    }

    #[test]
    fn a_missing_previous_instance_is_worded_for_the_caller() {
        let status =
            kube::core::Status::failure("previous terminated container \"app\" in pod \"web\" not found", "BadRequest")
                .with_code(400);
        let failure = log_failure(kube::Error::Api(Box::new(status)), "read", true, "app", Some(0));
        assert_eq!(
            failure.message(),
            "no previous container: \"app\" has not restarted (restartCount 0), so there is no previous log; read the \
             current log with previous: false"
        );
    }

    #[test]
    fn reading_stops_without_draining_a_slow_reader() {
        // The reader yields one byte per poll; the cap stops after exactly `cap` polls' worth.
        let reader = BufReader::with_capacity(1, Cursor::new(vec![b'z'; 1000]));
        let (bytes, capped, _) = block_on(read_capped(reader, 10));
        assert_eq!(bytes, vec![b'z'; 10]);
        assert!(capped);
        let mut rest = Vec::new();
        let mut reader = BufReader::with_capacity(1, Cursor::new(vec![b'z'; 1000]));
        block_on(async {
            let _ = read_capped(&mut reader, 10).await;
            reader.read_to_end(&mut rest).await.unwrap();
        });
        assert_eq!(rest.len(), 990);
    }
}
