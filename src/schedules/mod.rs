//! Scheduled checks (`RunSchedule`, docs/schedules.md): read-only investigations run on a
//! cron schedule by the leader, each tick journaled once ([`store`]) before its Run starts,
//! each result compared with the one before ([`compare`]) so receivers hear only what
//! changed, in the schedule's own thread.

pub mod clock;
pub(crate) mod compare;
pub mod decide;
pub(crate) mod report;
pub mod scheduler;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use scheduler::{RunNowError, Scheduler, SchedulerParts, SchedulerSettings};
pub use store::ScheduleStore;
