//! Alert pipeline, in three parts: [`intake`] decides what a webhook's alerts are and what
//! becomes of them (canonical event, provider adapters, deduplication, correlation, admission)
//! without I/O; [`store`] makes those decisions durable (the alert journal, its state,
//! snapshots and reads); [`worker`] investigates the pending jobs and sends what they found.

pub(crate) mod intake;
pub mod store;
pub mod worker;

pub use intake::{adapters, admission, correlate, event, id, signature};
pub use store::{job, record};
pub use worker::{delivery, request, source_status};

pub use intake::adapters::{Adapter, AdapterError, adapter};
pub use intake::correlate::{Decision, IncidentState, IncidentStatus, decide};
pub use intake::event::{Entity, Event, EventState, Link, Severity, Source};
