//! LlmClient against the scripted OpenAI-compatible server.

use akritas_testkit as support;

use std::time::Duration;

use akritas::llm::{
    ChatRequest, LlmClient, LlmConfig, LlmError, Message, Role, StreamEvent, ToolCall, ToolChoice, ToolDefinition,
    Usage, collect,
};
use serde_json::{Value, json};
use support::scripted_llm::{Reply, ScriptedLlm, Step};

const KEY: &str = "sk-test-secret-0123456789";

fn http() -> reqwest::Client {
    akritas::install_crypto_provider();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

fn config(server: &ScriptedLlm) -> LlmConfig {
    LlmConfig { model: Some("test-model".into()), timeout: Duration::from_secs(10), ..LlmConfig::new(&server.url) }
}

fn new_client(config: LlmConfig) -> LlmClient {
    LlmClient::new(config, http()).unwrap()
}

fn question() -> ChatRequest {
    ChatRequest::new(vec![Message::system("task"), Message::user("q")])
}

fn content(text: &str) -> Step {
    Reply::Content(text.into()).into()
}

fn tools_request() -> ChatRequest {
    ChatRequest {
        tools: vec![ToolDefinition::function(
            "get_pods",
            "List pods",
            json!({"type": "object", "properties": {"namespace": {"type": "string"}}}),
        )],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        max_tokens: 256,
        temperature: Some(0.0),
        ..question()
    }
}

fn tool_calls_reply() -> Reply {
    Reply::ToolCalls(vec![
        ("call_1".into(), "get_pods".into(), json!({"namespace": "kube-system", "note": "Grüße 🚀"})),
        ("call_2".into(), "get_events".into(), json!({})),
    ])
}

#[tokio::test]
async fn discovers_model_once_and_caches_it() {
    let server = ScriptedLlm::start(vec![content("a"), content("b")]).await;
    server.set_models(vec!["first-model".into(), "second-model".into()]);
    let client = new_client(LlmConfig { model: None, ..config(&server) });

    assert_eq!(client.models().await.unwrap(), vec!["first-model", "second-model"]);
    assert_eq!(server.model_requests(), 1);

    assert_eq!(client.chat(&question()).await.unwrap().message.content.as_deref(), Some("a"));
    assert_eq!(client.chat(&question()).await.unwrap().message.content.as_deref(), Some("b"));
    assert_eq!(client.model().await.unwrap(), "first-model");
    // One explicit models() call plus one discovery.
    assert_eq!(server.model_requests(), 2);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|request| request["model"] == "first-model"));
}

#[tokio::test]
async fn no_models_listed() {
    let server = ScriptedLlm::start(vec![]).await;
    server.set_models(vec![]);
    let client = new_client(LlmConfig { model: None, ..config(&server) });
    assert!(matches!(client.model().await, Err(LlmError::NoModels)));
    assert!(matches!(client.chat(&question()).await, Err(LlmError::NoModels)));
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn chat_with_tools() {
    let server = ScriptedLlm::start(vec![tool_calls_reply().into()]).await;
    let client = new_client(config(&server));

    let response = client.chat(&tools_request()).await.unwrap();
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage, Some(Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));
    assert_eq!(response.message.role, Role::Assistant);
    assert_eq!(response.message.content, None);
    assert_eq!(response.message.tool_calls.len(), 2);
    assert_eq!(response.message.tool_calls[0].id, "call_1");
    assert_eq!(response.message.tool_calls[0].kind, "function");
    assert_eq!(response.message.tool_calls[0].function.name, "get_pods");
    let arguments: Value = serde_json::from_str(&response.message.tool_calls[0].function.arguments).unwrap();
    assert_eq!(arguments, json!({"namespace": "kube-system", "note": "Grüße 🚀"}));

    let body = &server.requests()[0];
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_tokens"], 256);
    assert!(body.get("max_completion_tokens").is_none());
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["parallel_tool_calls"], false);
    assert_eq!(body["tools"][0]["type"], "function");
    assert_eq!(body["tools"][0]["function"]["name"], "get_pods");
    assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
}

#[tokio::test]
async fn tool_round_trip_messages_are_sent_verbatim() {
    let server = ScriptedLlm::start(vec![content("done")]).await;
    let client = new_client(config(&server));
    let request = ChatRequest::new(vec![
        Message::user("q"),
        Message::assistant_tool_calls(vec![ToolCall::function("call_1", "get_pods", "{}")]),
        Message::tool("call_1", "[]"),
    ]);
    client.chat(&request).await.unwrap();
    let body = &server.requests()[0];
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_pods", "arguments": "{}"}}
            ]},
            {"role": "tool", "content": "[]", "tool_call_id": "call_1"}
        ])
    );
}

