//! The run engine. This foundation holds the global model instructions; the run
//! loop builds on it.

pub mod budget;
pub mod conversation;
pub mod instructions;
pub mod language;
pub mod plan;
pub mod skills;
