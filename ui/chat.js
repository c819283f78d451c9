// Chat: the conversation (kept in page memory, the whole history is sent) and the Run panel.

import { api } from "./api.js";
import { badge, details, errorBox, h, jsonBlock, replace } from "./dom.js";
import { markdown } from "./markdown.js";

const history = [];
const panels = new Map();

/** The Chat page. */
export function chatView() {
  const log = h("div", { class: "chat-log", id: "chat-log", "aria-live": "polite" });
  const text = h("textarea", { id: "chat-input", rows: 3, maxlength: 32000, placeholder: "Ask about an alert, a host, a service… (Ctrl+Enter sends)", "aria-label": "Message" });
  const debug = h("input", { type: "checkbox", id: "chat-debug" });
  const send = h("button", { type: "submit", id: "chat-send" }, "Send");
  const status = h("p", { class: "muted", id: "chat-status" });
  const draw = () => {
    replace(log, history.map((turn, index) => h("div", { class: `turn ${turn.role}` },
      h("div", { class: "who" }, turn.role === "user" ? "You" : "Akritas"),
      turn.role === "user" ? h("div", { class: "text plain" }, turn.content) : h("div", { class: "text md" }, markdown(turn.content)),
      panels.get(index))));
    if (!history.length) log.append(h("p", { class: "muted" }, "Ask a question to start a read-only investigation."));
  };
  const submit = async (event) => {
    event.preventDefault();
    const content = text.value.trim();
    if (!content || send.disabled) return;
    history.push({ role: "user", content });
    draw();
    send.disabled = true;
    replace(status, "Investigating…");
    try {
      const outcome = await api("/api/v1/chat", { body: { messages: history.map(({ role, content }) => ({ role, content })), debug: debug.checked } });
      history.push({ role: "assistant", content: outcome.answer || "" });
      panels.set(history.length - 1, runPanel(outcome, debug.checked));
      text.value = "";
      replace(status);
    } catch (error) {
      // A failed send leaves the conversation as it was.
      history.pop();
      replace(status, errorBox(error));
      if (error.body && error.body.error && error.body.error.run_id) status.append(h("p", {}, "Run: ", h("a", { href: `/runs/${error.body.error.run_id}` }, error.body.error.run_id)));
    } finally {
      send.disabled = false;
      draw();
      log.lastElementChild && log.lastElementChild.scrollIntoView({ block: "nearest" });
    }
  };
  text.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) submit(event);
  });
  const clear = h("button", { type: "button", class: "secondary", onclick: () => { history.length = 0; panels.clear(); draw(); } }, "New conversation");
  draw();
  return h("section", { class: "chat" }, h("h1", {}, "Chat"), log,
    h("form", { class: "composer", onsubmit: submit }, text,
      h("div", { class: "row" }, h("label", { class: "check" }, debug, "include payloads in the next response"), clear, send)),
    status);
}

/** The Run panel of a chat or follow-up answer: Run id, plan, gaps, skills, tools, budget. */
export function runPanel(outcome, debug) {
  const activity = outcome.activity || [];
  const planCall = activity.find((a) => a.id === "call_akritas_investigation_plan");
  const gaps = outcome.capability_gaps || [];
  const plan = outcome.plan_error
    ? h("p", { class: "plan failed" }, badge("plan not produced", "failed"), " The investigation plan was not produced: ", outcome.plan_error)
    : h("p", { class: "plan" }, badge("plan", "ok"), gaps.length ? ` ${gaps.length} unavailable check(s)` : " No unavailable checks");
  const checks = planCall && planCall.arguments && Array.isArray(planCall.arguments.checks)
    ? h("ol", { class: "checks" }, planCall.arguments.checks.map((c) => h("li", {}, c.step || "", " — ", h("code", {}, c.tool || ""), c.reason ? ` (${c.reason})` : "")))
    : null;
  const tools = h("ul", { class: "tools-used" }, activity.map((a) => h("li", { class: `tool ${a.status}` },
    h("span", { class: "tool-line" }, `${a.name} · ${a.status} · ${a.duration_ms} ms · ${a.id}`),
    debug && a.arguments !== undefined ? details("arguments", jsonBlock(a.arguments)) : null,
    debug && a.result !== undefined ? details("result", jsonBlock(a.result)) : null)));
  return h("aside", { class: "run-panel" },
    h("h3", {}, "Run ", outcome.run_id ? h("a", { href: `/runs/${outcome.run_id}`, class: "run-link" }, outcome.run_id) : "(not recorded)"),
    plan, checks,
    gaps.length ? h("div", {}, h("h4", {}, "Unavailable checks"), h("ul", { class: "gaps" }, gaps.map((g) => h("li", {}, g.step || g.capability || "", g.capability ? ` — needs ${g.capability}` : "", g.reason ? `: ${g.reason}` : "")))) : null,
    h("h4", {}, "Skills"), (outcome.skills || []).length ? h("p", {}, outcome.skills.join(", ")) : h("p", { class: "muted" }, "none"),
    h("h4", {}, `Tools (${activity.length})`), tools,
    h("h4", {}, "Budget"), budgetTable(outcome.budget || {}));
}

/** The budget's dimensions: label, usage field, limit field. */
const DIMENSIONS = [
  ["duration (ms)", "duration_ms", "max_duration_ms"],
  ["model calls", "model_calls", "max_model_calls"],
  ["tool calls", "tool_calls", "max_tool_calls"],
  ["tool result bytes", "tool_result_bytes", "max_tool_result_bytes"],
  ["retrieved context bytes", "retrieved_context_bytes", "max_retrieved_context_bytes"],
  ["largest request (tokens)", "max_request_tokens", "max_context_tokens"],
  ["output tokens", "output_tokens", "max_output_tokens"],
  ["prompt tokens (reported)", "prompt_tokens", null],
];

/** Usage against limits, one row per dimension. */
export function budgetTable(budget) {
  const usage = budget.usage || {};
  const limits = budget.limits || {};
  return h("div", { class: "scroll" }, h("table", { class: "budget" },
    h("thead", {}, h("tr", {}, h("th", {}, "dimension"), h("th", {}, "usage"), h("th", {}, "limit"))),
    h("tbody", {}, DIMENSIONS.map(([label, used, limit]) => h("tr", {}, h("td", {}, label), h("td", {}, usage[used] ?? "–"), h("td", {}, (limit && limits[limit]) ?? "–"))))));
}
