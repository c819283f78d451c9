use super::*;
use crate::llm::LlmConfig;

fn client(protocol: Protocol) -> LlmClient {
    let config = LlmConfig { protocol, ..LlmConfig::new("http://127.0.0.1:9/v1") };
    LlmClient::new(config, crate::outbound::client(std::time::Duration::from_secs(1)).unwrap()).unwrap()
}

fn step() -> Step {
    Step {
        messages: vec![Message::system("Plan the checks."), Message::user("why is db-7 slow?")],
        name: "local_investigation_submit_plan".into(),
        description: "Submit the plan.".into(),
        schema: json!({"type": "object", "properties": {"checks": {"type": "array", "maxItems": 2}},
                       "required": ["checks"], "additionalProperties": false}),
        grammar: None,
        max_tokens: 256,
        temperature: Some(0.0),
    }
}

fn text(content: &str) -> Result<ChatResponse, LlmError> {
    Ok(ChatResponse { message: Message::assistant(content), finish_reason: Some("stop".into()), usage: None })
}

fn called(arguments: &str) -> Result<ChatResponse, LlmError> {
    let call = ToolCall::function("c1", "local_investigation_submit_plan", arguments);
    Ok(ChatResponse {
        message: Message::assistant_tool_calls(vec![call]),
        finish_reason: Some("tool_calls".into()),
        usage: None,
    })
}

fn http(status: u16, excerpt: &str) -> Result<ChatResponse, LlmError> {
    Err(LlmError::Http { status, excerpt: excerpt.into() })
}

fn asked(next: Next) -> ChatRequest {
    match next {
        Next::Ask(request) => request,
        other => panic!("expected another request, got {other:?}"),
    }
}

fn done(next: Next) -> Answered {
    match next {
        Next::Done(answered) => answered,
        other => panic!("expected an answer, got {other:?}"),
    }
}

fn submitted(answered: &Answered) -> Value {
    let [call] = answered.response.message.tool_calls.as_slice() else { panic!("{answered:?}") };
    assert_eq!(call.function.name, "local_investigation_submit_plan");
    serde_json::from_str(&call.function.arguments).unwrap()
}

#[test]
fn protocols_parse_from_their_setting_values() {
    for value in ["auto", "tool_call", "json_schema", "json_object", "text"] {
        assert_eq!(value.parse::<Protocol>().unwrap().as_str(), value);
    }
    let error = "tools".parse::<Protocol>().unwrap_err();
    assert!(error.contains("auto, tool_call, json_schema, json_object or text"), "{error}");
}

