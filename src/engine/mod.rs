//! The run engine. This foundation holds the global model instructions; the run
//! loop builds on it.

pub mod budget;
pub mod conversation;
pub mod instructions;
pub mod knowledge_tools;
pub mod language;
pub mod plan;
pub mod run;
pub mod skills;
