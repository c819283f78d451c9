//! The run engine: the run loop and the pure pieces it is made of (budget,
//! planning, skills, conversation checks, language, global instructions).

pub mod budget;
pub mod conversation;
pub mod instructions;
pub mod knowledge_tools;
pub mod plan;
pub mod run;
pub mod skills;
