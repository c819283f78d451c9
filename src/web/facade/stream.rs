//! The streamed answer (`text/event-stream`): a first chunk with the role, the
//! Run's progress lines as they happen, a blank line, the answer's text as the
//! model streams it, a final chunk with `finish_reason: "stop"`, the usage chunk
//! when asked for, then `data: [DONE]`. A Run that fails after the stream started
//! ends it with an `{"error": {…}}` event.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::progress_line;
use super::request::Completion;
use crate::audit::RunId;
use crate::engine::progress::{ProgressReceiver, RunProgress};
use crate::engine::request::{RunError, RunOutcome};
use crate::web::error::ApiError;

type RunTask = JoinHandle<Result<RunOutcome, RunError>>;

/// Waits for the Run to open (its id goes into `X-Akritas-Run-ID`), then streams
/// it. A Run refused before it opened (bad conversation, busy, …) is a plain error.
pub async fn respond(
    model: String,
    completion: &Completion,
    mut receiver: ProgressReceiver,
    task: RunTask,
) -> Response {
    let run_id = match receiver.recv().await {
        Some(RunProgress::Started { run_id }) => run_id,
        Some(_) => None,
        None => {
            return match task.await {
                Ok(Err(error)) => super::run_failure(error),
                // A Run that ended without reporting its start: answer it whole.
                Ok(Ok(outcome)) => super::completion_response(&model, &outcome),
                Err(_) => super::internal_failure().into_response(),
            };
        }
    };
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let chunks = Chunks { id: super::completion_id(run_id.as_ref()), created, model };
    let first = chunks.delta(json!({"role": "assistant", "content": ""}), None);
    let streamer = Streamer {
        receiver,
        task: Some(task),
        chunks,
        progress: completion.progress,
        include_usage: completion.include_usage,
        in_answer: false,
        wrote_progress: false,
        over: false,
    };
    let rest = futures_util::stream::unfold(streamer, |mut streamer| async move {
        let bytes = streamer.next().await?;
        Some((Ok::<Bytes, std::convert::Infallible>(bytes), streamer))
    });
    let body = futures_util::stream::once(async move { Ok(first) }).chain(rest);
    let mut response = (StatusCode::OK, Body::from_stream(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Some(value) = run_id.as_ref().and_then(|id: &RunId| HeaderValue::from_str(id.as_str()).ok()) {
        headers.insert(super::RUN_ID_HEADER, value);
    }
    response
}

/// Builds `chat.completion.chunk` events.
struct Chunks {
    id: String,
    created: u64,
    model: String,
}

impl Chunks {
    fn delta(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        event(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        }))
    }

    fn content(&self, text: String) -> Bytes {
        self.delta(json!({"content": text}), None)
    }

    fn usage(&self, usage: Value) -> Bytes {
        event(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": usage,
        }))
    }
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

struct Streamer {
    receiver: ProgressReceiver,
    task: Option<RunTask>,
    chunks: Chunks,
    progress: bool,
    include_usage: bool,
    /// The last text sent was the answer's (a progress line after it starts a new paragraph).
    in_answer: bool,
    wrote_progress: bool,
    over: bool,
}

impl Streamer {
    async fn next(&mut self) -> Option<Bytes> {
        while !self.over {
            match self.receiver.recv().await {
                Some(event) => {
                    if let Some(bytes) = self.chunk(event) {
                        return Some(bytes);
                    }
                }
                None => {
                    self.over = true;
                    return Some(self.finish().await);
                }
            }
        }
        None
    }

    fn chunk(&mut self, event: RunProgress) -> Option<Bytes> {
        if let RunProgress::AnswerDelta(text) = event {
            let lead = if !self.in_answer && self.wrote_progress { "\n" } else { "" };
            self.in_answer = true;
            return Some(self.chunks.content(format!("{lead}{text}")));
        }
        let line = progress_line::line(&event).filter(|_| self.progress)?;
        let lead = if self.in_answer { "\n\n" } else { "" };
        self.in_answer = false;
        self.wrote_progress = true;
        Some(self.chunks.content(format!("{lead}{line}")))
    }

    /// The end of the Run: stop, usage and `[DONE]`, or an error event.
    async fn finish(&mut self) -> Bytes {
        let result = match self.task.take() {
            Some(task) => task.await,
            None => return Bytes::new(),
        };
        let error = match result {
            Ok(Ok(_)) if !self.receiver.complete() => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "stream_incomplete",
                "the stream was not read for too long and missed part of the answer; the Run finished and is recorded \
                 under the X-Akritas-Run-ID of this response",
            )
            .with("param", Value::Null),
            Ok(Ok(outcome)) => {
                let mut end = self.chunks.delta(json!({}), Some("stop")).to_vec();
                if self.include_usage {
                    end.extend_from_slice(&self.chunks.usage(super::usage(&outcome.usage)));
                }
                end.extend_from_slice(b"data: [DONE]\n\n");
                return Bytes::from(end);
            }
            Ok(Err(error)) => super::failure(error),
            Err(_) => super::internal_failure(),
        };
        event(&json!({"error": error.object()}))
    }
}
