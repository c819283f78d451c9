//! The rmcp server exposing five read-only VictoriaMetrics tools.

use std::sync::Arc;

use rmcp::model::JsonObject;
use rmcp::{
    ErrorData as McpError, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig},
    schemars, tool, tool_handler, tool_router,
};
use serde::{Deserialize, de::DeserializeOwned};
use serde_json::Value;

use super::client::{Endpoint, VmClient, VmError};

/// Server name reported in `initialize`.
pub const SERVER_NAME: &str = "akritas-victoriametrics";
/// Maximum PromQL/MetricsQL query length in bytes.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;
/// Maximum length of `time`, `start`, `end`, `step`, `timeout` values in bytes.
pub const MAX_TIME_PARAM_BYTES: usize = 64;
/// Maximum number of `match` selectors.
pub const MAX_MATCHERS: usize = 10;
/// Maximum length of one `match` selector in bytes.
pub const MAX_MATCHER_BYTES: usize = 4096;
/// Maximum `limit` (0 = not sent).
pub const MAX_LIMIT: i64 = 1000;

/// Arguments of the `query` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = non_nullable_properties)]
pub struct QueryArgs {
    /// PromQL/MetricsQL expression (1..16384 bytes, not blank).
    #[schemars(length(min = 1, max = 16384))]
    pub query: String,
    /// Evaluation time (RFC 3339 or Unix seconds, or a relative duration like `-5m`); default now.
    #[schemars(length(max = 64))]
    pub time: Option<String>,
    /// Lookbehind window/step for the instant query (e.g. `5m`).
    #[schemars(length(max = 64))]
    pub step: Option<String>,
    /// Server-side query timeout (e.g. `10s`).
    #[schemars(length(max = 64))]
    pub timeout: Option<String>,
}

/// Arguments of the `query_range` tool.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = non_nullable_properties)]
pub struct QueryRangeArgs {
    /// PromQL/MetricsQL expression (1..16384 bytes, not blank).
    #[schemars(length(min = 1, max = 16384))]
    pub query: String,
    /// Range start (RFC 3339 or Unix seconds, or relative like `-1h`).
    #[schemars(length(min = 1, max = 64))]
    pub start: String,
    /// Range end (RFC 3339 or Unix seconds, or `now`).
    #[schemars(length(min = 1, max = 64))]
    pub end: String,
    /// Resolution step (e.g. `1m` or seconds).
    #[schemars(length(min = 1, max = 64))]
    pub step: String,
}

/// Arguments of a metadata tool: its own fields, then the time range and the limit the three
/// share. A macro rather than a flattened struct, because serde's `flatten` cannot be combined
/// with `deny_unknown_fields`, and a misspelt argument must be refused.
macro_rules! metadata_args {
    ($(#[$doc:meta])* $name:ident, $limited:literal { $($own:tt)* }) => {
        $(#[$doc])*
        #[derive(Debug, Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        #[schemars(transform = non_nullable_properties)]
        pub struct $name {
            $($own)*
            /// Start of the time range.
            #[schemars(length(max = 64))]
            pub start: Option<String>,
            /// End of the time range.
            #[schemars(length(max = 64))]
            pub end: Option<String>,
            #[doc = concat!("Maximum number of ", $limited, " (0..1000; 0 = server default).")]
            #[schemars(range(min = 0, max = 1000))]
            pub limit: Option<i64>,
        }

        impl $name {
            /// Adds the time range and the limit to `params`.
            fn push_window(&self, params: &mut Params) -> Result<(), VmError> {
                push_opt_time(params, "start", self.start.as_deref())?;
                push_opt_time(params, "end", self.end.as_deref())?;
                push_limit(params, self.limit)
            }
        }
    };
}

metadata_args! {
    /// Arguments of the `series` tool.
    SeriesArgs, "series" {
        /// Series selectors, e.g. `["up{job=\"node\"}"]` (1..10 entries, each 1..4096 bytes).
        #[serde(rename = "match")]
        #[schemars(length(min = 1, max = 10), inner(length(min = 1, max = 4096)))]
        pub matchers: Vec<String>,
    }
}

metadata_args! {
    /// Arguments of the `labels` tool.
    LabelsArgs, "label names" {
        /// Optional series selectors restricting the label names (≤ 10 entries, each 1..4096 bytes).
        #[serde(rename = "match")]
        #[schemars(length(max = 10), inner(length(min = 1, max = 4096)))]
        pub matchers: Option<Vec<String>>,
    }
}

metadata_args! {
    /// Arguments of the `label_values` tool.
    LabelValuesArgs, "values" {
        /// Label name (`^[a-zA-Z_][a-zA-Z0-9_]*$`, e.g. `job` or `__name__`).
        #[schemars(regex(pattern = r"^[a-zA-Z_][a-zA-Z0-9_]*$"), length(min = 1, max = 1024))]
        pub label: String,
        /// Optional series selectors restricting the values (≤ 10 entries, each 1..4096 bytes).
        #[serde(rename = "match")]
        #[schemars(length(max = 10), inner(length(min = 1, max = 4096)))]
        pub matchers: Option<Vec<String>>,
    }
}

type Params = Vec<(String, String)>;

/// Optional fields are expressed by omission: turns `"type": ["string", "null"]` into `"type": "string"`
/// so that simple JSON-schema validators (which only know a single `type`) accept the schema.
pub fn non_nullable_properties(schema: &mut schemars::Schema) {
    let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) else {
        return;
    };
    for prop in props.values_mut() {
        let Some(ty) = prop.get_mut("type") else { continue };
        if let Some(types) = ty.as_array() {
            let non_null: Vec<_> = types.iter().filter(|t| t.as_str() != Some("null")).cloned().collect();
            if non_null.len() == 1 {
                *ty = non_null.into_iter().next().unwrap_or_default();
            }
        }
    }
}

/// The input schema advertised for a tool (root `type: object`, strict, no nullable types).
pub fn input_schema<T: schemars::JsonSchema + 'static>() -> Arc<JsonObject> {
    rmcp::handler::server::common::schema_for_input::<T>()
        .unwrap_or_else(|_| rmcp::handler::server::common::schema_for_type::<T>())
}

