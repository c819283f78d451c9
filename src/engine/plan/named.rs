//! Arguments the incident names. A Run started with facts (an alert's labels, a request's
//! `context`) knows which objects it is about: `namespace=shop pod=cart-7d9f`, or
//! `instance=db-7:9187`. In the plan, a check's argument whose name those facts give is one of
//! their values: the plan schema says so with an `enum` (on Ollama and llama-server, a grammar)
//! and the plan validator refuses any other value, naming the ones it takes. Measured with
//! Qwen2.5-Coder-1.5B: copying `instance: db-7:9187` into `host`, it wrote `db-2`, and
//! `node: worker-7` became `worker-3`; the check then read nothing about the incident.
//!
//! Only the plan is bound. Once it has run, the model may call a tool with any value (another
//! namespace, a pod a listing showed), and a Run without facts plans as before.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Facts that are not object names: the alert's name and severity are still bound (a tool
/// may take `alertname`), but a composite fact the intake derives is not a value.
const NOT_VALUES: &[&str] = &["technology"];

/// The arguments a machine name a question mentions is bound to.
const MACHINE_ARGUMENTS: &[&str] = &["host", "hostname", "instance", "node", "server"];

/// Most values one argument may be bound to, and the longest value bound.
const MAX_VALUES: usize = 8;
const MAX_VALUE_CHARS: usize = 253;

/// The values each argument name may take in a plan, from the Run's facts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NamedArguments {
    values: BTreeMap<String, Vec<Value>>,
}

impl NamedArguments {
    /// From the Run's facts: each fact as itself; `instance` (`host:port`, `[v6]:port`) also as
    /// `host` and `port`. A fact the facts already give under a derived name (a `host` label)
    /// wins over the derived value. A `name` is not derived: a tool's `name` is of any object
    /// (the ConfigMap a Deployment mounts, a node's events), not only the one alerted on.
    pub fn from_facts(facts: &BTreeMap<String, String>) -> Self {
        let mut values: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        let mut add = |key: &str, value: Value| {
            let list = values.entry(key.to_string()).or_default();
            if !list.contains(&value) && list.len() < MAX_VALUES {
                list.push(value);
            }
        };
        for (key, value) in facts {
            let key = key.to_lowercase();
            if NOT_VALUES.contains(&key.as_str()) || value.is_empty() || value.chars().count() > MAX_VALUE_CHARS {
                continue;
            }
            add(&key, json!(value));
        }
        let given = |key: &str| facts.keys().any(|k| k.eq_ignore_ascii_case(key));
        let instance = facts.get("instance").and_then(|i| split_instance(i));
        if let Some((host, port)) = instance.clone() {
            if !given("host") {
                add("host", json!(host));
            }
            if let Some(port) = port.filter(|_| !given("port")) {
                add("port", json!(port));
            }
        }
        // A Kubernetes node is named after its host unless its kubelet was told otherwise: a node
        // alert without an `instance` names the `host` of host tools (`linux.disk_usage`).
        // Measured with Qwen2.5-Coder-1.5B: for `node: worker-3` alone it left the disk usage
        // check as a gap, having no value it could give `host`.
        if instance.is_none()
            && !given("host")
            && let Some(node) = facts.get("node").filter(|n| !n.is_empty() && n.chars().count() <= MAX_VALUE_CHARS)
        {
            add("host", json!(node));
        }
        Self { values }
    }

    /// For a Run without facts (a question typed in a chat): the machine names the question
    /// mentions (`why is db-7 slow` → `db-7`; see [`mentioned_names`]) as the values of the
    /// arguments that name a machine (`host`, `node`, …). Measured with Qwen2.5-Coder-1.5B:
    /// asked why `db-7` was slow, it called `postgres.activity` with `host: akritas-host`.
    /// A question that mentions no such name binds nothing.
    pub fn from_mentions(question: &str) -> Self {
        let names = mentioned_names(question);
        if names.is_empty() {
            return Self::default();
        }
        let values = names.into_iter().map(Value::String).collect::<Vec<_>>();
        Self { values: MACHINE_ARGUMENTS.iter().map(|key| (key.to_string(), values.clone())).collect() }
    }

