//! The bot gateway: a bounded queue of accepted messages, worked off with the messages of one
//! session strictly in order and different sessions concurrently; the dedup ids, sessions and
//! unanswered messages are kept durable by [`SessionStore`].
//!
//! The gateway reaches the outside world only through [`Responder`] (the read-only engine),
//! [`Replier`] (the provider API) and [`IncidentLookup`] (the incident store). A message is
//! answered at least once: an accepted message a crash left unanswered is answered after the
//! restart, and one whose answer was recorded is never answered again (a crash between the
//! provider accepting the reply and the record being written is the only repeat).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::commands::{self, Command};
use super::ingress::Inbound;
use super::sessions::{SessionError, SessionKey, SessionStore, Turn};

/// A boxed future that may be sent between threads.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The model's answer to one bot question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The text to send back.
    pub text: String,
    /// The Run that produced it, when one was recorded.
    pub run_id: Option<String>,
}

/// Answers a question with the conversation's history (the engine, in production).
pub trait Responder: Send + Sync {
    /// Answers `question` from `inbound`'s sender, given the session's earlier turns. The
    /// error is for the log only (never shown to the person); it must not hold secrets.
    fn answer<'a>(
        &'a self,
        inbound: &'a Inbound,
        history: &'a [Turn],
        question: &'a str,
    ) -> BoxFuture<'a, Result<Answer, String>>;
}

/// Describes incidents for `/incident ID`.
pub trait IncidentLookup: Send + Sync {
    /// The state and latest result of incident `id` in `namespace`, or `None` if it has none
    /// (or the store cannot be read now).
    fn describe<'a>(&'a self, namespace: &'a str, id: &'a str) -> BoxFuture<'a, Option<String>>;
}

/// Sends a reply into the conversation a message came from (the provider API).
pub trait Replier: Send + Sync {
    /// Replies to `inbound` with `text`; `Ok` once the provider accepted it.
    fn reply<'a>(&'a self, inbound: &'a Inbound, text: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

/// How much the gateway holds and does at once.
#[derive(Clone, Debug)]
pub struct GatewaySettings {
    /// Most accepted messages waiting or in work; a further one is refused with [`SubmitError::Full`].
    pub queue_size: usize,
    /// Most messages (of different sessions) in work at once.
    pub concurrency: usize,
    /// Longest wait for one answer; after it the person gets the failure reply.
    pub answer_timeout: Duration,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings { queue_size: 64, concurrency: 4, answer_timeout: Duration::from_secs(300) }
    }
}

/// A message taken by [`Gateway::submit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// It was accepted before (same event id): acknowledged, not processed again.
    pub duplicate: bool,
}

/// Why [`Gateway::submit`] did not take a message; the HTTP layer answers 503 so the
/// provider retries. Nothing was recorded.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue holds `limit` messages already.
    #[error("the bot queue is full ({limit} messages waiting); the provider should retry later")]
    Full {
        /// The queue size.
        limit: usize,
    },
    /// The message could not be recorded durably.
    #[error("the bot message could not be recorded: {0}")]
    Store(#[from] SessionError),
}

/// A queued message and the queue slot it holds until it is answered.
struct Queued {
    inbound: Inbound,
    _slot: Option<OwnedSemaphorePermit>,
}

/// The bot gateway; see the module docs.
pub struct Gateway {
    store: SessionStore,
    responder: Arc<dyn Responder>,
    replier: Arc<dyn Replier>,
    incidents: Arc<dyn IncidentLookup>,
    settings: GatewaySettings,
    slots: Arc<Semaphore>,
    tx: mpsc::UnboundedSender<Queued>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Queued>>>,
}

/// Messages waiting per session; a key is present while a lane task works that session.
type Lanes = Arc<Mutex<HashMap<SessionKey, VecDeque<Queued>>>>;

