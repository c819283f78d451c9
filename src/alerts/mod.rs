//! Alert pipeline, pure part: canonical event model (upstream §6.1), provider adapters (§6.2) and
//! deduplication/correlation decisions (§6.4). No I/O happens in this module.

pub mod adapters;
pub mod correlate;
pub mod event;
pub mod store;
pub mod worker;

pub use adapters::{Adapter, AdapterError, adapter};
pub use correlate::{Decision, IncidentState, IncidentStatus, decide};
pub use event::{Entity, Event, EventState, Link, Severity, Source};
