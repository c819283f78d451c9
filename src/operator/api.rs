//! The Kubernetes API as every operator part addresses it: the API resource of an
//! Akritas kind, a dynamic `Api` over it, the field manager of everything the
//! operator writes, and the generations a scan saw.

use std::collections::BTreeMap;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client};

use crate::catalog::ObjectKey;
use crate::resources::{GROUP, Kind, VERSION};

/// Field manager of everything the operator writes.
pub const FIELD_MANAGER: &str = "akritas";

/// Generations of the objects a scan saw (for `observedGeneration`).
pub type Generations = BTreeMap<ObjectKey, i64>;

/// The API resource of an Akritas kind.
pub fn api_resource(kind: Kind) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind.as_str()), &kind.plural())
}

/// An `Api` for a kind in one namespace, or across all.
pub fn dynamic_api(client: &Client, kind: Kind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource = api_resource(kind);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}
