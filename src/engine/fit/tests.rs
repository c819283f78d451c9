use serde_json::{Value, json};

use super::cut::{OMITTED_RESULTS, TEXT_MARKER, planner};
use super::*;
use crate::engine::retrieval::SEARCH_TOOL;
use crate::llm::{Role, ToolCall};

const QUESTION: &str = "Why is the postgres database on db-7 slow?";

fn tool(name: &str, description: &str) -> ToolDefinition {
    let schema = json!({"type": "object", "properties": {"host": {"type": "string", "description": "x".repeat(200)}}});
    ToolDefinition::function(name, description, schema)
}

/// A search result as the knowledge bases return it, ranked `rank`.
fn hit(rank: usize, bytes: usize) -> Value {
    json!({"document": format!("doc-{rank}.md"), "title": format!("Runbook {rank}"), "excerpt": "r".repeat(bytes)})
}

fn search_result(id: &str, hits: usize, bytes: usize) -> String {
    let results: Vec<Value> = (0..hits).map(|rank| hit(rank, bytes)).collect();
    json!({"id": id, "name": SEARCH_TOOL, "output": {"results": results, "knowledge_bases": {"ops/runbooks": "abc"}}})
        .to_string()
}

fn call(id: &str, name: &str) -> Message {
    Message::assistant_tool_calls(vec![ToolCall::function(id, name, "{}")])
}

/// A conversation as the adaptive loop sends it: system (base, then skills), the question, the
/// automatic retrieval (with `hits` documents, when any), and tool results of the given sizes.
fn conversation(skills: usize, hits: usize, results: &[usize]) -> ChatRequest {
    let mut messages =
        vec![Message::system(format!("Respond in English.\n\n{}", "s".repeat(skills))), Message::user(QUESTION)];
    if hits > 0 {
        messages.push(call("call_akritas_rag_prefetch", "knowledge_search"));
        messages
            .push(Message::tool("call_akritas_rag_prefetch", search_result("call_akritas_rag_prefetch", hits, 900)));
    }
    for (n, bytes) in results.iter().enumerate() {
        let id = format!("call-{n}");
        messages.push(call(&id, "postgres_activity"));
        messages.push(Message::tool(id.clone(), json!({"id": id, "output": "o".repeat(*bytes)}).to_string()));
    }
    let mut request = ChatRequest::new(messages);
    request.tools = vec![
        tool("postgres_activity", "Active queries and locks of a PostgreSQL database."),
        tool("dns_lookup", "Resolve a host name."),
        tool("mail_queue", "Messages waiting in the mail queue."),
    ];
    request.tool_choice = Some(ToolChoice::Auto);
    request.max_tokens = 1024;
    request
}

const SKILLS_FROM: Option<usize> = Some("Respond in English.".len());

fn bytes_of(request: &ChatRequest, instructions: Option<&str>) -> usize {
    prompt_bytes(&request.messages, &request.tools, instructions)
}

/// A window in which the prompt of `request` must lose about `excess` bytes (with what fitting
/// holds for the completion).
fn window_cutting(request: &ChatRequest, instructions: Option<&str>, excess: usize) -> u32 {
    let tokens = estimate_tokens(bytes_of(request, instructions).saturating_sub(excess));
    // The completion holds a quarter of the window, between the floor and max_tokens (1024).
    let reserve = (tokens / 3).clamp(u64::from(MIN_COMPLETION_TOKENS), u64::from(request.max_tokens));
    u32::try_from(tokens + reserve).unwrap()
}

fn tool_contents(request: &ChatRequest) -> Vec<String> {
    request.messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.clone().unwrap()).collect()
}

fn search_of(request: &ChatRequest) -> Value {
    serde_json::from_str(request.messages[3].content.as_deref().unwrap()).unwrap()
}

#[test]
fn a_request_that_fits_is_left_alone() {
    let mut request = conversation(100, 3, &[200]);
    let original = request.clone();
    let mut instructions = Some("Be careful.".to_string());
    let fitted = fit(&mut request, &mut instructions, SKILLS_FROM, 100_000);
    assert_eq!(request, original);
    assert_eq!(instructions.as_deref(), Some("Be careful."));
    assert!(!fitted.changed());
    assert_eq!((fitted.max_tokens_before, fitted.max_tokens_after), (1024, 1024));
}

#[test]
fn the_estimate_is_the_json_bytes_with_the_instructions_over_three() {
    let request = conversation(0, 1, &[]);
    let json = serde_json::to_string(&(&request.messages, &request.tools)).unwrap();
    assert_eq!(prompt_tokens(&request, None), (json.len() as u64).div_ceil(3));
    let with = prompt_tokens(&request, Some("abc"));
    assert_eq!(with, ((json.len() + 5 + INSTRUCTIONS_FRAME_BYTES) as u64).div_ceil(3));
    // A response format is a grammar on the server's side, not prompt text.
    let mut formatted = request.clone();
    let schema =
        json!({"type": "object", "properties": {"checks": {"type": "array", "description": "x".repeat(9000)}}});
    formatted.response_format = Some(json!({"type": "json_schema", "json_schema": {"name": "plan", "schema": schema}}));
    assert_eq!(prompt_tokens(&formatted, None), prompt_tokens(&request, None));
}

