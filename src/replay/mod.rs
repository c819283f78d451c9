//! Export and replay: a finished Run becomes a case (its input, the
//! catalog it ran with, every tool call with its recorded result, the outcome), and
//! a case runs again through the real engine against any model, prompt or skill
//! version, with tools answered from the recording: offline and deterministic on
//! the tool side.

pub(crate) mod case;
pub(crate) mod export;
pub(crate) mod protocol;
pub(crate) mod recorded;
pub(crate) mod run;

pub use case::{Case, CaseError};
pub use export::{ExportCatalog, ExportError, export};
pub use protocol::{PlanStep, Protocol, ResultStep};
pub use run::{ReplayError, ReplayOutcome, ReplayedCall, SkillSource, replay};
