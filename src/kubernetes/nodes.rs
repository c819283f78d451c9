//! `kubernetes.node_status`: a Node's conditions and pressure, taints, capacity and
//! allocatable against what the Pods on it request. Cluster-scoped: refused for a
//! Run that may not read cluster-scoped objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use serde_json::{Map, Value, json};

use super::api::{self, Ctx, Failure};
use super::pods::time;
use crate::text::{ELLIPSIS, truncate_bytes};

pub const NODE_STATUS: &str = "kubernetes.node_status";

pub const NODE_STATUS_DESCRIPTION: &str = "Is this Node healthy and how full is it? Use for node alerts \
(KubeNodeNotReady, NodeDiskPressure, NodeMemoryPressure, KubeNodeUnreachable) and when a Pod is pending, evicted \
or OOM-killed and you need its node's state. Returns the conditions (Ready, MemoryPressure, DiskPressure, \
PIDPressure with reason, message and transition time), the pressure flags that are true, unschedulable (cordoned), \
taints, kubelet version, capacity and allocatable (cpu, memory, ephemeral-storage, pods), and the sum of the \
requests of the Pods running on it with the percent of allocatable requested. Nodes are cluster-scoped: only Runs \
of a cluster reader namespace may read them.";

/// Resources reported in capacity, allocatable and requested.
const RESOURCES: &[&str] = &["cpu", "memory", "ephemeral-storage"];
/// Pods listed per page, and most pages read.
const PAGE: u32 = 500;
const MAX_PAGES: usize = 4;
/// Most bytes of a condition message.
const MESSAGE_BYTES: usize = 512;

pub fn schema() -> Value {
    api::arguments_schema(&["name"], json!({"name": api::name_schema("Node name.")}))
}

/// `kubernetes.node_status`.
pub async fn node_status(ctx: Ctx, args: Value) -> Result<Value, Failure> {
    let name = api::text(&args, "name").unwrap_or_default();
    let nodes = ctx.cluster::<Node>("Node")?;
    let node = nodes.get(name).await.map_err(|e| Failure::from_kube(e, &format!("get nodes {name:?}")))?;
    let mut out = report(&node, ctx.limits.max_entries);
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    match requested(&ctx, name).await {
        Ok(load) => add_load(&mut out, &load, &allocatable),
        Err(failure) => {
            out["requested"] = json!({"error": failure.message()});
        }
    }
    Ok(out)
}

/// What the non-terminated Pods on a node request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Load {
    /// Milli-units (millicores, millibytes) by resource.
    pub requests: BTreeMap<String, i128>,
    pub pods: usize,
    /// Whether more Pods were on the node than the pages read.
    pub partial: bool,
    /// Requests that could not be parsed (`pod/container cpu "x"`).
    pub unparsed: Vec<String>,
}

/// Lists the Pods bound to `node` in every namespace (at most [`MAX_PAGES`] pages)
/// and sums their requests.
async fn requested(ctx: &Ctx, node: &str) -> Result<Load, Failure> {
    let pods: Api<Pod> = Api::all(ctx.client.clone());
    let mut params = ListParams::default().fields(&format!("spec.nodeName={node}")).limit(PAGE);
    let mut load = Load::default();
    for page in 0..MAX_PAGES {
        let list = pods.list(&params).await.map_err(|e| {
            Failure::from_kube(e, &format!("list pods on node {node:?} in every namespace (for the requested sums)"))
        })?;
        for pod in &list.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            load.pods += 1;
            let Some(spec) = &pod.spec else { continue };
            let pod_name = pod.metadata.name.as_deref().unwrap_or("?");
            for (resource, milli) in pod_requests(spec, pod_name, &mut load.unparsed) {
                *load.requests.entry(resource).or_default() += milli;
            }
        }
        match list.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) if page + 1 < MAX_PAGES => params = params.continue_token(&token),
            Some(_) => load.partial = true,
            None => break,
        }
    }
    Ok(load)
}

