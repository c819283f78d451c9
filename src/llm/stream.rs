//! Streaming (`"stream": true`) chat completions: a pure SSE parser, the chunk decoder, the
//! [`ChatStream`] returned by [`super::LlmClient::chat_stream`], and [`collect`].

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::error::{LlmError, excerpt, from_reqwest};
use super::wire::{ChatResponse, Message, Role, ToolCall, Usage, WireChunk};

/// One decoded piece of a streamed completion.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A piece of assistant text.
    ContentDelta(String),
    /// A piece of tool call `index`: `id` and `name` usually arrive once (first delta), `arguments`
    /// are fragments to concatenate per index.
    ToolCallDelta { index: usize, id: Option<String>, name: Option<String>, arguments: String },
    /// Always the last event of a successful stream.
    Finished { finish_reason: Option<String>, usage: Option<Usage> },
}

// ---------------------------------------------------------------------------------------------
// SSE parser.

/// Incremental Server-Sent-Events parser, fed with byte chunks split at arbitrary points.
///
/// Returns the `data` payload of each complete event (several `data:` lines joined with `\n`).
/// Comments (`:` lines) and other fields (`event:`, `id:`, `retry:`) are ignored. Lines end with
/// `\n` or `\r\n`. Bytes are buffered until a line is complete, so a multibyte UTF-8 character
/// split across chunks is decoded intact (invalid UTF-8 is replaced, not rejected).
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the payloads of the events completed by them, in order.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<String> {
        let mut events = Vec::new();
        while let Some(pos) = chunk.iter().position(|&byte| byte == b'\n') {
            self.line.extend_from_slice(&chunk[..pos]);
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut events);
            chunk = &chunk[pos + 1..];
        }
        self.line.extend_from_slice(chunk);
        events
    }

    /// End of input: returns an event left unterminated (no trailing blank line), if any.
    pub fn finish(&mut self) -> Option<String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, &mut events);
        }
        self.process_line(b"", &mut events);
        events.pop()
    }

    fn process_line(&mut self, line: &[u8], events: &mut Vec<String>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                events.push(std::mem::take(&mut self.data));
            }
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let (field, value) = match line.iter().position(|&byte| byte == b':') {
            Some(pos) => {
                let value = &line[pos + 1..];
                (&line[..pos], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(&String::from_utf8_lossy(value));
            self.has_data = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Chunk decoder.

/// Turns SSE payloads (`chat.completion.chunk` JSON or `[DONE]`) into [`StreamEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct ChunkDecoder {
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    api_key: Option<Arc<str>>,
    /// Think blocks are not the answer: they never leave the decoder.
    think: super::reasoning::ThinkFilter,
}

impl ChunkDecoder {
    pub(crate) fn new(api_key: Option<Arc<str>>) -> Self {
        Self { api_key, ..Self::default() }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    pub(crate) fn handle(&mut self, data: &str, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if data.trim() == "[DONE]" {
            self.finish(out);
            return Ok(());
        }
        let chunk: WireChunk = serde_json::from_str(data)
            .map_err(|err| LlmError::InvalidResponse(format!("stream chunk is not valid JSON: {err}")))?;
        if let Some(error) = chunk.error.filter(|error| !error.is_null()) {
            let text = excerpt(error.to_string().as_bytes(), self.api_key.as_deref());
            return Err(LlmError::InvalidResponse(format!("server reported an error mid-stream: {text}")));
        }
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(content) = delta.content.map(|content| self.think.push(&content))
                    && !content.is_empty()
                {
                    out.push_back(StreamEvent::ContentDelta(content));
                }
                for (position, call) in delta.tool_calls.into_iter().enumerate() {
                    let function = call.function.unwrap_or_default();
                    out.push_back(StreamEvent::ToolCallDelta {
                        index: call.index.unwrap_or(position),
                        id: call.id.filter(|id| !id.is_empty()),
                        name: function.name.filter(|name| !name.is_empty()),
                        arguments: function.arguments,
                    });
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        Ok(())
    }

    /// End of the body: a stream that ended without `[DONE]` is accepted once a finish reason arrived.
    pub(crate) fn end_of_body(&mut self, out: &mut VecDeque<StreamEvent>) -> Result<(), LlmError> {
        if self.done {
            return Ok(());
        }
        if self.finish_reason.is_none() {
            return Err(LlmError::InvalidResponse("stream ended before completion".into()));
        }
        self.finish(out);
        Ok(())
    }

    fn finish(&mut self, out: &mut VecDeque<StreamEvent>) {
        self.done = true;
        let held = self.think.finish();
        if !held.is_empty() {
            out.push_back(StreamEvent::ContentDelta(held));
        }
        out.push_back(StreamEvent::Finished { finish_reason: self.finish_reason.take(), usage: self.usage.take() });
    }
}

// ---------------------------------------------------------------------------------------------
// ChatStream.

/// A streamed completion: a [`futures_util::Stream`] of `Result<StreamEvent, LlmError>`, also
/// usable without `StreamExt` through the inherent [`ChatStream::next`].
///
/// A successful stream ends with exactly one [`StreamEvent::Finished`]; after an error item the
/// stream ends. The client's timeout bounds the whole stream (from sending the request to the last
/// byte), and `max_response_bytes` bounds the total streamed bytes.
pub struct ChatStream {
    inner: Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>,
}

impl std::fmt::Debug for ChatStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatStream").finish_non_exhaustive()
    }
}

impl Stream for ChatStream {
    type Item = Result<StreamEvent, LlmError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl ChatStream {
    /// The next event, `None` once the stream is over.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        self.inner.next().await
    }

    /// A stream replaying fixed events (used when a server ignores `"stream": true`).
    pub(crate) fn from_events(events: Vec<StreamEvent>) -> Self {
        Self { inner: Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))) }
    }

    pub(crate) fn from_response(response: reqwest::Response, limits: StreamLimits) -> Self {
        let state = BodyState {
            response: Some(response),
            parser: SseParser::new(),
            decoder: ChunkDecoder::new(limits.api_key.clone()),
            pending: VecDeque::new(),
            read: 0,
            limits,
            over: false,
        };
        let inner = futures_util::stream::unfold(state, |mut state| async move {
            let item = state.next_event().await?;
            Some((item, state))
        });
        Self { inner: Box::pin(inner) }
    }
}

