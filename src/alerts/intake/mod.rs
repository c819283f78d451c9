//! Intake: what a webhook's alerts are and what becomes of them, decided without I/O — the
//! canonical event, provider adapters, deduplication and correlation, admission of new
//! investigations, the HMAC signatures of deliveries.

pub mod adapters;
pub mod admission;
pub mod correlate;
pub mod event;
pub mod id;
pub mod signature;
pub(in crate::alerts) mod window;
