// Runs: the list and one Run (facts, investigation, timeline, raw tool results, follow-up).

import { api } from "./api.js";
import { badge, details, errorBox, facts, h, jsonBlock, replace, when } from "./dom.js";
import { markdown } from "./markdown.js";
import { runPanel } from "./chat.js";

/** The Runs page. */
export async function runsView() {
  const { runs } = await api("/api/v1/runs?limit=200");
  return h("section", {}, h("h1", {}, `Runs (${runs.length})`),
    runs.length ? h("ul", { class: "cards", id: "runs-list" }, runs.map((run) => h("li", {},
      h("a", { href: `/runs/${run.id}`, class: "card" },
        h("span", { class: "title" }, run.metadata && run.metadata.alert_name ? run.metadata.alert_name : run.source),
        badge(run.investigation ? run.investigation.finding_status : run.status),
        h("span", { class: "muted" }, `${when(run.started_at)} · ${run.actor} · ${run.namespace}`),
        h("code", { class: "id" }, run.id)))))
      : h("p", { class: "muted" }, "No Runs yet."));
}

function duration(run) {
  if (!run.started_at || !run.completed_at) return "";
  const ms = new Date(run.completed_at) - new Date(run.started_at);
  return Number.isFinite(ms) ? `${ms} ms` : "";
}

/** The structured mode of the Run's last structured step, with how many of its steps fell back. */
function protocol(meta) {
  if (!meta.model_protocol) return "";
  const fallbacks = Array.isArray(meta.model_protocol_fallbacks) ? meta.model_protocol_fallbacks : [];
  if (!fallbacks.length) return String(meta.model_protocol);
  const count = `${fallbacks.length} fallback${fallbacks.length === 1 ? "" : "s"}`;
  return h("span", { title: fallbacks.map(String).join("\n") }, `${meta.model_protocol} (${count})`);
}

/** One Run. */
export async function runView(id) {
  const { run } = await api(`/api/v1/runs/${encodeURIComponent(id)}`);
  const meta = run.metadata || {};
  const events = run.events || [];
  const calls = events.filter((e) => e.type === "tool_call");
  return h("section", { class: "run" },
    h("h1", {}, "Run ", h("code", {}, run.id)),
    facts([
      ["Status", badge(run.status)], ["Source", run.source], ["Actor", run.actor], ["Namespace", run.namespace],
      ["Model", run.model], ["Model protocol", protocol(meta)], ["Catalog version", String(run.catalog_version)], ["Started", when(run.started_at)],
      ["Finished", when(run.completed_at)], ["Duration", duration(run)],
      ["Job", meta.job_id ? String(meta.job_id) : ""], ["Incident", meta.incident_id ? h("a", { href: `/incidents/${meta.incident_id}` }, String(meta.incident_id)) : ""],
      ["Policy", "Read-only diagnostics"],
      ["Production writes", run.investigation ? String(run.investigation.production_writes) : ""],
    ]),
    run.error ? h("div", { class: "error" }, h("strong", {}, run.error_code || "error"), ": ", run.error) : null,
    run.investigation ? investigation(run.investigation, run.id) : null,
    Object.keys(meta).length ? details("Metadata", jsonBlock(meta)) : null,
    h("h2", {}, `Timeline (${events.length})`),
    h("ol", { class: "timeline" }, events.map((e) => h("li", { class: `event ${e.status || ""}` },
      h("span", { class: "time" }, when(e.time)), " ", h("strong", {}, e.type), e.status ? [" ", badge(e.status)] : null,
      e.metadata && e.metadata.tool ? [" ", h("code", {}, e.metadata.tool)] : null,
      e.metadata && e.metadata.call_id ? [" ", h("a", { href: `#${e.metadata.call_id}` }, e.metadata.call_id)] : null))),
    h("h2", {}, `Tool results (${calls.length})`),
    h("div", { class: "tool-results" }, calls.map(toolResult)),
    followUp(run));
}