pub(crate) struct StreamLimits {
    pub max_bytes: usize,
    pub deadline: tokio::time::Instant,
    pub timeout: Duration,
    pub api_key: Option<Arc<str>>,
    /// Bytes already counted against `max_bytes`.
    pub already_read: usize,
}

struct BodyState {
    response: Option<reqwest::Response>,
    parser: SseParser,
    decoder: ChunkDecoder,
    pending: VecDeque<StreamEvent>,
    read: usize,
    limits: StreamLimits,
    over: bool,
}

impl BodyState {
    async fn next_event(&mut self) -> Option<Result<StreamEvent, LlmError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if self.over {
                return None;
            }
            if let Err(err) = self.read_more().await {
                self.over = true;
                self.response = None;
                self.pending.clear();
                return Some(Err(err));
            }
        }
    }

    async fn read_more(&mut self) -> Result<(), LlmError> {
        let Some(response) = self.response.as_mut() else {
            self.over = true;
            return Ok(());
        };
        let chunk = tokio::time::timeout_at(self.limits.deadline, response.chunk())
            .await
            .map_err(|_| LlmError::Timeout { after: self.limits.timeout })?
            .map_err(|err| from_reqwest(err, self.limits.timeout, self.limits.api_key.as_deref()))?;
        match chunk {
            Some(bytes) => {
                self.read = self.read.saturating_add(bytes.len());
                if self.read.saturating_add(self.limits.already_read) > self.limits.max_bytes {
                    return Err(LlmError::ResponseTooLarge { limit: self.limits.max_bytes });
                }
                for data in self.parser.push(&bytes) {
                    self.decoder.handle(&data, &mut self.pending)?;
                }
            }
            None => {
                if let Some(data) = self.parser.finish() {
                    self.decoder.handle(&data, &mut self.pending)?;
                }
                self.decoder.end_of_body(&mut self.pending)?;
            }
        }
        if self.decoder.is_done() {
            self.over = true;
            self.response = None;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Assembling a response.

/// Builds a [`ChatResponse`] from [`StreamEvent`]s (for callers that forward deltas as they come
/// and still want the final message). [`collect`] is the one-call version.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    content: Option<String>,
    tool_calls: BTreeMap<usize, ToolCall>,
    finished: Option<(Option<String>, Option<Usage>)>,
}

impl StreamAccumulator {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::ContentDelta(text) => self.content.get_or_insert_with(String::new).push_str(&text),
            StreamEvent::ToolCallDelta { index, id, name, arguments } => {
                let call = self.tool_calls.entry(index).or_insert_with(|| ToolCall::function("", "", ""));
                if let Some(id) = id.filter(|_| call.id.is_empty()) {
                    call.id = id;
                }
                if let Some(name) = name.filter(|_| call.function.name.is_empty()) {
                    call.function.name = name;
                }
                call.function.arguments.push_str(&arguments);
            }
            StreamEvent::Finished { finish_reason, usage } => self.finished = Some((finish_reason, usage)),
        }
    }

    /// The assembled response; fails if no [`StreamEvent::Finished`] was pushed.
    pub fn finish(self) -> Result<ChatResponse, LlmError> {
        let Some((finish_reason, usage)) = self.finished else {
            return Err(LlmError::InvalidResponse("stream ended before completion".into()));
        };
        let message = Message {
            role: Role::Assistant,
            content: self.content,
            tool_calls: self.tool_calls.into_values().collect(),
            tool_call_id: None,
            name: None,
        };
        Ok(ChatResponse { message, finish_reason, usage })
    }
}