/// Checks the raw arguments against the tool's schema (unknown/missing arguments, JSON types) with
/// messages naming the argument, then deserializes them.
pub fn parse_args<T: DeserializeOwned + schemars::JsonSchema + 'static>(args: JsonObject) -> Result<T, VmError> {
    let schema = input_schema::<T>();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (key, value) in &args {
            let Some(prop) = props.get(key) else {
                let allowed: Vec<String> = props.keys().map(|k| format!("`{k}`")).collect();
                return Err(invalid(format!(
                    "unknown argument `{}`; allowed arguments: {}",
                    crate::text::truncate_chars(key, 64, crate::text::ELLIPSIS),
                    allowed.join(", ")
                )));
            };
            if value.is_null() {
                continue;
            }
            match prop.get("type").and_then(Value::as_str) {
                Some("string") if !value.is_string() => return Err(invalid(format!("`{key}` must be a string"))),
                Some("integer") if value.as_i64().is_none() => {
                    let min = prop.get("minimum").and_then(Value::as_i64);
                    let max = prop.get("maximum").and_then(Value::as_i64);
                    return Err(invalid(match (min, max) {
                        (Some(min), Some(max)) => format!("`{key}` must be an integer between {min} and {max}"),
                        _ => format!("`{key}` must be an integer"),
                    }));
                }
                Some("array") => {
                    let Some(items) = value.as_array() else {
                        return Err(invalid(format!("`{key}` must be an array of strings")));
                    };
                    if let Some(i) = items.iter().position(|v| !v.is_string()) {
                        return Err(invalid(format!("`{key}[{i}]` must be a string")));
                    }
                }
                _ => {}
            }
        }
    }
    for name in required {
        if args.get(name).is_none_or(Value::is_null) {
            return Err(invalid(format!("missing required argument `{name}`")));
        }
    }
    serde_json::from_value(Value::Object(args)).map_err(|e| invalid(format!("invalid arguments: {e}")))
}

fn invalid(msg: String) -> VmError {
    VmError::InvalidArgument(msg)
}

fn check_query(query: &str) -> Result<(), VmError> {
    if query.trim().is_empty() {
        return Err(invalid("`query` must not be empty or blank".to_owned()));
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(invalid(format!("`query` is {} bytes; the maximum is {MAX_QUERY_BYTES} bytes", query.len())));
    }
    Ok(())
}

fn check_time_value(name: &str, value: &str, required: bool) -> Result<(), VmError> {
    if required && value.trim().is_empty() {
        return Err(invalid(format!("`{name}` is required and must not be empty")));
    }
    if value.len() > MAX_TIME_PARAM_BYTES {
        return Err(invalid(format!("`{name}` is {} bytes; the maximum is {MAX_TIME_PARAM_BYTES} bytes", value.len())));
    }
    if value.contains(['\r', '\n']) {
        return Err(invalid(format!("`{name}` must not contain CR or LF")));
    }
    Ok(())
}

