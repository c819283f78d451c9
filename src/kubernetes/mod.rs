//! Built-in read-only Kubernetes tools (`kubernetes.*`): get and list of any kind
//! (never Secrets), pod status with its owner chain, events, logs, rollout history,
//! node status and recent changes. Registered by the host in operator mode, and
//! standalone when a kubeconfig is given, through the same tool registry as every
//! other tool (schema, permission `read`, timeout, bounded result, audit).
//!
//! Every registry is bound to one Run's [`Access`] (see [`access`]): a call can
//! only read what that Run's namespace may read. Every output is redacted by
//! [`redact::scrub`] and says what was redacted.

pub(crate) mod access;
pub(crate) mod api;
mod changes;
mod events;
mod logs;
mod nodes;
mod objects;
mod pods;
pub(crate) mod redact;
mod rollouts;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

pub use access::{Access, Reach, ScopePolicy};
use api::{Ctx, ResolvedKinds};
pub use api::{Failure, Limits};

use crate::resources::mcp_adapter::Permission;
use crate::tools::{
    Registry, RegistryBuilder, RegistryError, ScopedTools, ToolFuture, ToolHandler, ToolLimits, ToolSpec,
};

/// The future a tool's body returns.
type Body = Pin<Box<dyn Future<Output = Result<Value, Failure>> + Send>>;

/// One tool of the family.
struct Definition {
    name: &'static str,
    description: &'static str,
    schema: Value,
    timeout: Duration,
    run: fn(Ctx, Value) -> Body,
}

fn definitions(limits: &Limits) -> Vec<Definition> {
    let quick = Duration::from_secs(15);
    vec![
        Definition {
            name: objects::GET,
            description: objects::GET_DESCRIPTION,
            schema: objects::get_schema(),
            timeout: quick,
            run: |ctx, args| Box::pin(objects::get(ctx, args)),
        },
        Definition {
            name: objects::LIST,
            description: objects::LIST_DESCRIPTION,
            schema: objects::list_schema(limits),
            timeout: quick,
            run: |ctx, args| Box::pin(objects::list(ctx, args)),
        },
        Definition {
            name: pods::POD_STATUS,
            description: pods::POD_STATUS_DESCRIPTION,
            schema: pods::schema(),
            timeout: quick,
            run: |ctx, args| Box::pin(pods::pod_status(ctx, args)),
        },
        Definition {
            name: nodes::NODE_STATUS,
            description: nodes::NODE_STATUS_DESCRIPTION,
            schema: nodes::schema(),
            timeout: Duration::from_secs(30),
            run: |ctx, args| Box::pin(nodes::node_status(ctx, args)),
        },
        Definition {
            name: rollouts::ROLLOUT_HISTORY,
            description: rollouts::ROLLOUT_HISTORY_DESCRIPTION,
            schema: rollouts::schema(),
            timeout: quick,
            run: |ctx, args| Box::pin(rollouts::rollout_history(ctx, args)),
        },
        Definition {
            name: events::NAME,
            description: events::DESCRIPTION,
            schema: events::schema(),
            timeout: quick,
            run: |ctx, args| Box::pin(events::events(ctx, args)),
        },
        Definition {
            name: logs::NAME,
            description: logs::DESCRIPTION,
            schema: logs::schema(limits),
            timeout: Duration::from_secs(30),
            run: |ctx, args| Box::pin(logs::logs(ctx, args)),
        },
        Definition {
            name: changes::NAME,
            description: changes::DESCRIPTION,
            schema: changes::schema(),
            timeout: Duration::from_secs(30),
            run: |ctx, args| Box::pin(changes::recent_changes(ctx, args)),
        },
    ]
}

/// Names of every tool of the family.
pub fn tool_names() -> Vec<&'static str> {
    definitions(&Limits::default()).iter().map(|d| d.name).collect()
}

/// Most namespaces whose registries are kept built.
const MAX_CACHED: usize = 256;

/// The tool family for one cluster; hands each Run the tools bound to its scope.
pub struct KubeTools {
    client: kube::Client,
    policy: ScopePolicy,
    limits: Limits,
    resolved: Arc<Mutex<ResolvedKinds>>,
    built: Mutex<BTreeMap<String, Registry>>,
}

impl KubeTools {
    /// The family reading through `client`, scoped by `policy`.
    pub fn new(client: kube::Client, policy: ScopePolicy, limits: Limits) -> Self {
        Self { client, policy, limits, resolved: Arc::default(), built: Mutex::default() }
    }

    /// Every tool of the family bound to `access`.
    pub fn registry(&self, access: Access) -> Result<Registry, RegistryError> {
        let ctx = Ctx::new(self.client.clone(), access, self.limits, self.resolved.clone());
        let mut builder = RegistryBuilder::new(ToolLimits::default());
        for definition in definitions(&self.limits) {
            let spec =
                ToolSpec::new(definition.name.parse()?, definition.description, Permission::Read, definition.schema)
                    .with_timeout(definition.timeout);
            let (ctx, run) = (ctx.clone(), definition.run);
            let handler = move |args: Value| -> ToolFuture {
                let body = run(ctx.clone(), args);
                Box::pin(async move { finish(body.await) })
            };
            builder.register(spec, Arc::new(handler) as Arc<dyn ToolHandler>)?;
        }
        Ok(builder.build())
    }
}

impl ScopedTools for KubeTools {
    fn registry_for(&self, namespace: &str) -> Registry {
        if let Some(registry) = self.built.lock().unwrap_or_else(|p| p.into_inner()).get(namespace) {
            return registry.clone();
        }
        let registry = match self.registry(self.policy.access_for(namespace)) {
            Ok(registry) => registry,
            Err(error) => {
                tracing::error!(%error, "the Kubernetes tools cannot be registered");
                RegistryBuilder::new(ToolLimits::default()).build()
            }
        };
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if built.len() >= MAX_CACHED {
            built.clear();
        }
        built.insert(namespace.to_string(), registry.clone());
        registry
    }
}

/// The output as JSON text, redacted, with what was redacted; a failure's message
/// redacted too.
fn finish(result: Result<Value, Failure>) -> Result<String, String> {
    match result {
        Ok(mut output) => {
            let counts = redact::scrub(&mut output);
            if let Value::Object(map) = &mut output {
                map.insert("redacted".to_string(), serde_json::to_value(counts).unwrap_or(Value::Null));
            }
            serde_json::to_string(&output).map_err(|e| format!("the output is not serializable: {e}"))
        }
        Err(failure) => Err(redact::mask_text(failure.message()).0),
    }
}