#[test]
fn runbooks_go_first_the_lowest_ranked_and_the_best_stays() {
    let mut request = conversation(100, 5, &[300]);
    let window = window_cutting(&request, None, 1500);
    let fitted = fit(&mut request, &mut None, SKILLS_FROM, window);
    let search = search_of(&request);
    let kept: Vec<&str> =
        search["output"]["results"].as_array().unwrap().iter().map(|r| r["document"].as_str().unwrap()).collect();
    assert_eq!(kept, ["doc-0.md", "doc-1.md", "doc-2.md"], "the two lowest-ranked go");
    assert_eq!(search["output"][OMITTED_RESULTS], 2);
    assert_eq!(fitted.cuts.runbook_documents, 2);
    assert!(fitted.cuts.runbook_bytes > 1800, "{fitted:?}");
    assert_eq!((fitted.cuts.tool_results, fitted.cuts.skill_bytes, fitted.cuts.tools), (0, 0, 0));
    assert!(fitted.prompt_tokens_after + u64::from(fitted.max_tokens_after) <= u64::from(window));

    // However small the window, the best-ranked document of the search stays.
    let mut request = conversation(0, 5, &[]);
    fit(&mut request, &mut None, None, 600);
    assert!(tool_contents(&request)[0].contains("doc-0.md"));
}

#[test]
fn tool_results_are_cut_largest_first_and_every_call_keeps_its_result() {
    let mut request = conversation(0, 1, &[6000, 3000, 400]);
    let before = request.clone();
    let window = window_cutting(&request, None, 4000);
    let fitted = fit(&mut request, &mut None, None, window);
    let contents = tool_contents(&request);
    assert_eq!(request.messages.len(), before.messages.len(), "no message is removed");
    for (sent, original) in request.messages.iter().zip(&before.messages) {
        assert_eq!(
            (sent.role, &sent.tool_call_id, &sent.tool_calls),
            (original.role, &original.tool_call_id, &original.tool_calls)
        );
    }
    assert!(contents[1].len() < 3000 && contents[1].contains("bytes shown]"), "the largest is cut");
    assert!(contents[1].starts_with("{\"id\":\"call-0\""), "from its end");
    assert_eq!(contents[2].len(), tool_contents(&before)[2].len(), "the next one only when needed");
    assert_eq!(contents[3], tool_contents(&before)[3], "the small one is untouched");
    assert_eq!(fitted.cuts.tool_results, 1);
    assert!(fitted.cuts.tool_result_bytes >= 3000);
    assert!(fitted.prompt_tokens_after + u64::from(fitted.max_tokens_after) <= u64::from(window));

    // Among results of equal size the older one goes first; none below the floor.
    let mut request = conversation(0, 1, &[3000, 3000]);
    let window = window_cutting(&request, None, 1000);
    fit(&mut request, &mut None, None, window);
    let contents = tool_contents(&request);
    assert!(contents[1].len() < 3000 && contents[2].len() > 3000, "{} {}", contents[1].len(), contents[2].len());
    let mut request = conversation(0, 1, &[3000, 3000]);
    fit(&mut request, &mut None, None, 300);
    assert!(tool_contents(&request).iter().all(|c| c.len() >= MIN_RESULT_BYTES - 8), "{:?}", tool_contents(&request));
}

#[test]
fn skills_are_cut_after_tool_results_and_before_tools() {
    let mut request = conversation(3000, 0, &[200]);
    let window = window_cutting(&request, None, 2000);
    let fitted = fit(&mut request, &mut None, SKILLS_FROM, window);
    let system = request.messages[0].content.as_deref().unwrap();
    assert!(system.starts_with("Respond in English.\n\nsss"), "the base stays, skills are cut from their end");
    assert!(system.ends_with(TEXT_MARKER));
    assert!(fitted.cuts.skill_bytes >= 2000, "{fitted:?}");
    assert_eq!(fitted.cuts.tool_results, 0, "a result below the floor is not cut: {fitted:?}");
    assert_eq!((fitted.cuts.tools, fitted.cuts.instruction_bytes), (0, 0), "{fitted:?}");
}

