//! Outbound incident notifications: pure formatting in
//! [`message`], HTTP delivery with retries in [`deliver`]; bot replies through the
//! Telegram and Mattermost APIs, and the text rules they follow, in [`chat`]; the Slack
//! Web API in [`slack`].

pub mod cause;
pub mod chat;
pub mod deliver;
mod error;
pub(crate) mod message;
pub(crate) mod routing;
pub mod slack;
mod target;
pub(crate) mod thread;

pub use cause::Cause;
pub use deliver::{
    DeliveryError, DeliveryOutcome, RetryPolicy, TELEGRAM_DEFAULT_BASE_URL, Target, deliver, deliver_all,
    deliver_payload, new_delivery_id, signature_header,
};
pub use message::{
    AlertStatus, FailedNotice, Notification, Payload, ResolvedNotice, ScheduleNotice, mattermost_text, resolved_text,
    run_url, telegram_text, webhook_body,
};
pub use thread::{ThreadedOutcome, deliver_threaded};