/// A Pod's effective requests in milli-units, as the scheduler counts them: the
/// larger of the app containers (plus sidecars) and each init container (plus the
/// sidecars started before it), plus the Pod overhead; pod-level requests when set.
pub fn pod_requests(spec: &PodSpec, pod: &str, unparsed: &mut Vec<String>) -> BTreeMap<String, i128> {
    let mut read = |owner: &str, map: Option<&BTreeMap<String, Quantity>>| -> BTreeMap<String, i128> {
        let mut out = BTreeMap::new();
        for (resource, quantity) in map.into_iter().flatten() {
            if !RESOURCES.contains(&resource.as_str()) {
                continue;
            }
            match parse_quantity(&quantity.0) {
                Ok(milli) => {
                    out.insert(resource.clone(), milli);
                }
                Err(error) => unparsed.push(format!("{pod}/{owner} {resource}: {error}")),
            }
        }
        out
    };
    let add = |into: &mut BTreeMap<String, i128>, from: &BTreeMap<String, i128>| {
        for (resource, milli) in from {
            *into.entry(resource.clone()).or_default() += milli;
        }
    };
    if let Some(requests) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let mut total = read("pod", Some(requests));
        add(&mut total, &read("overhead", spec.overhead.as_ref()));
        return total;
    }
    let mut total = BTreeMap::new();
    for container in &spec.containers {
        add(&mut total, &read(&container.name, container.resources.as_ref().and_then(|r| r.requests.as_ref())));
    }
    let mut sidecars = BTreeMap::new();
    let mut init_peak = BTreeMap::<String, i128>::new();
    for container in spec.init_containers.iter().flatten() {
        let requests = read(&container.name, container.resources.as_ref().and_then(|r| r.requests.as_ref()));
        if container.restart_policy.as_deref() == Some("Always") {
            add(&mut sidecars, &requests);
            add(&mut total, &requests);
        } else {
            let mut running = sidecars.clone();
            add(&mut running, &requests);
            for (resource, milli) in running {
                let peak = init_peak.entry(resource).or_default();
                *peak = (*peak).max(milli);
            }
        }
    }
    for (resource, peak) in init_peak {
        let entry = total.entry(resource).or_default();
        *entry = (*entry).max(peak);
    }
    add(&mut total, &read("overhead", spec.overhead.as_ref()));
    total
}

/// Node facts that need no other read: conditions, pressure, taints, versions,
/// capacity and allocatable.
pub fn report(node: &Node, max_entries: usize) -> Value {
    let spec = node.spec.clone().unwrap_or_default();
    let status = node.status.clone().unwrap_or_default();
    let conditions = status.conditions.unwrap_or_default();
    let mut out = Map::new();
    out.insert("name".into(), json!(node.metadata.name));
    let ready = conditions.iter().find(|c| c.type_ == "Ready").map_or("Unknown", |c| c.status.as_str());
    out.insert("ready".into(), json!(ready));
    let pressure: Vec<&str> = conditions
        .iter()
        .filter(|c| c.type_.ends_with("Pressure") && c.status == "True")
        .map(|c| c.type_.as_str())
        .collect();
    out.insert("pressure".into(), json!(pressure));
    out.insert("unschedulable".into(), json!(spec.unschedulable.unwrap_or(false)));
    let shown: Vec<Value> = conditions
        .iter()
        .take(max_entries)
        .map(|c| {
            let mut condition = json!({"type": c.type_, "status": c.status, "reason": c.reason});
            if let Some(text) = &c.message {
                condition["message"] = json!(truncate_bytes(text.trim(), MESSAGE_BYTES, ELLIPSIS));
            }
            if let Some(at) = &c.last_transition_time {
                condition["lastTransitionTime"] = json!(time(at));
            }
            condition
        })
        .collect();
    out.insert("conditions".into(), json!(shown));
    let taints = spec.taints.unwrap_or_default();
    let shown: Vec<Value> = taints
        .iter()
        .take(max_entries)
        .map(|t| {
            let mut taint = json!({"key": t.key, "effect": t.effect});
            if let Some(value) = t.value.as_deref().filter(|v| !v.is_empty()) {
                taint["value"] = json!(value);
            }
            if let Some(at) = &t.time_added {
                taint["timeAdded"] = json!(time(at));
            }
            taint
        })
        .collect();
    if taints.len() > shown.len() {
        out.insert("taints_omitted".into(), json!(taints.len() - shown.len()));
    }
    out.insert("taints".into(), json!(shown));
    if let Some(info) = &status.node_info {
        out.insert("kubeletVersion".into(), json!(info.kubelet_version));
        out.insert("containerRuntime".into(), json!(info.container_runtime_version));
        out.insert("osImage".into(), json!(info.os_image));
    }
    let pick = |map: Option<&BTreeMap<String, Quantity>>| -> Value {
        let map = map.cloned().unwrap_or_default();
        let kept: Map<String, Value> = RESOURCES
            .iter()
            .chain(&["pods"])
            .filter_map(|r| map.get(*r).map(|q| ((*r).to_string(), json!(q.0))))
            .collect();
        Value::Object(kept)
    };
    out.insert("capacity".into(), pick(status.capacity.as_ref()));
    out.insert("allocatable".into(), pick(status.allocatable.as_ref()));
    let mut summary = format!("node {}: Ready={ready}", node.metadata.name.as_deref().unwrap_or("?"));
    for flag in &pressure {
        summary.push_str(&format!(", {flag}"));
    }
    if spec.unschedulable == Some(true) {
        summary.push_str(", cordoned");
    }
    out.insert("summary".into(), json!(summary));
    Value::Object(out)
}

