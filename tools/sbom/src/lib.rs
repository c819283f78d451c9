//! The CycloneDX 1.5 SBOM of one package's binary for one target triple, as cargo builds it.
//!
//! The crates are those `cargo tree -e normal --target <triple> -p <package>` lists: cargo's own
//! resolution for that package alone (features unified only with what the package's build
//! enables, not with other workspace members or dev-dependencies), no build-script or
//! dev-dependencies, no other platform's crates. Proc-macro crates are listed, as they are
//! normal dependencies. Each crate's license, description, authors and links come from
//! `cargo metadata`, its SHA-256 from `Cargo.lock`.
//!
//! The output is reproducible: no serial number, the timestamp given (the last commit's time,
//! `SOURCE_DATE_EPOCH`), components and dependencies in a fixed order, and no absolute path
//! (a path package is `download_url=file://.` relative to the workspace).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use serde_json::{Map, Value, json};

const CRATES_IO: &str = "registry+https://github.com/rust-lang/crates.io-index";

/// What to describe.
pub struct Request<'a> {
    /// The workspace's `Cargo.toml`.
    pub manifest: &'a Path,
    /// The package whose binary the SBOM describes.
    pub package: &'a str,
    /// The target triple it is built for.
    pub target: &'a str,
    /// The BOM's timestamp, seconds since the epoch.
    pub epoch: i64,
    /// The cargo to run (`$CARGO` under cargo, else `cargo`).
    pub cargo: OsString,
}