fn push_opt_time(params: &mut Params, name: &str, value: Option<&str>) -> Result<(), VmError> {
    if let Some(v) = value {
        check_time_value(name, v, false)?;
        if !v.trim().is_empty() {
            params.push((name.to_owned(), v.trim().to_owned()));
        }
    }
    Ok(())
}

fn push_matchers(params: &mut Params, matchers: Option<&[String]>, required: bool) -> Result<(), VmError> {
    let matchers = matchers.unwrap_or_default();
    if required && matchers.is_empty() {
        return Err(invalid(format!(
            "`match` must contain at least one series selector (1..{MAX_MATCHERS}), e.g. [\"up\"]"
        )));
    }
    if matchers.len() > MAX_MATCHERS {
        return Err(invalid(format!("`match` has {} selectors; the maximum is {MAX_MATCHERS}", matchers.len())));
    }
    for (i, m) in matchers.iter().enumerate() {
        if m.trim().is_empty() {
            return Err(invalid(format!("`match[{i}]` must not be empty")));
        }
        if m.len() > MAX_MATCHER_BYTES {
            return Err(invalid(format!(
                "`match[{i}]` is {} bytes; the maximum is {MAX_MATCHER_BYTES} bytes",
                m.len()
            )));
        }
        params.push(("match[]".to_owned(), m.clone()));
    }
    Ok(())
}

fn push_limit(params: &mut Params, limit: Option<i64>) -> Result<(), VmError> {
    match limit {
        None | Some(0) => Ok(()),
        Some(l) if (1..=MAX_LIMIT).contains(&l) => {
            params.push(("limit".to_owned(), l.to_string()));
            Ok(())
        }
        Some(l) => Err(invalid(format!("`limit` must be between 0 and {MAX_LIMIT} (0 = not sent), got {l}"))),
    }
}

impl QueryArgs {
    /// Validates the arguments and returns the request parameters.
    pub fn to_params(&self) -> Result<Params, VmError> {
        check_query(&self.query)?;
        let mut params = vec![("query".to_owned(), self.query.clone())];
        push_opt_time(&mut params, "time", self.time.as_deref())?;
        push_opt_time(&mut params, "step", self.step.as_deref())?;
        push_opt_time(&mut params, "timeout", self.timeout.as_deref())?;
        Ok(params)
    }
}

impl QueryRangeArgs {
    pub fn to_params(&self) -> Result<Params, VmError> {
        check_query(&self.query)?;
        let mut params = vec![("query".to_owned(), self.query.clone())];
        for (name, value) in [("start", &self.start), ("end", &self.end), ("step", &self.step)] {
            check_time_value(name, value, true)?;
            params.push((name.to_owned(), value.trim().to_owned()));
        }
        Ok(params)
    }
}

impl SeriesArgs {
    pub fn to_params(&self) -> Result<Params, VmError> {
        let mut params = Vec::new();
        push_matchers(&mut params, Some(&self.matchers), true)?;
        self.push_window(&mut params)?;
        Ok(params)
    }
}

impl LabelsArgs {
    pub fn to_params(&self) -> Result<Params, VmError> {
        let mut params = Vec::new();
        push_matchers(&mut params, self.matchers.as_deref(), false)?;
        self.push_window(&mut params)?;
        Ok(params)
    }
}

impl LabelValuesArgs {
    pub fn to_endpoint_and_params(&self) -> Result<(Endpoint, Params), VmError> {
        let endpoint = Endpoint::label_values(&self.label)?;
        let mut params = Vec::new();
        push_matchers(&mut params, self.matchers.as_deref(), false)?;
        self.push_window(&mut params)?;
        Ok((endpoint, params))
    }
}

/// MCP server with the tools `query`, `query_range`, `series`, `labels`, `label_values`.
#[derive(Debug, Clone)]
pub struct VictoriaMetricsServer {
    client: Arc<VmClient>,
    tool_router: ToolRouter<Self>,
}

impl VictoriaMetricsServer {
    pub fn new(client: Arc<VmClient>) -> Self {
        Self { client, tool_router: Self::tool_router() }
    }

    async fn run(&self, endpoint: Result<(Endpoint, Params), VmError>) -> CallToolResult {
        let outcome = match endpoint {
            Ok((endpoint, params)) => self.client.call(&endpoint, &params).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        }
    }
}