#[tokio::test]
async fn system_instructions_are_prepended_or_inserted() {
    let server = ScriptedLlm::start(vec![content("a"), content("b")]).await;
    let client = new_client(LlmConfig { system_instructions: Some("global".into()), ..config(&server) });

    let with_system = question();
    client.chat(&with_system).await.unwrap();
    assert_eq!(with_system, question(), "caller's request unchanged");

    let without_system = ChatRequest::new(vec![Message::user("q")]);
    client.chat(&without_system).await.unwrap();
    assert_eq!(without_system.messages, vec![Message::user("q")]);

    let requests = server.requests();
    assert_eq!(
        requests[0]["messages"],
        json!([{"role": "system", "content": "global\n\ntask"}, {"role": "user", "content": "q"}])
    );
    assert_eq!(
        requests[1]["messages"],
        json!([{"role": "system", "content": "global"}, {"role": "user", "content": "q"}])
    );
}

fn unsupported_max_tokens() -> Step {
    Reply::Error {
        status: 400,
        body: json!({"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter"
        }}),
    }
    .into()
}

#[tokio::test]
async fn token_limit_negotiation_is_sticky() {
    let server = ScriptedLlm::start(vec![unsupported_max_tokens(), content("first"), content("second")]).await;
    let client = new_client(config(&server));
    assert_eq!(client.token_limit_field(), "max_tokens");

    assert_eq!(client.chat(&question()).await.unwrap().message.content.as_deref(), Some("first"));
    assert_eq!(client.token_limit_field(), "max_completion_tokens");
    // A clone shares the negotiated field.
    let clone = client.clone();
    assert_eq!(clone.chat(&question()).await.unwrap().message.content.as_deref(), Some("second"));

    let requests = server.requests();
    assert_eq!(requests.len(), 3, "2 calls, 1 retry");
    assert_eq!(requests[0]["max_tokens"], 1024);
    assert!(requests[0].get("max_completion_tokens").is_none());
    for request in &requests[1..] {
        assert_eq!(request["max_completion_tokens"], 1024);
        assert!(request.get("max_tokens").is_none());
    }
}

#[tokio::test]
async fn token_limit_negotiation_applies_to_streams() {
    let server = ScriptedLlm::start(vec![unsupported_max_tokens(), content("streamed")]).await;
    let client = new_client(config(&server));
    let response = collect(client.chat_stream(&question()).await.unwrap()).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("streamed"));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1]["max_completion_tokens"], 1024);
}