#[test]
fn the_least_related_tools_go_and_one_stays() {
    let mut request = conversation(0, 0, &[]);
    let window = window_cutting(&request, None, 250);
    let fitted = fit(&mut request, &mut None, None, window);
    let names: Vec<&str> = request.tools.iter().map(|t| t.function.name.as_str()).collect();
    assert_eq!(names, ["postgres_activity", "dns_lookup"], "mail_queue shares no word with the question");
    assert_eq!(fitted.cuts.tools, 1);
    let mut request = conversation(0, 0, &[]);
    fit(&mut request, &mut None, None, 200);
    let names: Vec<&str> = request.tools.iter().map(|t| t.function.name.as_str()).collect();
    assert_eq!(names, ["postgres_activity"], "the most related stays");

    // A forced tool is never removed, whatever its relevance.
    let mut request = conversation(0, 0, &[]);
    request.tool_choice = Some(ToolChoice::Function("mail_queue".into()));
    fit(&mut request, &mut None, None, 200);
    let names: Vec<&str> = request.tools.iter().map(|t| t.function.name.as_str()).collect();
    assert_eq!(names, ["mail_queue"]);
}

#[test]
fn the_system_instructions_are_cut_last() {
    let instructions = format!("SYSTEM {}", "i".repeat(3000));
    let mut request = conversation(1000, 3, &[2000]);
    let mut kept = Some(instructions.clone());
    let window = window_cutting(&request, Some(&instructions), 1500);
    let fitted = fit(&mut request, &mut kept, SKILLS_FROM, window);
    assert_eq!(kept.as_deref(), Some(instructions.as_str()), "earlier cuts were enough: {fitted:?}");

    let mut kept = Some(instructions.clone());
    let mut request = conversation(1000, 3, &[2000]);
    let window = window_cutting(&request, Some(&instructions), 7000);
    let fitted = fit(&mut request, &mut kept, SKILLS_FROM, window);
    let cut = kept.unwrap();
    assert!(cut.starts_with("SYSTEM iii") && cut.ends_with(TEXT_MARKER) && cut.len() < 3000, "{fitted:?}");
    assert!(fitted.cuts.runbook_documents == 2 && fitted.cuts.tool_results == 2 && fitted.cuts.skill_bytes > 900);
    assert_eq!(fitted.cuts.tools, 2);
    assert!(fitted.cuts.instruction_bytes > 0);
    assert!(fitted.prompt_tokens_after + u64::from(fitted.max_tokens_after) <= u64::from(window));
    assert_eq!(request.messages[1].content.as_deref(), Some(QUESTION), "the question is never cut");
}

#[test]
fn the_completion_gets_what_the_window_leaves_and_never_less_than_the_floor() {
    // A quarter of the window is held for the completion; what the cuts free is given back.
    let mut request = conversation(0, 3, &[4000]);
    let window = 2048;
    let fitted = fit(&mut request, &mut None, None, window);
    assert_eq!(fitted.max_tokens_after, u32::try_from(u64::from(window) - fitted.prompt_tokens_after).unwrap());
    assert!(fitted.max_tokens_after >= window / 4);
    assert_eq!(fitted.cuts.completion_tokens, u64::from(1024 - fitted.max_tokens_after));

    // A question larger than the window: nothing may be cut from it, the completion keeps its floor.
    let mut request = ChatRequest::new(vec![Message::system("s"), Message::user("q".repeat(9000))]);
    request.max_tokens = 1024;
    let fitted = fit(&mut request, &mut None, None, 1000);
    assert_eq!(request.messages[1].content.as_deref().map(str::len), Some(9000));
    assert_eq!(fitted.max_tokens_after, MIN_COMPLETION_TOKENS);
    let mut request = ChatRequest::new(vec![Message::user("q".repeat(9000))]);
    request.max_tokens = 100;
    assert_eq!(fit(&mut request, &mut None, None, 1000).max_tokens_after, 100, "never raised");
}

#[test]
fn a_structured_answer_keeps_its_floor_and_the_prompt_is_cut_for_it() {
    // A result step in a small window: everything cuttable goes before its budget does.
    let structured = |min_completion_tokens| {
        let mut request = conversation(3000, 3, &[6000, 6000]);
        request.max_tokens = 512;
        request.min_completion_tokens = min_completion_tokens;
        request
    };
    // Under 2,048 tokens a quarter of the window is less than the structured floor.
    let window = 1600;
    let mut plain = structured(0);
    let fitted_plain = fit(&mut plain, &mut None, SKILLS_FROM, window);
    let mut request = structured(512);
    let fitted = fit(&mut request, &mut None, SKILLS_FROM, window);
    assert!(fitted_plain.max_tokens_after < 512, "{fitted_plain:?}");
    assert_eq!(fitted.max_tokens_after, 512, "{fitted:?}");
    assert!(fitted.prompt_tokens_after < fitted_plain.prompt_tokens_after, "{fitted:?} {fitted_plain:?}");
    assert!(fitted.prompt_tokens_after + 512 <= u64::from(window), "{fitted:?}");

    // A prompt that cannot be cut that far: the floor still holds (a cut-off answer is none).
    let mut request = ChatRequest::new(vec![Message::system("s"), Message::user("q".repeat(9000))]);
    request.max_tokens = 1024;
    request.min_completion_tokens = 512;
    assert_eq!(fit(&mut request, &mut None, None, 1000).max_tokens_after, 512);
    request.max_tokens = 300;
    assert_eq!(fit(&mut request, &mut None, None, 1000).max_tokens_after, 300, "never raised");
}