    /// Whether no argument is bound.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The tool's input schema with each top-level property the facts name narrowed to their
    /// values that the property itself admits (a property none of them fits stays free; one
    /// that already has an `enum` or `const` keeps it).
    pub fn bind(&self, schema: &Value) -> Value {
        let mut out = schema.clone();
        let Some(properties) = out.get_mut("properties").and_then(Value::as_object_mut) else { return out };
        for (name, property) in properties.iter_mut() {
            if let Some(admitted) = self.admitted(name, property) {
                property["enum"] = Value::Array(admitted);
                let note = format!("One of the values the incident names for `{name}`.");
                let description = match property.get("description").and_then(Value::as_str) {
                    Some(text) => format!("{text} {note}"),
                    None => note,
                };
                property["description"] = json!(description);
            }
        }
        out
    }

    /// Arguments for a tool of input `schema` fixed by the facts alone: each required property
    /// admits exactly one of their values (optional ones are left out). `None` when a required
    /// property is free or has a choice, or the tool requires nothing.
    pub fn complete(&self, schema: &Value) -> Option<Value> {
        let properties = schema.get("properties")?.as_object()?;
        let required = schema.get("required")?.as_array()?;
        let mut arguments = serde_json::Map::new();
        for name in required {
            let name = name.as_str()?;
            let admitted = self.admitted(name, properties.get(name)?)?;
            let [value] = admitted.as_slice() else { return None };
            arguments.insert(name.to_string(), value.clone());
        }
        (!arguments.is_empty()).then_some(Value::Object(arguments))
    }

    /// `Err` naming the argument and the values it takes when `arguments` give a bound
    /// argument of `schema` another value.
    pub fn check(&self, schema: &Value, arguments: &Value) -> Result<(), String> {
        let (Some(properties), Some(given)) =
            (schema.get("properties").and_then(Value::as_object), arguments.as_object())
        else {
            return Ok(());
        };
        for (name, value) in given {
            let Some(admitted) = properties.get(name).and_then(|p| self.admitted(name, p)) else { continue };
            if !admitted.contains(value) {
                let list: Vec<String> = admitted.iter().map(Value::to_string).collect();
                return Err(format!(
                    "argument `{name}` is {value}, but a plan takes the value the incident names: {}",
                    list.join(" or ")
                ));
            }
        }
        Ok(())
    }

    /// The facts' values for the property `name` that its schema admits, when there are any and
    /// it does not fix its values itself.
    fn admitted(&self, name: &str, property: &Value) -> Option<Vec<Value>> {
        if property.get("enum").is_some() || property.get("const").is_some() {
            return None;
        }
        let candidates = self.values.get(&name.to_lowercase())?;
        let validator = jsonschema::validator_for(property).ok()?;
        let admitted: Vec<Value> = candidates
            .iter()
            .filter_map(|value| as_property_type(value, property))
            .filter(|value| validator.is_valid(value))
            .collect();
        (!admitted.is_empty()).then_some(admitted)
    }
}

/// The names of machines a text mentions, in order, at most [`MAX_VALUES`]: words of letters,
/// digits, `-` and `.` that start with a letter and hold a digit and a `-` or `.` (`db-7`,
/// `web-2.example.com`, `worker-3`; not `k8s`, `read-only` or `10.0.0.5`). A sentence's
/// final dot is not part of the name.
pub fn mentioned_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))) {
        let word = word.trim_end_matches(['.', '-']);
        let machine = word.starts_with(|c: char| c.is_ascii_alphabetic())
            && word.contains(|c: char| c.is_ascii_digit())
            && word.contains(['-', '.'])
            && word.len() <= MAX_VALUE_CHARS;
        if machine && !names.iter().any(|n| n == word) && names.len() < MAX_VALUES {
            names.push(word.to_string());
        }
    }
    names
}