#[tokio::test]
async fn retries_only_once_and_never_unrelated_errors() {
    let unrelated = Reply::Error {
        status: 400,
        body: json!({"error": {"message": "max_tokens must be at most 4096", "param": "max_tokens", "code": null}}),
    };
    let server = ScriptedLlm::start(vec![unrelated.into()]).await;
    let client = new_client(config(&server));
    match client.chat(&question()).await {
        Err(LlmError::Http { status: 400, excerpt }) => assert!(excerpt.contains("at most 4096")),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.requests().len(), 1);
    assert_eq!(client.token_limit_field(), "max_tokens");

    // Both fields rejected: one retry, then the error.
    let rejects_other = Reply::Error {
        status: 422,
        body: json!({"detail": [{"loc": ["body", "max_completion_tokens"], "msg": "Extra inputs are not permitted"}]}),
    };
    let server = ScriptedLlm::start(vec![unsupported_max_tokens(), rejects_other.into()]).await;
    let client = new_client(config(&server));
    assert!(matches!(client.chat(&question()).await, Err(LlmError::Http { status: 422, .. })));
    assert_eq!(server.requests().len(), 2);

    // 500 is never retried either.
    let server =
        ScriptedLlm::start(vec![Reply::Raw { status: 500, body: "max_tokens not supported".into() }.into()]).await;
    let client = new_client(config(&server));
    assert!(matches!(client.chat(&question()).await, Err(LlmError::Http { status: 500, .. })));
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn http_error_excerpt_is_bounded_and_redacted() {
    let body = format!("upstream   failure\n\nkey={KEY} {}", "lorem ipsum ".repeat(200));
    let server = ScriptedLlm::start(vec![Reply::Raw { status: 500, body }.into()]).await;
    let client = new_client(LlmConfig { api_key: Some(KEY.into()), ..config(&server) });
    let err = client.chat(&question()).await.unwrap_err();
    let LlmError::Http { status, excerpt } = &err else { panic!("unexpected {err:?}") };
    assert_eq!(*status, 500);
    assert!(excerpt.chars().count() <= 512);
    assert!(excerpt.starts_with("upstream failure key=[redacted] lorem"), "{excerpt}");
    assert!(!err.to_string().contains(KEY));
    assert!(err.to_string().starts_with("model server answered HTTP 500: upstream failure"));
    assert!(err.is_upstream());
}

#[tokio::test]
async fn response_too_large() {
    let huge = json!({"choices": [{"message": {"role": "assistant", "content": "x".repeat(10_000)}}]}).to_string();
    let server = ScriptedLlm::start(vec![
        Reply::Raw { status: 200, body: huge }.into(),
        Reply::Content("y".repeat(10_000)).into(),
    ])
    .await;
    let client = new_client(LlmConfig { max_response_bytes: 1024, ..config(&server) });
    assert!(matches!(client.chat(&question()).await, Err(LlmError::ResponseTooLarge { limit: 1024 })));

    // Streamed: the limit applies to the total streamed bytes.
    let mut stream = client.chat_stream(&question()).await.unwrap();
    let mut failure = None;
    while let Some(event) = stream.next().await {
        if let Err(err) = event {
            failure = Some(err);
        }
    }
    assert!(matches!(failure, Some(LlmError::ResponseTooLarge { limit: 1024 })), "{failure:?}");
}

#[tokio::test]
async fn timeout() {
    let server = ScriptedLlm::start(vec![content("late").with_delay(Duration::from_secs(5))]).await;
    let client = new_client(LlmConfig { timeout: Duration::from_millis(200), ..config(&server) });
    let started = std::time::Instant::now();
    match client.chat(&question()).await {
        Err(err @ LlmError::Timeout { after }) => {
            assert_eq!(after, Duration::from_millis(200));
            assert!(err.is_upstream());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn connection_refused_is_transport() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let config = LlmConfig {
        api_key: Some(KEY.into()),
        model: Some("m".into()),
        ..LlmConfig::new(format!("http://{address}/v1/"))
    };
    let client = new_client(config);
    assert_eq!(client.base_url(), format!("http://{address}/v1"));
    match client.chat(&question()).await {
        Err(err @ LlmError::Transport(_)) => {
            assert!(err.is_upstream());
            assert!(!err.to_string().contains(KEY));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn invalid_responses() {
    let server = ScriptedLlm::start(vec![
        Reply::Raw { status: 200, body: r#"{"choices":[]}"#.into() }.into(),
        Reply::Raw { status: 200, body: "not json".into() }.into(),
        Reply::Raw {
            status: 200,
            body: json!({"choices": [
                {"message": {"role": "assistant", "content": "a"}},
                {"message": {"role": "assistant", "content": "b"}}
            ]})
            .to_string(),
        }
        .into(),
        Reply::Raw { status: 200, body: r#"{"error":{"message":"provider overloaded"}}"#.into() }.into(),
    ])
    .await;
    let client = new_client(config(&server));
    for _ in 0..4 {
        let err = client.chat(&question()).await.unwrap_err();
        assert!(matches!(err, LlmError::InvalidResponse(_)), "{err:?}");
    }
}

#[tokio::test]
async fn tolerant_response_parsing() {
    let body = json!({
        "id": "x", "system_fingerprint": "fp",
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
                     "message": {"role": "assistant", "reasoning_content": "hmm",
                                 "content": [{"type": "text", "text": "part one, "}, {"type": "text", "text": "part two"}]}}],
        "usage": {"prompt_tokens": 4}
    });
    let server = ScriptedLlm::start(vec![Reply::Raw { status: 200, body: body.to_string() }.into()]).await;
    let response = new_client(config(&server)).chat(&question()).await.unwrap();
    assert_eq!(response.message.content.as_deref(), Some("part one, part two"));
    assert_eq!(response.usage, Some(Usage { prompt_tokens: 4, completion_tokens: 0, total_tokens: 0 }));
}

#[tokio::test]
async fn debug_never_shows_the_key() {
    let server = ScriptedLlm::start(vec![]).await;
    let config = LlmConfig { api_key: Some(KEY.into()), ..config(&server) };
    assert!(!format!("{config:?}").contains(KEY));
    assert!(format!("{config:?}").contains("[redacted]"));
    let client = new_client(config);
    assert!(!format!("{client:?}").contains(KEY));
    assert!(!format!("{client:#?}").contains(KEY));
}

#[tokio::test]
async fn authorization_header() {
    let server = ScriptedLlm::start(vec![content("a"), content("b")]).await;
    new_client(LlmConfig { api_key: Some(KEY.into()), ..config(&server) }).chat(&question()).await.unwrap();
    new_client(config(&server)).chat(&question()).await.unwrap();
    assert_eq!(server.authorizations(), vec![Some(format!("Bearer {KEY}")), None]);
}

#[tokio::test]
async fn invalid_config() {
    for base_url in ["localhost:8080/v1", "http://localhost:8080", "http://user:pass@localhost/v1"] {
        let err = LlmClient::new(LlmConfig::new(base_url), http()).unwrap_err();
        assert!(matches!(err, LlmError::InvalidConfig(_)), "{base_url}");
        assert!(!err.is_upstream());
        assert!(!err.to_string().contains("pass"));
    }
}

#[tokio::test]
async fn streaming_matches_non_streamed_reply() {
    let text = "Pods in kube-system: coredns is CrashLoopBackOff — Grüße 🚀";
    let steps = vec![content(text), content(text), tool_calls_reply().into(), tool_calls_reply().into()];
    let server = ScriptedLlm::start(steps).await;
    let client = new_client(config(&server));

    let plain = client.chat(&question()).await.unwrap();
    let streamed = collect(client.chat_stream(&question()).await.unwrap()).await.unwrap();
    assert_eq!(streamed, plain);
    assert_eq!(streamed.usage, Some(Usage { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }));

    let plain = client.chat(&tools_request()).await.unwrap();
    let mut stream = client.chat_stream(&tools_request()).await.unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    let deltas = events.iter().filter(|event| matches!(event, StreamEvent::ToolCallDelta { .. })).count();
    assert_eq!(deltas, 4, "two deltas per tool call");
    assert!(matches!(events.last(), Some(StreamEvent::Finished { .. })));
    let streamed = collect(futures_util::stream::iter(events.into_iter().map(Ok))).await.unwrap();
    assert_eq!(streamed, plain);
    assert_eq!(streamed.finish_reason.as_deref(), Some("tool_calls"));

    let requests = server.requests();
    assert_eq!(requests[1]["stream"], true);
    assert_eq!(requests[1]["stream_options"], json!({"include_usage": true}));
    assert_eq!(requests[0]["stream"], false);
    assert!(requests[0].get("stream_options").is_none());
}

#[tokio::test]
async fn stream_errors_before_first_byte_are_returned_directly() {
    let server =
        ScriptedLlm::start(vec![Reply::Error { status: 429, body: json!({"error": "slow down"}) }.into()]).await;
    let client = new_client(config(&server));
    match client.chat_stream(&question()).await {
        Err(LlmError::Http { status: 429, excerpt }) => assert!(excerpt.contains("slow down")),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn stream_timeout_covers_the_whole_stream() {
    let server = ScriptedLlm::start(vec![content("late").with_delay(Duration::from_secs(5))]).await;
    let client = new_client(LlmConfig { timeout: Duration::from_millis(200), ..config(&server) });
    assert!(matches!(client.chat_stream(&question()).await, Err(LlmError::Timeout { .. })));
}

#[tokio::test]
async fn script_exhausted() {
    let server = ScriptedLlm::start(vec![content("only")]).await;
    let client = new_client(config(&server));
    client.chat(&question()).await.unwrap();
    match client.chat(&question()).await {
        Err(LlmError::Http { status: 500, excerpt }) => assert!(excerpt.contains("script exhausted after 1 requests")),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn responder_sees_index_and_body() {
    let server = ScriptedLlm::start_with(|index, body| {
        let last = body["messages"].as_array().and_then(|messages| messages.last()).cloned().unwrap_or_default();
        Reply::Content(format!("{index}:{}", last["content"].as_str().unwrap_or_default())).into()
    })
    .await;
    let client = new_client(config(&server));
    for index in 0..3 {
        let response = client.chat(&question()).await.unwrap();
        assert_eq!(response.message.content, Some(format!("{index}:q")));
    }
    assert_eq!(server.chat_requests(), 3);
}