#[test]
fn the_planner_input_is_cut_inside_and_its_request_never() {
    let tools: Vec<Value> = ["postgres.activity", "dns.lookup", "mail.queue", "disk.usage"]
        .iter()
        .map(|name| json!({"name": name, "description": format!("Read {name}."), "input_schema": {"type": "object", "description": "d".repeat(300)}}))
        .collect();
    let retrieved: Value = serde_json::from_str(&search_result("call_akritas_rag_prefetch", 5, 900)).unwrap();
    let input = json!({
        planner::REQUEST: QUESTION,
        planner::RUNBOOKS: retrieved,
        planner::SKILLS: [{"name": "postgres", "source": "Skill/ops/postgres", planner::SKILL_TEXT: "k".repeat(1500)}],
        planner::TOOLS: tools,
        "maximum_execution_checks": 3,
        "response_language": "en",
    });
    let shapes: Vec<(String, Value)> =
        tools.iter().map(|t| (t["name"].as_str().unwrap().to_string(), t["input_schema"].clone())).collect();
    let schema = crate::engine::plan::plan_schema("en", &shapes, crate::engine::plan::PlanRoom::unbounded(3));
    let mut request = ChatRequest::new(vec![Message::system("Plan."), Message::user(input.to_string())]);
    request.tools = vec![ToolDefinition::function("local_investigation_submit_plan", "Submit the plan.", schema)];
    request.tool_choice = Some(ToolChoice::Required);
    request.max_tokens = 1024;
    let window = window_cutting(&request, None, 6000);
    let fitted = fit(&mut request, &mut None, None, window);
    let sent: Value = serde_json::from_str(request.messages[1].content.as_deref().unwrap()).unwrap();
    assert_eq!(sent[planner::REQUEST], QUESTION);
    assert_eq!(sent["maximum_execution_checks"], 3);
    assert_eq!(fitted.cuts.runbook_documents, 4, "{fitted:?}");
    assert!(sent[planner::RUNBOOKS].to_string().contains("doc-0.md"), "the best-ranked stays");
    assert!(fitted.cuts.skill_bytes > 0);
    let offered: Vec<&str> =
        sent[planner::TOOLS].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        offered,
        ["postgres.activity", "dns.lookup", "mail.queue"],
        "the least related, the last first: {fitted:?}"
    );
    assert_eq!(fitted.cuts.tools, 1);
    assert_eq!(request.tools.len(), 1, "the plan tool stays");
    let branches = request.tools[0].function.parameters["properties"]["checks"]["items"]["anyOf"].as_array().unwrap();
    let branches: Vec<&str> = branches.iter().map(|b| b["properties"]["tool"]["enum"][0].as_str().unwrap()).collect();
    assert_eq!(branches, offered, "the plan schema keeps the branches of the tools offered");
    assert!(fitted.prompt_tokens_after + u64::from(fitted.max_tokens_after) <= u64::from(window));
    assert_eq!(fitted.prompt_tokens_after, prompt_tokens(&request, None));
}

#[test]
fn a_runs_cuts_add_up_with_the_smallest_window() {
    let mut total = ContextCuts::default();
    assert!(total.is_empty());
    let fitted = |window, documents| Fitted {
        window,
        prompt_tokens_before: 10,
        prompt_tokens_after: 5,
        max_tokens_before: 10,
        max_tokens_after: 10,
        cuts: Cuts { runbook_documents: documents, runbook_bytes: 100, ..Cuts::default() },
    };
    total.add(&fitted(4096, 2), false);
    total.add(&fitted(3072, 1), true);
    total.add(&fitted(4096, 0), false);
    assert_eq!(total.window, Some(3072));
    assert_eq!((total.fitted_requests, total.overflow_retries), (3, 1));
    assert_eq!((total.cuts.runbook_documents, total.cuts.runbook_bytes), (3, 300));
    let json = serde_json::to_value(&total).unwrap();
    assert_eq!(json["runbook_documents"], 3, "the categories sit beside the counts: {json}");
}

#[test]
fn serialized_len_counts_the_json_bytes() {
    let value = (vec![Message::user("héllo")], serde_json::json!({"a": [1, 2]}));
    assert_eq!(serialized_len(&value), serde_json::to_string(&value).unwrap().len());
}