#[test]
fn a_forced_call_answered_with_prose_falls_back_to_a_json_schema_and_is_remembered() {
    let llm = client(Protocol::Auto);
    let (mut asking, first) = Asking::start(&llm, "m", step());
    assert_eq!(first.tool_choice, Some(ToolChoice::Required));
    assert_eq!(first.tools.len(), 1);
    assert_eq!(first.response_format, None);
    assert_eq!(first.messages, step().messages, "a tool call needs no instruction");
    assert_eq!(first.min_completion_tokens, MIN_ANSWER_TOKENS, "fitting keeps room for the answer");

    let second = asked(asking.receive(text("I will check db-7 first.")));
    assert!(second.tools.is_empty() && second.tool_choice.is_none());
    assert_eq!(second.min_completion_tokens, MIN_ANSWER_TOKENS);
    let format = second.response_format.clone().unwrap();
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "local_investigation_submit_plan");
    assert_eq!(format["json_schema"]["strict"], true, "this schema is in the strict subset");
    assert_eq!(format["json_schema"]["schema"], step().schema);
    let system = second.messages[0].content.as_deref().unwrap();
    assert!(system.starts_with("Plan the checks.\n\nAnswer with exactly one JSON object: the arguments of "));

    let answered = done(asking.receive(text(r#"{"checks": []}"#)));
    assert_eq!(answered.mode, Mode::JsonSchema);
    assert_eq!(answered.fallbacks, [(Mode::ToolCall, Mode::JsonSchema)]);
    assert_eq!(answered.requests, 2);
    assert_eq!(submitted(&answered), json!({"checks": []}));
    assert_eq!(answered.response.message.content, None);

    assert_eq!(llm.learned_mode("m"), Some(Mode::JsonSchema));
    let (_, next) = Asking::start(&llm, "m", step());
    assert!(next.response_format.is_some(), "the next step starts with the mode that worked");
    let (_, other) = Asking::start(&llm, "other-model", step());
    assert_eq!(other.tool_choice, Some(ToolChoice::Required), "another model learns on its own");
}

#[test]
fn a_server_refusing_a_mode_moves_auto_down_the_ladder_and_fails_a_fixed_protocol() {
    let llm = client(Protocol::Auto);
    let (mut asking, _) = Asking::start(&llm, "m", step());
    let refused_tools = r#"{"error":{"message":"registry.ollama.ai/library/smollm2:latest does not support tools"}}"#;
    let second = asked(asking.receive(http(400, refused_tools)));
    assert!(second.response_format.is_some());
    let third = asked(asking.receive(http(400, "response_format json_schema is not supported by this server")));
    assert_eq!(third.response_format, Some(json!({"type": "json_object"})));
    let system = third.messages[0].content.as_deref().unwrap();
    assert!(system.contains(&format!("It must match this JSON schema: {}", step().schema)), "{system}");
    let fourth = asked(asking.receive(http(422, "unsupported response_format type json_object")));
    assert_eq!((fourth.response_format.as_ref(), fourth.tools.len()), (None, 0));
    assert!(matches!(asking.receive(http(400, "invalid request")), Next::Failed(_)), "nothing after text");

    let (mut unrelated, _) = Asking::start(&client(Protocol::Auto), "m", step());
    let overflow = "the request exceeds the available context size, try increasing it";
    assert!(matches!(unrelated.receive(http(400, overflow)), Next::Failed(_)), "not a refusal of the mode");

    let fixed = client(Protocol::Fixed(Mode::ToolCall));
    let (mut asking, _) = Asking::start(&fixed, "m", step());
    assert!(matches!(asking.receive(http(400, refused_tools)), Next::Failed(_)));
    let (mut asking, _) = Asking::start(&fixed, "m", step());
    let answered = done(asking.receive(text("prose")));
    assert!(answered.response.message.tool_calls.is_empty(), "the caller says no plan was submitted");
    assert_eq!(fixed.learned_mode("m"), None);
}

#[test]
fn text_answers_give_their_first_object_and_one_repair_turn() {
    let llm = client(Protocol::Fixed(Mode::Text));
    let (mut asking, first) = Asking::start(&llm, "m", step());
    assert_eq!((first.response_format.as_ref(), first.tools.len()), (None, 0));
    let answered = done(asking.receive(text(
        "<think>MARKER {\"checks\": [1, 2, 3]}</think>Sure! Here it is:\n```json\n{\"checks\": [\"a\"]}\n```\nDone.",
    )));
    assert_eq!(submitted(&answered), json!({"checks": ["a"]}), "think blocks are never the answer");
    assert_eq!(answered.requests, 1);

    let (mut asking, _) = Asking::start(&llm, "m", step());
    let repair = asked(asking.receive(text("I cannot do that.")));
    let n = repair.messages.len();
    assert_eq!(repair.messages[n - 2], Message::assistant("I cannot do that."));
    let prompt = repair.messages[n - 1].content.as_deref().unwrap();
    assert!(prompt.starts_with("That answer cannot be used: it holds no JSON object."), "{prompt}");
    let answered = done(asking.receive(text("Still no.")));
    assert!(answered.response.message.tool_calls.is_empty());
    assert_eq!(answered.requests, 2);

    let (mut asking, _) = Asking::start(&llm, "m", step());
    let repair = asked(asking.receive(text(r#"{"checks": [1, 2, 3]}"#)));
    let prompt = repair.messages.last().unwrap().content.as_deref().unwrap();
    assert!(prompt.contains("does not match the schema: at /checks:"), "{prompt}");
    let answered = done(asking.receive(text(r#"{"checks": [1, 2, 3, 4]}"#)));
    assert_eq!(submitted(&answered), json!({"checks": [1, 2, 3, 4]}), "the caller's validation says why");
}

#[test]
fn a_grammar_is_sent_in_place_of_the_schema_and_the_schema_checks_the_answer() {
    let grammar = json!({"type": "object", "properties": {"checks": {"type": "array", "maxItems": 1}},
                         "required": ["checks"], "additionalProperties": false});
    let sized = || Step { grammar: Some(grammar.clone()), ..step() };
    let (_, first) = Asking::start(&client(Protocol::Fixed(Mode::ToolCall)), "m", sized());
    assert_eq!(first.tools[0].function.parameters, grammar);
    let (mut asking, first) = Asking::start(&client(Protocol::Fixed(Mode::JsonSchema)), "m", sized());
    assert_eq!(first.response_format.unwrap()["json_schema"]["schema"], grammar);
    // Two checks: more than the grammar admits, within the step's schema, so no repair turn.
    let answered = done(asking.receive(text(r#"{"checks": [1, 2]}"#)));
    assert_eq!((answered.requests, submitted(&answered)), (1, json!({"checks": [1, 2]})));
}

#[test]
fn a_json_schema_request_says_what_the_fields_mean() {
    // Under a grammar the model sees the keys it may write, not their descriptions.
    let described = json!({"type": "object", "required": ["checks"], "additionalProperties": false, "properties": {
        "checks": {"type": "array", "maxItems": 2, "description": "Read-only checks to run. In order.",
                   "items": {"type": "string", "description": "A check."}}}});
    let (_, request) =
        Asking::start(&client(Protocol::Fixed(Mode::JsonSchema)), "m", Step { schema: described, ..step() });
    let system = request.messages[0].content.as_deref().unwrap();
    assert!(system.ends_with("Its fields:\nchecks: Read-only checks to run.\nchecks[]: A check."), "{system}");
}

fn cut_off(content: &str) -> Result<ChatResponse, LlmError> {
    Ok(ChatResponse { message: Message::assistant(content), finish_reason: Some("length".into()), usage: None })
}

#[test]
fn an_answer_cut_off_at_the_token_limit_is_asked_again_shorter_and_an_object_inside_it_is_not_the_answer() {
    // Measured on Ollama with Gemma 3 270M: the plan ran to the last token inside a check, and
    // the first whole object in it was that check's arguments.
    let long = format!(r#"{{"checks": [{{"arguments": {{"namespace": "shop"}}, "step": "{}"#, "0".repeat(3_000));
    let (mut asking, _) = Asking::start(&client(Protocol::Fixed(Mode::JsonSchema)), "m", step());
    let repair = asked(asking.receive(cut_off(&long)));
    let [.., echo, prompt] = repair.messages.as_slice() else { panic!() };
    assert!(echo.content.as_deref().unwrap().chars().count() <= CUT_OFF_ECHO_CHARS, "only the start is echoed");
    let prompt = prompt.content.as_deref().unwrap();
    assert!(prompt.contains("stopped before its JSON object closed (the limit is 256 tokens)"), "{prompt}");
    // Ollama's loop guard ends an answer with no finish reason: cut off again, so no
    // submission, and the caller reports the missing answer.
    let stopped = Ok(ChatResponse { message: Message::assistant(long.as_str()), finish_reason: None, usage: None });
    let answered = done(asking.receive(stopped));
    assert!(answered.response.message.tool_calls.is_empty());
    assert_eq!(answered.requests, 2);

    // A whole object that reached the limit just as it closed is an answer.
    let (mut asking, _) = Asking::start(&client(Protocol::Fixed(Mode::JsonSchema)), "m", step());
    let answered = done(asking.receive(cut_off(r#"{"checks": [1]}"#)));
    assert_eq!(submitted(&answered), json!({"checks": [1]}));
}

#[test]
fn a_tool_call_answer_is_taken_as_it_is() {
    let llm = client(Protocol::Auto);
    let (mut asking, _) = Asking::start(&llm, "m", step());
    let answered = done(asking.receive(called(r#"{"checks": []}"#)));
    assert_eq!((answered.mode, answered.requests), (Mode::ToolCall, 1));
    assert_eq!(answered.response.message.tool_calls[0].id, "c1");
    assert_eq!(llm.learned_mode("m"), Some(Mode::ToolCall));
}

#[test]
fn the_first_object_is_found_in_prose() {
    assert_eq!(first_object(r#"x {"a": {"b": 1}} y {"c": 2}"#), Some(json!({"a": {"b": 1}})));
    assert_eq!(first_object(r#"set {not json} then {"ok": true}"#), Some(json!({"ok": true})));
    assert_eq!(first_object("[1, 2]"), None);
    assert_eq!(first_object(r#"{"cut": "#), None);
    let many = "{".repeat(10_000);
    assert_eq!(first_object(&many), None, "bounded work on hostile text");
}

#[test]
fn strict_is_claimed_only_for_schemas_in_the_strict_subset() {
    let closed = json!({"type": "object", "additionalProperties": false, "required": ["a"],
                        "properties": {"a": {"type": "array", "items": {"anyOf": [{"type": "string"},
                            {"type": "object", "additionalProperties": false, "required": ["b"],
                             "properties": {"b": {"type": "string"}}}]}}}});
    assert!(strict_subset(&closed));
    let mut optional = closed.clone();
    optional["properties"]["a"]["items"]["anyOf"][1]["properties"]["c"] = json!({"type": "string"});
    assert!(!strict_subset(&optional), "an optional nested property");
    assert!(!strict_subset(&json!({"type": "object", "maxProperties": 0})), "an object without additionalProperties");
    assert!(!strict_subset(&json!({"type": "object", "properties": {"a": {}}, "required": ["a"]})));
}

#[test]
fn the_first_mode_says_where_it_came_from_and_an_answer_keeps_it() {
    // Seeded by the server identification: kept while it answers.
    let llm = client(Protocol::Auto);
    llm.remember_mode("m", Mode::JsonSchema, ModeSource::Probe);
    let (mut asking, first) = Asking::start(&llm, "m", step());
    assert_eq!((asking.mode(), first.tools.len()), (Mode::JsonSchema, 0));
    assert!(first.response_format.is_some());
    done(asking.receive(text(r#"{"checks": []}"#)));
    assert_eq!(
        (llm.model_facts("m").mode, llm.model_facts("m").source),
        (Some(Mode::JsonSchema), Some(ModeSource::Probe))
    );

    // Nothing known: tool_call, the default; a fallback is remembered as one.
    let (mut asking, _) = Asking::start(&llm, "n", step());
    done(asking.receive(called(r#"{"checks": []}"#)));
    assert_eq!(llm.model_facts("n").source, Some(ModeSource::Default));
    let (mut asking, _) = Asking::start(&llm, "n", step());
    asked(asking.receive(text("prose")));
    done(asking.receive(text(r#"{"checks": []}"#)));
    let facts = llm.model_facts("n");
    assert_eq!((facts.mode, facts.source), (Some(Mode::JsonSchema), Some(ModeSource::Fallback)));

    // A fixed protocol's mode is the setting's, whatever was learned.
    let fixed = client(Protocol::Fixed(Mode::JsonObject));
    fixed.remember_mode("m", Mode::ToolCall, ModeSource::Probe);
    let (asking, first) = Asking::start(&fixed, "m", step());
    assert_eq!((asking.mode(), first.response_format), (Mode::JsonObject, Some(json!({"type": "json_object"}))));
    let facts = fixed.model_facts("m");
    assert_eq!((facts.mode, facts.source), (Some(Mode::JsonObject), Some(ModeSource::Setting)));
}

#[tokio::test]
async fn a_step_begins_without_a_mode_from_a_server_that_cannot_be_reached() {
    // Nothing listens on port 9: the identification finds nothing, and the step starts at once
    // with a tool call (auto) or the setting's mode.
    let llm = client(Protocol::Auto);
    let (asking, first) = Asking::begin(&llm, "m", step()).await;
    assert_eq!((asking.mode(), first.tool_choice), (Mode::ToolCall, Some(ToolChoice::Required)));
    assert_eq!(llm.model_facts("m"), crate::llm::ModelFacts::default());
    let (asking, _) = Asking::begin(&client(Protocol::Fixed(Mode::Text)), "m", step()).await;
    assert_eq!(asking.mode(), Mode::Text);
}

#[test]
fn a_schema_sent_for_a_grammar_keeps_its_bounds_within_what_llama_cpp_parses() {
    // The investigation result's 4096-character summary and a tool's 16384-character query
    // made Ollama v0.17.4's runner crash ("number of repetitions exceeds sane defaults").
    let schema = json!({"type": "object", "additionalProperties": false, "required": ["summary", "checks"],
        "properties": {
            "summary": {"type": "string", "maxLength": 4096},
            "checks": {"type": "array", "maxItems": 5000, "items": {"anyOf": [
                {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 16384}}},
                {"type": "string", "maxLength": 240, "enum": [{"maxLength": 9999}]}]}}}});
    let step = Step { schema: schema.clone(), ..step() };
    let bounded = json!({"type": "object", "additionalProperties": false, "required": ["summary", "checks"],
        "properties": {
            "summary": {"type": "string", "maxLength": 2000},
            "checks": {"type": "array", "maxItems": 2000, "items": {"anyOf": [
                {"type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 2000}}},
                {"type": "string", "maxLength": 240, "enum": [{"maxLength": 9999}]}]}}}});
    let (_, forced) = Asking::start(&client(Protocol::Fixed(Mode::ToolCall)), "m", step.clone());
    assert_eq!(forced.tools[0].function.parameters, bounded);
    let (mut asking, first) = Asking::start(&client(Protocol::Fixed(Mode::JsonSchema)), "m", step);
    assert_eq!(first.response_format.unwrap()["json_schema"]["schema"], bounded);
    // Answers are still checked against the step's own schema.
    let long = "x".repeat(3000);
    let answered = done(asking.receive(text(&json!({"summary": long, "checks": []}).to_string())));
    assert_eq!(submitted(&answered)["summary"].as_str().map(str::len), Some(3000));
}