function toolResult(event) {
  const meta = event.metadata || {};
  const id = meta.call_id ? String(meta.call_id) : `event-${event.sequence}`;
  return h("details", { class: "tool-result", id },
    h("summary", {}, `${meta.tool || "tool"} · ${event.status || ""} · ${meta.duration_ms ?? "?"} ms · ${id}`),
    h("h4", {}, "Arguments"), jsonBlock(event.arguments ?? null),
    h("h4", {}, "Result"), jsonBlock(event.result ?? null),
    Object.keys(meta).length ? details("Facts", jsonBlock(meta)) : null);
}

/** The InvestigationResult; each `tool-call:<id>` evidence reference links to its call in `runId`. */
export function investigation(result, runId) {
  const list = (title, items) => (items && items.length ? [h("h4", {}, title), h("ul", {}, items.map((item) => h("li", {}, markdown(item))))] : null);
  return h("div", { class: "investigation" },
    h("h2", {}, "Investigation result"),
    runId ? h("p", {}, "From Run ", h("a", { href: `/runs/${runId}` }, runId)) : null,
    facts([["Finding", badge(result.finding_status)], ["Confidence", result.confidence], ["Actionability", result.actionability], ["Evidence verified", coverage(result.evidence_coverage)], ["Production writes", String(result.production_writes)]]),
    h("div", { class: "md" }, markdown(result.summary)),
    result.hypothesis ? [h("h4", {}, "Hypothesis"), h("div", { class: "md" }, markdown(result.hypothesis))] : null,
    result.impact ? [h("h4", {}, "Impact"), h("div", { class: "md" }, markdown(result.impact))] : null,
    h("h4", {}, "Evidence"),
    h("ul", { class: "evidence" }, (result.evidence || []).map((ref) => h("li", {}, evidenceLink(ref, runId)))),
    list("Ruled out", result.ruled_out), list("Affected components", result.affected_components), list("Recommended actions", result.recommended_actions));
}

/** `2/3 (67%)`: evidence items whose quoted value the host found in the cited call's output. */
function coverage(c) {
  if (!c) return "not recorded";
  return `${c.verified}/${c.claims} (${Math.round(c.ratio * 100)}%)`;
}

/** `tool-call:<id>` links to the call; a quoted value after it was verified by the host. */
function evidenceLink(ref, runId) {
  const call = /^tool-call:(\S+)(?: (.+))?$/.exec(ref);
  if (!call) return h("code", {}, ref);
  const target = runId ? h("a", { href: `/runs/${runId}#${call[1]}`, class: "evidence-link" }, `tool-call:${call[1]}`) : h("code", {}, `tool-call:${call[1]}`);
  if (!call[2]) return target;
  return [target, " ", h("q", { class: "verified-quote", title: "found by the host in this call's output" }, call[2].replace(/^"|"$/g, ""))];
}

function followUp(run) {
  if (run.status === "running") return h("p", { class: "muted" }, "Follow-up questions are possible once the Run has finished.");
  const text = h("textarea", { id: "follow-up-input", rows: 2, maxlength: 32000, "aria-label": "Follow-up question", placeholder: "Ask a follow-up about this Run" });
  const send = h("button", { type: "submit", id: "follow-up-send" }, "Ask");
  const out = h("div", { id: "follow-up-answer", "aria-live": "polite" });
  const submit = async (event) => {
    event.preventDefault();
    const message = text.value.trim();
    if (!message) return;
    send.disabled = true;
    replace(out, h("p", { class: "muted" }, "Investigating…"));
    try {
      const outcome = await api(`/api/v1/runs/${encodeURIComponent(run.id)}/chat`, { body: { message } });
      replace(out, h("div", { class: "turn assistant" }, h("div", { class: "text md" }, markdown(outcome.answer || "")), runPanel(outcome, false)));
      text.value = "";
    } catch (error) {
      replace(out, errorBox(error));
    } finally {
      send.disabled = false;
    }
  };
  text.addEventListener("keydown", (event) => { if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) submit(event); });
  return h("form", { class: "composer follow-up", onsubmit: submit }, h("h2", {}, "Follow-up"), text, h("div", { class: "row" }, send), out);
}