/// Adds `requested`, `percent_of_allocatable`, `pods` and the load to the summary.
pub fn add_load(out: &mut Value, load: &Load, allocatable: &BTreeMap<String, Quantity>) {
    let mut requested = Map::new();
    let mut percent = Map::new();
    let mut summary = Vec::new();
    for resource in RESOURCES {
        let milli = load.requests.get(*resource).copied().unwrap_or(0);
        requested.insert((*resource).to_string(), json!(format_quantity(resource, milli)));
        let Some(of) = allocatable.get(*resource).and_then(|q| parse_quantity(&q.0).ok()).filter(|m| *m > 0) else {
            continue;
        };
        let share = (milli as f64 * 1000.0 / of as f64).round() / 10.0;
        percent.insert((*resource).to_string(), json!(share));
        summary.push(format!(
            "{resource} requested {} of {} ({share}%)",
            format_quantity(resource, milli),
            format_quantity(resource, of)
        ));
    }
    out["requested"] = Value::Object(requested);
    out["percent_of_allocatable"] = Value::Object(percent);
    let allocatable_pods = allocatable.get("pods").map(|q| q.0.clone());
    out["pods"] = json!({"count": load.pods, "allocatable": allocatable_pods});
    if load.partial {
        out["pods"]["partial"] = json!(format!(
            "more than {} pods are bound to this node; the sums cover the first {}",
            PAGE as usize * MAX_PAGES,
            PAGE as usize * MAX_PAGES
        ));
    }
    if !load.unparsed.is_empty() {
        out["requested_unparsed"] = json!(load.unparsed.iter().take(10).collect::<Vec<_>>());
    }
    if let Some(text) = out["summary"].as_str().map(str::to_string) {
        let pods = format!("{} pods", load.pods);
        let joined = std::iter::once(text).chain(std::iter::once(pods)).chain(summary).collect::<Vec<_>>().join(", ");
        out["summary"] = json!(joined);
    }
}

/// A quantity (`250m`, `1`, `128Mi`, `1G`, `1e3`, `0.5`) in milli-units, rounded up
/// as Kubernetes does.
pub fn parse_quantity(text: &str) -> Result<i128, String> {
    let text = text.trim();
    let invalid = || format!("{text:?} is not a Kubernetes quantity");
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let number_end = body.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(invalid());
    }
    // value = mantissa × 10^(exp10 − fraction digits) × 2^exp2, in milli-units.
    let digits = format!("{whole}{fraction}");
    let mut mantissa: i128 = 0;
    for digit in digits.bytes() {
        mantissa =
            mantissa.checked_mul(10).and_then(|m| m.checked_add(i128::from(digit - b'0'))).ok_or_else(invalid)?;
    }
    let (exp10, exp2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exponent if exponent.starts_with(['e', 'E']) => {
            let value: i32 = exponent[1..].parse().map_err(|_| invalid())?;
            if value.abs() > 30 {
                return Err(invalid());
            }
            (value, 0)
        }
        _ => return Err(invalid()),
    };
    let scale = exp10 + 3 - i32::try_from(fraction.len()).map_err(|_| invalid())?;
    let mut value = mantissa.checked_mul(1i128 << exp2).ok_or_else(invalid)?;
    if scale >= 0 {
        value = value.checked_mul(10i128.checked_pow(scale as u32).ok_or_else(invalid)?).ok_or_else(invalid)?;
    } else {
        let divisor = 10i128.checked_pow(scale.unsigned_abs()).ok_or_else(invalid)?;
        value = (value + divisor - 1) / divisor;
    }
    Ok(if negative { -value } else { value })
}

