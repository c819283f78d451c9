//! The run engine: the run loop and the pieces it is made of. Pure pieces
//! (budget, planning rules, skills, conversation checks, global instructions)
//! sit beside the steps of a Run, its audit bookkeeping and the structuring call.

mod bare_calls;
pub mod budget;
pub(crate) mod context;
pub mod conversation;
pub(crate) mod fit;
pub(crate) mod instructions;
pub(crate) mod knowledge_tools;
pub mod plan;
mod planning;
pub mod progress;
pub(crate) mod record;
pub mod request;
pub mod retrieval;
pub mod run;
pub(crate) mod skills;
mod state;
mod steps;
mod structuring;
mod submit_tool;
mod verdicts;

pub use steps::ANSWER_FROM_RESULTS;