/// The value as the property's type wants it: a fact is text, and an `integer` property takes
/// the number the text spells (`"8200"` for `port`).
fn as_property_type(value: &Value, property: &Value) -> Option<Value> {
    let types: Vec<&str> = match property.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => vec!["string"],
    };
    match value {
        Value::String(text) if types.contains(&"string") => Some(value.clone()).filter(|_| !text.is_empty()),
        Value::String(text) if types.contains(&"integer") || types.contains(&"number") => {
            text.parse::<u64>().ok().map(|n| json!(n))
        }
        Value::Number(_) if types.contains(&"integer") || types.contains(&"number") => Some(value.clone()),
        Value::Number(n) if types.contains(&"string") => Some(json!(n.to_string())),
        _ => None,
    }
}

/// `db-7:9187` → (`db-7`, 9187); `[2001:db8::1]:443` → (`2001:db8::1`, 443); `db-7` → (`db-7`,
/// none). `None` for an empty host or a port that is not one.
fn split_instance(instance: &str) -> Option<(String, Option<u16>)> {
    let instance = instance.trim();
    if let Some(rest) = instance.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => Some(port.parse().ok()?),
            None if after.is_empty() => None,
            None => return None,
        };
        return (!host.is_empty()).then(|| (host.to_string(), port));
    }
    let (host, port) = match instance.rsplit_once(':') {
        // More than one colon and no brackets: a bare IPv6 address.
        Some((host, _)) if host.contains(':') => (instance, None),
        Some((host, port)) => (host, Some(port.parse().ok()?)),
        None => (instance, None),
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pairs: &[(&str, &str)]) -> NamedArguments {
        NamedArguments::from_facts(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn a_question_without_facts_binds_the_machines_it_mentions() {
        assert_eq!(mentioned_names("service: postgresql - why is db-7 slow since this morning?"), ["db-7"]);
        assert_eq!(
            mentioned_names("Is web-2.example.com or worker-3. slower than db-7? (not k8s, read-only or 10.0.0.5)"),
            ["web-2.example.com", "worker-3", "db-7"]
        );
        let schema = json!({"type": "object", "properties": {"host": {"type": "string"}, "query": {"type": "string"}},
            "required": ["host"]});
        let named = NamedArguments::from_mentions("why is db-7 slow since this morning?");
        let bound = named.bind(&schema);
        assert_eq!(bound["properties"]["host"]["enum"], json!(["db-7"]));
        assert!(bound["properties"]["query"].get("enum").is_none(), "only arguments that name a machine");
        assert_eq!(named.complete(&schema), Some(json!({"host": "db-7"})));
        assert!(named.check(&schema, &json!({"host": "akritas-host"})).unwrap_err().contains("\"db-7\""));
        assert!(NamedArguments::from_mentions("why is the database slow?").is_empty());
    }

    #[test]
    fn an_instance_label_gives_the_host_and_port_a_plan_takes() {
        let named = facts(&[("instance", "db-7:9187"), ("alertname", "PostgresTooManyConnections")]);
        let schema = json!({"type": "object", "properties": {
            "host": {"type": "string", "description": "Server."}, "port": {"type": "integer"},
            "database": {"type": "string"}}, "required": ["host"]});
        let bound = named.bind(&schema);
        assert_eq!(bound["properties"]["host"]["enum"], json!(["db-7"]));
        assert!(bound["properties"]["host"]["description"].as_str().unwrap().starts_with("Server. One of"));
        assert_eq!(bound["properties"]["port"]["enum"], json!([9187]));
        assert!(bound["properties"]["database"].get("enum").is_none(), "a property no fact names stays free");

        assert_eq!(named.check(&schema, &json!({"host": "db-7", "port": 9187, "database": "orders"})), Ok(()));
        let refused = named.check(&schema, &json!({"host": "db-2"})).unwrap_err();
        assert!(
            refused.contains("`host`") && refused.contains("\"db-2\"") && refused.contains("\"db-7\""),
            "{refused}"
        );
        assert!(named.check(&schema, &json!({"host": "db-7:9187"})).is_err());
    }

    #[test]
    fn labels_bind_their_own_names_and_a_property_keeps_its_own_rules() {
        let named = facts(&[
            ("namespace", "shop"),
            ("pod", "cart-7d9f-abcde"),
            ("node", "worker-7"),
            ("technology", "kubernetes pod"),
        ]);
        let schema = json!({"type": "object", "properties": {
            "namespace": {"type": "string", "pattern": "^[a-z0-9-]+$"},
            "name": {"type": "string"},
            "technology": {"type": "string"},
            "type": {"type": "string", "enum": ["Normal", "Warning"]},
            "node": {"type": "string", "pattern": "^x-"}}});
        let bound = named.bind(&schema);
        assert_eq!(bound["properties"]["namespace"]["enum"], json!(["shop"]));
        assert!(bound["properties"]["name"].get("enum").is_none(), "a name may be of any object");
        assert!(bound["properties"]["technology"].get("enum").is_none(), "a derived fact is not a value");
        assert_eq!(bound["properties"]["type"]["enum"], json!(["Normal", "Warning"]));
        assert!(bound["properties"]["node"].get("enum").is_none(), "no fact fits the property's pattern");
        assert_eq!(named.check(&schema, &json!({"node": "elsewhere"})), Ok(()));
    }

    #[test]
    fn a_tool_whose_required_arguments_the_facts_fix_gets_them() {
        let named = facts(&[("namespace", "shop"), ("pod", "cart-7d9f-abcde"), ("instance", "db-7:9187")]);
        let pod = json!({"properties": {"namespace": {"type": "string"}, "pod": {"type": "string"},
            "container": {"type": "string"}}, "required": ["namespace", "pod"]});
        assert_eq!(named.complete(&pod), Some(json!({"namespace": "shop", "pod": "cart-7d9f-abcde"})));
        let free = json!({"properties": {"namespace": {"type": "string"}, "query": {"type": "string"}}, "required": ["namespace", "query"]});
        assert_eq!(named.complete(&free), None, "a required argument no fact gives");
        let nothing = json!({"properties": {"namespace": {"type": "string"}}});
        assert_eq!(named.complete(&nothing), None, "a tool that requires nothing");
        let two = facts(&[("pod", "a-1"), ("node", "n-1")]);
        assert_eq!(
            two.complete(&json!({"properties": {"name": {"type": "string"}}, "required": ["name"]})),
            None,
            "a choice"
        );
    }

    #[test]
    fn a_node_without_an_instance_names_the_host() {
        let schema = json!({"properties": {"host": {"type": "string"}}, "required": ["host"]});
        assert_eq!(facts(&[("node", "worker-3")]).complete(&schema), Some(json!({"host": "worker-3"})));
        let both = facts(&[("node", "worker-3"), ("instance", "10.0.0.7:9100")]);
        assert_eq!(
            both.complete(&schema),
            Some(json!({"host": "10.0.0.7"})),
            "the instance says where the exporter is"
        );
        let given = facts(&[("node", "worker-3"), ("host", "w3.example")]);
        assert_eq!(given.complete(&schema), Some(json!({"host": "w3.example"})));
    }

    #[test]
    fn without_facts_nothing_is_bound() {
        let named = facts(&[]);
        assert!(named.is_empty());
        let schema = json!({"type": "object", "properties": {"host": {"type": "string"}}});
        assert_eq!(named.bind(&schema), schema);
        assert_eq!(named.check(&schema, &json!({"host": "anything"})), Ok(()));
    }

    #[test]
    fn instances_are_split_as_addresses_are_written() {
        assert_eq!(split_instance("db-7:9187"), Some(("db-7".into(), Some(9187))));
        assert_eq!(split_instance("vault.internal.invalid"), Some(("vault.internal.invalid".into(), None)));
        assert_eq!(split_instance("[2001:db8::1]:443"), Some(("2001:db8::1".into(), Some(443))));
        assert_eq!(split_instance("2001:db8::1"), Some(("2001:db8::1".into(), None)));
        assert_eq!(split_instance("db:http"), None);
        assert_eq!(split_instance(":9100"), None);
        let named = facts(&[("instance", "node-1:9100"), ("host", "node-1.example")]);
        let bound = named.bind(&json!({"properties": {"host": {"type": "string"}}}));
        assert_eq!(bound["properties"]["host"]["enum"], json!(["node-1.example"]), "a host label wins");
    }
}