/// Milli-units as a reader writes them: cpu `1250m` or `2`, bytes `1.5Gi`.
pub fn format_quantity(resource: &str, milli: i128) -> String {
    if resource == "cpu" {
        return if milli % 1000 == 0 { format!("{}", milli / 1000) } else { format!("{milli}m") };
    }
    let bytes = milli / 1000;
    for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        let size = 1i128 << shift;
        if bytes.abs() >= size {
            let value = bytes as f64 / size as f64;
            let text = format!("{value:.2}");
            return format!("{}{unit}", text.trim_end_matches('0').trim_end_matches('.'));
        }
    }
    format!("{bytes}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_milli_units() {
        for (text, milli) in [
            ("250m", 250),
            ("1", 1000),
            ("0.5", 500),
            (".5", 500),
            ("2.", 2000),
            ("128Mi", 128 * 1024 * 1024 * 1000),
            ("1Gi", (1i128 << 30) * 1000),
            ("1G", 1_000_000_000_000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("1.5Gi", 3 * (1i128 << 29) * 1000),
            ("100k", 100_000_000),
            ("1500u", 2),
            ("1n", 1),
            ("-1", -1000),
            ("1e-3", 1),
        ] {
            assert_eq!(parse_quantity(text), Ok(milli), "{text}");
        }
        for bad in ["", "m", "1.2.3", "12x", "1Ki2", "1e", "1e99", "abc", "99999999999999999999999999999999999999999E"]
        {
            assert!(parse_quantity(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities_are_written_back_readably() {
        assert_eq!(format_quantity("cpu", 1250), "1250m");
        assert_eq!(format_quantity("cpu", 4000), "4");
        assert_eq!(format_quantity("memory", 1536 * (1i128 << 20) * 1000), "1.5Gi");
        assert_eq!(format_quantity("memory", 128 * (1i128 << 20) * 1000), "128Mi");
        assert_eq!(format_quantity("memory", 500 * 1000), "500");
    }

    fn spec(value: Value) -> PodSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn pod_requests_count_init_containers_sidecars_and_overhead_as_the_scheduler_does() {
        let spec = spec(json!({
            "initContainers": [
                {"name": "big-init", "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "128Mi", "nvidia.com/gpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "bogus"}}}
            ],
            "overhead": {"cpu": "10m"}
        }));
        let mut unparsed = Vec::new();
        let requests = pod_requests(&spec, "p", &mut unparsed);
        // cpu: max(250m + 250m + 100m, 2) + 10m; memory: max(128Mi, 64Mi).
        assert_eq!(requests.get("cpu"), Some(&2010));
        assert_eq!(requests.get("memory"), Some(&(128 * (1i128 << 20) * 1000)));
        assert!(!requests.contains_key("nvidia.com/gpu"));
        assert_eq!(unparsed, vec!["p/b memory: \"bogus\" is not a Kubernetes quantity".to_string()]);
    }

    #[test]
    fn a_node_under_disk_pressure_reports_flags_taints_and_load() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-1"},
            "spec": {"unschedulable": true, "taints": [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                    {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure",
                        "message": "kubelet has disk pressure", "lastTransitionTime": "2026-11-30T10:00:00Z"},
                    {"type": "MemoryPressure", "status": "False"}
                ],
                "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "hugepages-2Mi": "0"},
                "allocatable": {"cpu": "3800m", "memory": "7Gi", "ephemeral-storage": "100G", "pods": "110"},
                "nodeInfo": {"kubeletVersion": "v1.33.1", "machineID": "", "systemUUID": "", "bootID": "",
                    "kernelVersion": "", "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0",
                    "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}
            }
        }))
        .unwrap();
        let mut out = report(&node, 50);
        assert_eq!(out["ready"], "True");
        assert_eq!(out["pressure"], json!(["DiskPressure"]));
        assert_eq!(out["unschedulable"], true);
        assert_eq!(out["taints"], json!([{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]));
        assert_eq!(out["capacity"], json!({"cpu": "4", "memory": "8Gi", "pods": "110"}));
        assert_eq!(out["kubeletVersion"], "v1.33.1");
        assert_eq!(out["conditions"][1]["lastTransitionTime"], "2026-11-30T10:00:00Z");
        let load = Load {
            requests: BTreeMap::from([("cpu".to_string(), 1900), ("memory".to_string(), (1i128 << 30) * 1000)]),
            pods: 3,
            ..Load::default()
        };
        let allocatable = node.status.as_ref().unwrap().allocatable.clone().unwrap();
        add_load(&mut out, &load, &allocatable);
        assert_eq!(out["requested"], json!({"cpu": "1900m", "memory": "1Gi", "ephemeral-storage": "0"}));
        assert_eq!(out["percent_of_allocatable"], json!({"cpu": 50.0, "memory": 14.3, "ephemeral-storage": 0.0}));
        assert_eq!(out["pods"], json!({"count": 3, "allocatable": "110"}));
        assert_eq!(
            out["summary"],
            "node node-1: Ready=True, DiskPressure, cordoned, 3 pods, cpu requested 1900m of 3800m (50%), memory \
             requested 1Gi of 7Gi (14.3%), ephemeral-storage requested 0 of 93.13Gi (0%)"
        );
    }
}