#[tool_router]
impl VictoriaMetricsServer {
    #[tool(
        description = "Evaluate a PromQL/MetricsQL instant query against VictoriaMetrics (/api/v1/query). \
                       Returns the raw VictoriaMetrics JSON {status, data:{resultType, result}}.",
        input_schema = input_schema::<QueryArgs>(),
        annotations(
            title = "VictoriaMetrics instant query",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn query(&self, Parameters(args): Parameters<JsonObject>) -> Result<CallToolResult, McpError> {
        Ok(self.run(parse_args::<QueryArgs>(args).and_then(|a| a.to_params()).map(|p| (Endpoint::Query, p))).await)
    }

    #[tool(
        description = "Evaluate a PromQL/MetricsQL range query (/api/v1/query_range) between `start` and `end` \
                       with resolution `step`. Returns the raw VictoriaMetrics JSON (resultType matrix).",
        input_schema = input_schema::<QueryRangeArgs>(),
        annotations(
            title = "VictoriaMetrics range query",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn query_range(&self, Parameters(args): Parameters<JsonObject>) -> Result<CallToolResult, McpError> {
        Ok(self
            .run(parse_args::<QueryRangeArgs>(args).and_then(|a| a.to_params()).map(|p| (Endpoint::QueryRange, p)))
            .await)
    }

    #[tool(
        description = "List time series matching the series selectors in `match` (/api/v1/series). \
                       Returns the raw VictoriaMetrics JSON (data: array of label sets).",
        input_schema = input_schema::<SeriesArgs>(),
        annotations(
            title = "VictoriaMetrics series",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn series(&self, Parameters(args): Parameters<JsonObject>) -> Result<CallToolResult, McpError> {
        Ok(self.run(parse_args::<SeriesArgs>(args).and_then(|a| a.to_params()).map(|p| (Endpoint::Series, p))).await)
    }

    #[tool(
        description = "List label names, optionally restricted to series matching `match` (/api/v1/labels).",
        input_schema = input_schema::<LabelsArgs>(),
        annotations(
            title = "VictoriaMetrics label names",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn labels(&self, Parameters(args): Parameters<JsonObject>) -> Result<CallToolResult, McpError> {
        Ok(self.run(parse_args::<LabelsArgs>(args).and_then(|a| a.to_params()).map(|p| (Endpoint::Labels, p))).await)
    }

    #[tool(
        description = "List the values of one label (/api/v1/label/<label>/values), optionally restricted to \
                       series matching `match`. Use label `__name__` to list metric names.",
        input_schema = input_schema::<LabelValuesArgs>(),
        annotations(
            title = "VictoriaMetrics label values",
            read_only_hint = true,
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = true
        )
    )]
    async fn label_values(&self, Parameters(args): Parameters<JsonObject>) -> Result<CallToolResult, McpError> {
        Ok(self.run(parse_args::<LabelValuesArgs>(args).and_then(|a| a.to_endpoint_and_params())).await)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for VictoriaMetricsServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Read-only access to VictoriaMetrics (Prometheus-compatible query API). Tools return the raw \
                 VictoriaMetrics JSON as structured content. Prefer selective matchers, short ranges and limits.",
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        let mut p = Vec::new();
        assert!(push_limit(&mut p, Some(1001)).unwrap_err().to_string().contains("between 0 and 1000"));
        assert!(push_limit(&mut p, Some(-1)).is_err());
        push_limit(&mut p, Some(0)).unwrap();
        assert!(p.is_empty());
        push_limit(&mut p, Some(1000)).unwrap();
        assert_eq!(p, vec![("limit".to_owned(), "1000".to_owned())]);
    }

    #[test]
    fn series_requires_match() {
        let args = SeriesArgs { matchers: vec![], start: None, end: None, limit: None };
        assert!(args.to_params().unwrap_err().to_string().contains("at least one"));
        let args = SeriesArgs { matchers: vec!["up".into(); 11], start: None, end: None, limit: None };
        assert!(args.to_params().unwrap_err().to_string().contains("maximum is 10"));
    }

    #[test]
    fn query_bounds() {
        let args = QueryArgs { query: "  ".into(), time: None, step: None, timeout: None };
        assert!(args.to_params().is_err());
        let args = QueryArgs { query: "a".repeat(MAX_QUERY_BYTES + 1), time: None, step: None, timeout: None };
        assert!(args.to_params().unwrap_err().to_string().contains("16384"));
        let args = QueryArgs { query: "up".into(), time: Some("1\n2".into()), step: None, timeout: None };
        assert!(args.to_params().unwrap_err().to_string().contains("CR or LF"));
    }

    #[test]
    fn schema_is_strict() {
        let schema = rmcp::handler::server::common::schema_for_type::<SeriesArgs>();
        assert_eq!(schema.get("additionalProperties"), Some(&serde_json::Value::Bool(false)));
        let props = schema.get("properties").and_then(|p| p.as_object()).unwrap();
        assert!(props.contains_key("match"));
    }
}