/// Drains a stream of events into the equivalent non-streamed [`ChatResponse`] (text deltas
/// concatenated; tool call arguments concatenated per index, calls ordered by index).
pub async fn collect<S>(mut stream: S) -> Result<ChatResponse, LlmError>
where
    S: Stream<Item = Result<StreamEvent, LlmError>> + Unpin,
{
    let mut accumulator = StreamAccumulator::new();
    while let Some(event) = stream.next().await {
        accumulator.push(event?);
    }
    accumulator.finish()
}

/// The events a streamed answer equivalent to `response` would have produced.
pub(crate) fn events_of(response: ChatResponse) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    if let Some(content) = response.message.content {
        events.push(StreamEvent::ContentDelta(content));
    }
    for (index, call) in response.message.tool_calls.into_iter().enumerate() {
        events.push(StreamEvent::ToolCallDelta {
            index,
            id: Some(call.id),
            name: Some(call.function.name),
            arguments: call.function.arguments,
        });
    }
    events.push(StreamEvent::Finished { finish_reason: response.finish_reason, usage: response.usage });
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = concat!(
        ": keep-alive comment\n",
        "event: message\n",
        "id: 1\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Grüße \"}}]}\r\n",
        "\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"🚀 ok\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",",
        "\"type\":\"function\",\"function\":{\"name\":\"get_pods\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,",
        "\"function\":{\"arguments\":\"{\\\"ns\\\":\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,",
        "\"function\":{\"arguments\":\"\\\"default\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n",
        "data: [DONE]\n\n",
        "data: {\"ignored\": \"after done\"}\n\n",
    );

    fn parse_in_chunks(body: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
            events.extend(parser.push(&body[start..cut]));
            start = cut;
        }
        events.extend(parser.finish());
        events
    }

    fn decode(payloads: &[String]) -> Result<Vec<StreamEvent>, LlmError> {
        let mut decoder = ChunkDecoder::new(None);
        let mut out = VecDeque::new();
        for payload in payloads {
            decoder.handle(payload, &mut out)?;
        }
        decoder.end_of_body(&mut out)?;
        Ok(out.into_iter().collect())
    }

    #[test]
    fn parses_whole_body() {
        let events = parse_in_chunks(BODY.as_bytes(), &[]);
        assert_eq!(events.len(), 9);
        assert!(events[0].contains("Grüße "));
        assert_eq!(events[7], "[DONE]");
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let body = BODY.as_bytes();
        let expected = parse_in_chunks(body, &[]);
        for cut in 0..=body.len() {
            assert_eq!(parse_in_chunks(body, &[cut]), expected, "split at {cut}");
        }
        // Byte-by-byte feeding.
        let cuts: Vec<usize> = (1..body.len()).collect();
        assert_eq!(parse_in_chunks(body, &cuts), expected);
    }

    #[test]
    fn split_inside_multibyte_char_and_inside_data_prefix() {
        let body = BODY.as_bytes();
        let umlaut = BODY.find('ü').unwrap();
        let rocket = BODY.find('🚀').unwrap();
        let data_prefix = BODY.find("data:").unwrap();
        let events = parse_in_chunks(body, &[data_prefix + 2, umlaut + 1, rocket + 1, rocket + 3]);
        assert_eq!(events, parse_in_chunks(body, &[]));
        assert!(events[1].contains("🚀 ok"));
    }

    #[test]
    fn multiline_data_and_unterminated_last_event() {
        let mut parser = SseParser::new();
        assert_eq!(parser.push(b"data: a\ndata:b\ndata\n\n"), vec!["a\nb\n".to_owned()]);
        assert!(parser.push(b"data: tail").is_empty());
        assert_eq!(parser.finish().as_deref(), Some("tail"));
        assert_eq!(parser.finish(), None);
    }

    #[test]
    fn decoder_assembles_events() {
        let events = decode(&parse_in_chunks(BODY.as_bytes(), &[17, 100])).unwrap();
        assert_eq!(events[0], StreamEvent::ContentDelta("Grüße ".into()));
        assert_eq!(events[1], StreamEvent::ContentDelta("🚀 ok".into()));
        assert_eq!(
            events[2],
            StreamEvent::ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                name: Some("get_pods".into()),
                arguments: String::new()
            }
        );
        let usage = Usage { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
        assert_eq!(
            events.last(),
            Some(&StreamEvent::Finished { finish_reason: Some("tool_calls".into()), usage: Some(usage) })
        );
        assert_eq!(events.iter().filter(|event| matches!(event, StreamEvent::Finished { .. })).count(), 1);

        let mut accumulator = StreamAccumulator::new();
        events.into_iter().for_each(|event| accumulator.push(event));
        let response = accumulator.finish().unwrap();
        assert_eq!(response.message.content.as_deref(), Some("Grüße 🚀 ok"));
        assert_eq!(response.message.tool_calls, vec![ToolCall::function("call_1", "get_pods", r#"{"ns":"default"}"#)]);
        assert_eq!(response.usage, Some(usage));
    }

    #[test]
    fn decoder_errors() {
        assert!(matches!(decode(&["{not json".into()]), Err(LlmError::InvalidResponse(_))));
        let truncated = vec![r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#.to_owned()];
        assert!(matches!(decode(&truncated), Err(LlmError::InvalidResponse(_))));
        let error = vec![r#"{"error":{"message":"overloaded"}}"#.to_owned()];
        match decode(&error) {
            Err(LlmError::InvalidResponse(text)) => assert!(text.contains("overloaded")),
            other => panic!("unexpected {other:?}"),
        }
        // No [DONE], but a finish reason: accepted.
        let lenient = vec![r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}"#.to_owned()];
        assert_eq!(decode(&lenient).unwrap().len(), 2);
    }

    #[tokio::test]
    async fn collect_requires_finished() {
        let events = vec![Ok(StreamEvent::ContentDelta("hi".into()))];
        assert!(matches!(collect(futures_util::stream::iter(events)).await, Err(LlmError::InvalidResponse(_))));
    }
}