impl Gateway {
    /// A gateway over `store`; the messages the store holds as accepted but unanswered (left
    /// by a restart) are queued first, oldest first.
    pub fn new(
        store: SessionStore,
        responder: Arc<dyn Responder>,
        replier: Arc<dyn Replier>,
        incidents: Arc<dyn IncidentLookup>,
        settings: GatewaySettings,
    ) -> Self {
        let slots = Arc::new(Semaphore::new(settings.queue_size.max(1)));
        let (tx, rx) = mpsc::unbounded_channel();
        for inbound in store.pending() {
            // More left over than the queue holds (a smaller queue after a restart) still runs.
            let slot = slots.clone().try_acquire_owned().ok();
            let _ = tx.send(Queued { inbound, _slot: slot });
        }
        Gateway { store, responder, replier, incidents, settings, slots, tx, rx: Mutex::new(Some(rx)) }
    }

    /// The session store.
    pub fn store(&self) -> &SessionStore {
        &self.store
    }

    /// Durably records the message's event id and queues it. A repeat of an accepted id is
    /// acknowledged as a duplicate and not processed again; a full queue refuses it
    /// ([`SubmitError::Full`]) and records nothing, so the provider's retry is not a duplicate.
    pub async fn submit(&self, inbound: Inbound) -> Result<Accepted, SubmitError> {
        if self.store.is_duplicate(&inbound.event_id) {
            return Ok(Accepted { duplicate: true });
        }
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            return Err(SubmitError::Full { limit: self.settings.queue_size.max(1) });
        };
        if !self.store.accept(&inbound).await? {
            return Ok(Accepted { duplicate: true });
        }
        tracing::debug!(component = "akritas_bots", provider = inbound.provider.as_str(), receiver = %inbound.receiver, event_id = %inbound.event_id, "bot message accepted");
        // The receiver lives in `self`: sending fails only once `run` ended, and then the
        // message stays pending in the store and is answered after the restart.
        let _ = self.tx.send(Queued { inbound, _slot: Some(slot) });
        Ok(Accepted { duplicate: false })
    }

    /// Works off the queue until `cancel`: one lane per session (strict order), at most
    /// `concurrency` messages in work. On cancellation, a message whose answer is still being
    /// made is abandoned (it stays pending in the store and is answered after the restart);
    /// one whose reply is being sent is sent and recorded first, so no message is answered
    /// twice. Every task is joined. Runs once per gateway.
    pub async fn run(self: Arc<Self>, cancel: CancellationToken) {
        let taken = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut rx) = taken else {
            tracing::warn!(component = "akritas_bots", "the bot gateway is already running");
            return;
        };
        let lanes: Lanes = Arc::default();
        let workers = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let tracker = TaskTracker::new();
        let mut prune = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                biased;
                () = cancel.cancelled() => break,
                queued = rx.recv() => match queued {
                    Some(queued) => self.dispatch(queued, &lanes, &workers, &tracker, &cancel),
                    None => break,
                },
                _ = prune.tick() => self.store.prune_expired(),
            }
        }
        tracker.close();
        tracker.wait().await;
    }

    /// Puts a message in its session's lane, starting a lane task when none works it.
    fn dispatch(
        self: &Arc<Self>,
        queued: Queued,
        lanes: &Lanes,
        workers: &Arc<Semaphore>,
        tracker: &TaskTracker,
        cancel: &CancellationToken,
    ) {
        let key = SessionKey::of(&queued.inbound);
        {
            let mut lanes = lanes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(waiting) = lanes.get_mut(&key) {
                waiting.push_back(queued);
                return;
            }
            lanes.insert(key.clone(), VecDeque::new());
        }
        let (this, lanes, workers, cancel) = (self.clone(), lanes.clone(), workers.clone(), cancel.clone());
        tracker.spawn(async move {
            let mut next = queued;
            loop {
                let permit = tokio::select! {
                    () = cancel.cancelled() => return,
                    permit = workers.acquire() => match permit {
                        Ok(permit) => permit,
                        Err(_) => return,
                    },
                };
                this.process(&next.inbound, &cancel).await;
                drop(permit);
                if cancel.is_cancelled() {
                    return;
                }
                let mut lanes = lanes.lock().unwrap_or_else(|p| p.into_inner());
                match lanes.get_mut(&key).and_then(VecDeque::pop_front) {
                    Some(queued) => next = queued,
                    None => {
                        lanes.remove(&key);
                        return;
                    }
                }
            }
        });
    }

    /// Answers one message and records the outcome. On `cancel` before its reply is sent the
    /// message is left pending; a reply once sent is always recorded.
    async fn process(&self, inbound: &Inbound, cancel: &CancellationToken) {
        let key = SessionKey::of(inbound);
        // What other replicas recorded (turns, resets) before this answer reads the session.
        let refreshed = tokio::select! {
            () = cancel.cancelled() => return,
            refreshed = self.store.refresh() => refreshed,
        };
        if let Err(error) = refreshed {
            tracing::error!(component = "akritas_bots", event_id = %inbound.event_id, %error, "could not read the bot sessions; the message is answered again after a restart");
            return;
        }
        let recorded = match commands::parse(&inbound.text) {
            Command::Help => self.reply_done(inbound, commands::HELP).await,
            Command::Unsupported(text) => self.reply_done(inbound, &text).await,
            Command::Status => {
                let text = commands::status_text(self.store.retained_messages(&key), self.store.history_limit());
                self.reply_done(inbound, &text).await
            }
            Command::Incident(id) => {
                let text = self
                    .incidents
                    .describe(inbound.namespace(), &id)
                    .await
                    .unwrap_or_else(|| commands::incident_not_found(&id));
                self.reply_done(inbound, &text).await
            }
            Command::New => {
                self.deliver(inbound, commands::RESET).await;
                self.store.reset(&key, &inbound.event_id).await
            }
            Command::Ask(question) | Command::Chat(question) => self.chat(inbound, &key, &question, cancel).await,
        };
        if let Err(error) = recorded {
            tracing::error!(component = "akritas_bots", event_id = %inbound.event_id, %error, "could not record a bot answer; the message is answered again after a restart");
        }
    }

    async fn chat(
        &self,
        inbound: &Inbound,
        key: &SessionKey,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<(), SessionError> {
        let history = self.store.history(key);
        let answering =
            tokio::time::timeout(self.settings.answer_timeout, self.responder.answer(inbound, &history, question));
        let answered = tokio::select! {
            // Abandoned before anything was sent: the message stays pending.
            () = cancel.cancelled() => return Ok(()),
            answered = answering => answered,
        };
        let answered = answered.unwrap_or_else(|_| Err(format!("no answer within {:?}", self.settings.answer_timeout)));
        match answered {
            Ok(answer) => {
                tracing::info!(component = "akritas_bots", event_id = %inbound.event_id, run_id = answer.run_id.as_deref().unwrap_or(""), "bot question answered");
                if self.deliver(inbound, &answer.text).await {
                    self.store.record_turn(key, &inbound.event_id, question, &answer.text).await
                } else {
                    self.store.done(&inbound.event_id).await
                }
            }
            Err(error) => {
                tracing::warn!(component = "akritas_bots", event_id = %inbound.event_id, %error, "bot question failed");
                self.reply_done(inbound, commands::FAILURE).await
            }
        }
    }

    async fn reply_done(&self, inbound: &Inbound, text: &str) -> Result<(), SessionError> {
        self.deliver(inbound, text).await;
        self.store.done(&inbound.event_id).await
    }

    /// Sends a reply; `false` (logged) when the provider did not take it.
    async fn deliver(&self, inbound: &Inbound, text: &str) -> bool {
        match self.replier.reply(inbound, text).await {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(component = "akritas_bots", provider = inbound.provider.as_str(), receiver = %inbound.receiver, event_id = %inbound.event_id, %error, "bot reply failed");
                false
            }
        }
    }
}
