//! Alert pipeline: canonical event model, provider adapters, deduplication and
//! correlation decisions — all pure — then the durable store, the investigation
//! worker and what it delivers.

pub mod adapters;
pub mod admission;
pub mod correlate;
mod deferred;
pub mod delivery;
mod error;
pub mod event;
pub mod id;
pub mod job;
mod outbox;
mod reads;
pub mod record;
pub mod request;
mod saved;
mod snapshots;
pub mod source_status;
mod state;
pub mod store;
mod threads;
mod told;
mod window;
pub mod worker;

pub use adapters::{Adapter, AdapterError, adapter};
pub use correlate::{Decision, IncidentState, IncidentStatus, decide};
pub use event::{Entity, Event, EventState, Link, Severity, Source};