/// The BOM as a JSON value.
pub fn bom(request: &Request) -> Result<Value, String> {
    let graph = tree(request)?;
    let metadata = metadata(request)?;
    let root_dir = metadata["workspace_root"].as_str().ok_or("cargo metadata has no workspace_root")?;
    let checksums = lock_checksums(&Path::new(root_dir).join("Cargo.lock"))?;
    let mut by_key: BTreeMap<String, &Value> = BTreeMap::new();
    for package in metadata["packages"].as_array().ok_or("cargo metadata has no packages")? {
        let key = format!("{}@{}", text(package, "name"), text(package, "version"));
        if !graph.edges.contains_key(&key) {
            continue;
        }
        if by_key.insert(key.clone(), package).is_some() {
            return Err(format!("{key} comes from two sources; the tree does not say which one the binary uses"));
        }
    }
    let mut refs = BTreeMap::new();
    let mut components = Vec::new();
    let mut root = Value::Null;
    for key in graph.edges.keys() {
        let package = by_key.get(key).ok_or_else(|| format!("cargo tree lists {key}, cargo metadata does not"))?;
        let component = component(package, &checksums)?;
        refs.insert(key.clone(), component["bom-ref"].clone());
        if *key == graph.root {
            root = component;
        } else {
            components.push(component);
        }
    }
    components.sort_by(|a, b| a["bom-ref"].as_str().cmp(&b["bom-ref"].as_str()));
    let mut dependencies: Vec<Value> = graph
        .edges
        .iter()
        .map(|(key, children)| {
            let mut on: Vec<&Value> = children.iter().map(|child| &refs[child]).collect();
            on.sort_by_key(|r| r.as_str());
            json!({"ref": refs[key], "dependsOn": on})
        })
        .collect();
    dependencies.sort_by_key(|d| (d["ref"] != refs[&graph.root], d["ref"].as_str().map(str::to_owned)));
    root["type"] = json!("application");
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "timestamp": rfc3339(request.epoch),
            "tools": {"components": [{
                "type": "application",
                "name": env!("CARGO_PKG_NAME"),
                "version": env!("CARGO_PKG_VERSION"),
            }]},
            "component": root,
            "properties": [{"name": "cdx:rustc:sbom:target:triple", "value": request.target}],
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

/// The crates of the binary (`name@version`) and the normal dependencies of each.
struct Graph {
    root: String,
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn tree(request: &Request) -> Result<Graph, String> {
    let mut command = Command::new(&request.cargo);
    command.args(["tree", "--locked", "-e", "normal", "--prefix", "depth", "--format", "{p}", "--target"]);
    command.args([request.target, "-p", request.package, "--manifest-path"]).arg(request.manifest);
    let listing = run(&mut command)?;
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // The crate last seen at each depth: a line's parent is the last one a level up.
    let mut path: Vec<String> = Vec::new();
    for line in listing.lines().filter(|l| !l.trim().is_empty()) {
        let digits = line.bytes().take_while(u8::is_ascii_digit).count();
        let depth: usize =
            line[..digits].parse().map_err(|_| format!("cargo tree printed an unexpected line: {line}"))?;
        let mut words = line[digits..].split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next().and_then(|v| v.strip_prefix('v'))) else {
            return Err(format!("cargo tree printed an unexpected line: {line}"));
        };
        if depth > path.len() || (depth == 0 && !path.is_empty()) {
            return Err(format!("cargo tree printed a line out of place: {line}"));
        }
        let key = format!("{name}@{version}");
        path.truncate(depth);
        if let Some(parent) = path.last() {
            edges.get_mut(parent).expect("a parent is listed before its children").insert(key.clone());
        }
        edges.entry(key.clone()).or_default();
        path.push(key);
    }
    let root = path.first().cloned().ok_or_else(|| format!("cargo tree listed nothing for {}", request.package))?;
    Ok(Graph { root, edges })
}

fn metadata(request: &Request) -> Result<Value, String> {
    let mut command = Command::new(&request.cargo);
    command.args(["metadata", "--locked", "--format-version", "1", "--filter-platform", request.target]);
    command.arg("--manifest-path").arg(request.manifest);
    serde_json::from_str(&run(&mut command)?).map_err(|e| format!("cargo metadata printed invalid JSON: {e}"))
}

fn run(command: &mut Command) -> Result<String, String> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| format!("{shown}: {e}"))?;
    if !output.status.success() {
        return Err(format!("{shown} failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    String::from_utf8(output.stdout).map_err(|_| format!("{shown} printed invalid UTF-8"))
}

/// SHA-256 of each registry package, by (name, version, source), from the lockfile's
/// `[[package]]` tables.
fn lock_checksums(path: &Path) -> Result<BTreeMap<(String, String, String), String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut sums = BTreeMap::new();
    for table in text.split("[[package]]").skip(1) {
        let field = |name: &str| {
            table.lines().find_map(|line| {
                let value = line.strip_prefix(name)?.trim_start().strip_prefix('=')?.trim();
                Some(value.trim_matches('"').to_owned())
            })
        };
        if let (Some(name), Some(version), Some(source), Some(sum)) =
            (field("name"), field("version"), field("source"), field("checksum"))
        {
            sums.insert((name, version, source), sum);
        }
    }
    Ok(sums)
}

fn component(package: &Value, checksums: &BTreeMap<(String, String, String), String>) -> Result<Value, String> {
    let (name, version) = (text(package, "name"), text(package, "version"));
    let source = package["source"].as_str();
    let purl = purl(name, version, source);
    let mut out = Map::new();
    out.insert("type".into(), json!("library"));
    // A registry or git package's id names no local path; a path package's would.
    let bom_ref = match source {
        Some(_) => text(package, "id").to_owned(),
        None => purl.clone(),
    };
    out.insert("bom-ref".into(), json!(bom_ref));
    let authors: Vec<&str> = package["authors"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    if !authors.is_empty() {
        out.insert("author".into(), json!(authors.join(", ")));
    }
    out.insert("name".into(), json!(name));
    out.insert("version".into(), json!(version));
    if let Some(description) = package["description"].as_str() {
        out.insert("description".into(), json!(description.trim()));
    }
    out.insert("scope".into(), json!("required"));
    if let Some(source) = source
        && let Some(sum) = checksums.get(&(name.to_owned(), version.to_owned(), source.to_owned()))
    {
        out.insert("hashes".into(), json!([{"alg": "SHA-256", "content": sum}]));
    }
    match (package["license"].as_str(), package["license_file"].as_str()) {
        (Some(expression), _) => {
            out.insert("licenses".into(), json!([{"expression": expression}]));
        }
        (None, Some(file)) => {
            let file = Path::new(file).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
            out.insert("licenses".into(), json!([{"license": {"name": format!("see {file} in the crate")}}]));
        }
        (None, None) => return Err(format!("{name}@{version} declares no license")),
    }
    out.insert("purl".into(), json!(purl));
    let links: Vec<Value> = [("documentation", "documentation"), ("homepage", "website"), ("repository", "vcs")]
        .into_iter()
        .filter_map(|(field, kind)| Some(json!({"type": kind, "url": package[field].as_str()?})))
        .collect();
    if !links.is_empty() {
        out.insert("externalReferences".into(), Value::Array(links));
    }
    Ok(Value::Object(out))
}

/// The package URL (purl-spec's cargo type): crates.io packages have none of the qualifiers.
fn purl(name: &str, version: &str, source: Option<&str>) -> String {
    let base = format!("pkg:cargo/{name}@{version}");
    match source {
        Some(CRATES_IO) => base,
        Some(other) => match other.strip_prefix("git+") {
            Some(git) => format!("{base}?vcs_url={}", encode(&format!("git+{git}"))),
            None => format!("{base}?repository_url={}", encode(other.trim_start_matches("registry+"))),
        },
        None => format!("{base}?download_url={}", encode("file://.")),
    }
}

/// Percent-encoding of a purl qualifier value: everything but RFC 3986's unreserved characters.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC) of seconds since the epoch (Howard Hinnant's civil-from-days).
pub fn rfc3339(epoch: i64) -> String {
    let (days, seconds) = (epoch.div_euclid(86_400), epoch.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", seconds / 3_600, seconds % 3_600 / 60, seconds % 60)
}
