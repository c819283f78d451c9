//! What a Run reports while it executes, for callers that show it as it happens
//! (the facade's streaming): the Run opened, the plan, each tool's outcome,
//! skills joining, and the answer's text as the model streams it.
//!
//! The sink is a bounded channel. A consumer that stops taking events (it went
//! away, or stalled for [`SEND_TIMEOUT`]) never holds the Run back: the sink is
//! abandoned, the Run goes on to its end and is recorded as usual, and the
//! consumer can tell from [`ProgressReceiver::complete`] that it missed events.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::audit::RunId;

/// Longest wait for the consumer to take one event before the sink is abandoned.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// One step of an executing Run, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunProgress {
    /// The Run is open (its id, absent when the audit is disabled); always first.
    Started {
        /// Audit id.
        run_id: Option<RunId>,
    },
    /// The plan was validated: the tools of its checks, in order (empty when the
    /// model planned nothing or the plan was rejected).
    Plan {
        /// Tool of each planned check.
        checks: Vec<String>,
    },
    /// A tool call ended (retrieval, planned checks, adaptive calls).
    Tool {
        /// Host tool name.
        name: String,
        /// Host call id.
        id: String,
        /// `ok` or the error code.
        status: String,
        /// Wall time of the call in milliseconds, as the tool registry measured it.
        duration_ms: u64,
    },
    /// Skills joined the Run (all selected so far).
    Skills {
        /// Skill names.
        names: Vec<String>,
    },
    /// A piece of the model's text in the answer phase, as it arrived.
    AnswerDelta(String),
}

/// The sending side, carried by a `RunRequest`.
#[derive(Clone, Debug)]
pub struct ProgressSink {
    sender: mpsc::Sender<RunProgress>,
    abandoned: Arc<AtomicBool>,
}

/// The receiving side: events until the Run ends (then `recv` gives `None`).
#[derive(Debug)]
pub struct ProgressReceiver {
    receiver: mpsc::Receiver<RunProgress>,
    abandoned: Arc<AtomicBool>,
}

/// A sink and its receiver holding at most `capacity` events in between.
pub fn channel(capacity: usize) -> (ProgressSink, ProgressReceiver) {
    let (sender, receiver) = mpsc::channel(capacity.max(1));
    let abandoned = Arc::new(AtomicBool::new(false));
    (ProgressSink { sender, abandoned: abandoned.clone() }, ProgressReceiver { receiver, abandoned })
}

impl ProgressSink {
    /// Hands one event to the consumer; gives up on the sink (for the rest of the
    /// Run) when the consumer is gone or does not take it within [`SEND_TIMEOUT`].
    pub async fn emit(&self, event: RunProgress) {
        if self.abandoned.load(Ordering::Relaxed) {
            return;
        }
        let delivered = matches!(tokio::time::timeout(SEND_TIMEOUT, self.sender.send(event)).await, Ok(Ok(())));
        if !delivered {
            self.abandoned.store(true, Ordering::Relaxed);
        }
    }

    /// Whether events are still delivered.
    pub fn is_open(&self) -> bool {
        !self.abandoned.load(Ordering::Relaxed)
    }
}

impl ProgressReceiver {
    /// The next event; `None` once every sink is dropped (the Run has ended).
    pub async fn recv(&mut self) -> Option<RunProgress> {
        self.receiver.recv().await
    }

    /// Whether every event was delivered (the sink was never abandoned).
    pub fn complete(&self) -> bool {
        !self.abandoned.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn events_arrive_in_order_and_the_channel_ends_with_the_sinks() {
        let (sink, mut receiver) = channel(4);
        sink.emit(RunProgress::Plan { checks: vec!["a.b".into()] }).await;
        sink.emit(RunProgress::AnswerDelta("hi".into())).await;
        drop(sink);
        assert_eq!(receiver.recv().await, Some(RunProgress::Plan { checks: vec!["a.b".into()] }));
        assert_eq!(receiver.recv().await, Some(RunProgress::AnswerDelta("hi".into())));
        assert_eq!(receiver.recv().await, None);
        assert!(receiver.complete());
    }

    #[tokio::test]
    async fn a_gone_consumer_abandons_the_sink_without_blocking() {
        let (sink, receiver) = channel(1);
        drop(receiver);
        sink.emit(RunProgress::AnswerDelta("x".into())).await;
        assert!(!sink.is_open());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_consumer_is_abandoned_after_the_timeout() {
        let (sink, receiver) = channel(1);
        sink.emit(RunProgress::AnswerDelta("fills the channel".into())).await;
        assert!(sink.is_open());
        sink.emit(RunProgress::AnswerDelta("waits, then gives up".into())).await;
        assert!(!sink.is_open() && !receiver.complete());
        // Later events return at once.
        let started = tokio::time::Instant::now();
        sink.emit(RunProgress::AnswerDelta("dropped".into())).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
