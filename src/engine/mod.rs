//! The run engine. This foundation holds the global model instructions; the run
//! loop builds on it.

pub mod instructions;
