//! The bot gateway core (Telegram, Mattermost and Slack): decoding what the providers send
//! ([`ingress`], [`slack`]), bot commands ([`commands`]), durable sessions and dedup ([`sessions`]) and
//! the bounded, per-conversation ordered queue that answers messages ([`gateway`]).
//!
//! The gateway talks to the engine, the provider APIs and the incident store only through
//! the traits in [`gateway`]. [`host`] runs the bots: the receivers, the webhook entry point
//! the HTTP routes (`web::bots`) call, the Telegram poller and the production implementations
//! of those traits; messages reach the gateway through [`Gateway::submit`].

pub mod commands;
pub(crate) mod connections;
pub(crate) mod gateway;
pub(crate) mod host;
pub(crate) mod ingress;
pub mod sessions;
pub(crate) mod slack;
pub(crate) mod slack_bot;
pub(crate) mod websocket;

pub use commands::Command;
pub use gateway::{
    Accepted, Answer, BoxFuture, Gateway, GatewaySettings, IncidentLookup, Replier, Responder, SubmitError,
};
pub use ingress::{Allowlists, Inbound, Provider, Refusal, mattermost, telegram_update, telegram_webhook};
pub use sessions::{SessionError, SessionKey, SessionOptions, SessionStore, Turn};
