// Schedules: every RunSchedule the key reads, its newest result, what changed, the next tick, and
// "Run now" for the key's own namespaces.

import { api } from "./api.js";
import { badge, details, errorBox, h, jsonBlock, replace, when } from "./dom.js";

function ready(schedule) {
  const condition = (schedule.conditions || []).find((c) => c.type === "Ready");
  return condition && condition.status === "True";
}

function suspended(schedule) {
  return Boolean(schedule.spec && schedule.spec.suspend);
}

function resultLine(result) {
  if (!result) return h("p", { class: "muted" }, "No Run has finished yet.");
  const ok = result.outcome === "Succeeded" && (result.findingStatus === "healthy" || !result.findingStatus);
  const runLink = result.runId ? h("a", { href: `/runs/${encodeURIComponent(result.runId)}` }, result.runId) : null;
  return h("div", { class: "result" },
    badge(result.findingStatus || result.outcome, ok ? "ok" : "failed"), " ",
    h("span", { class: "muted" }, `${result.outcome} · for ${when(result.scheduledTime)}`), " ", runLink,
    result.summary ? h("p", { class: "summary" }, result.summary) : null,
    h("p", { class: "muted" }, `evidence ${result.evidenceVerified}/${result.evidenceCount} verified${result.notified ? " · receivers told" : ""}`),
    (result.changes || []).length
      ? h("div", { class: "changes" }, h("strong", {}, "What changed"), h("ul", {}, result.changes.map((c) => h("li", {}, c))))
      : h("p", { class: "muted changes" }, "Nothing changed since the Run before."));
}

function runNow(schedule, message) {
  const button = h("button", { type: "button", class: "run-now" }, "Run now");
  button.addEventListener("click", async () => {
    button.disabled = true;
    replace(message, h("span", { class: "muted" }, "Asking…"));
    try {
      const accepted = await api(`/api/v1/schedules/${encodeURIComponent(schedule.namespace)}/${encodeURIComponent(schedule.name)}/run`, { method: "POST", body: {} });
      replace(message, h("span", {}, `Started: the Run for ${when(accepted.scheduled_time)} (job ${accepted.job_id}); its result shows here when it ends.`));
    } catch (error) {
      replace(message, errorBox(error));
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** The Schedules page. */
export async function schedulesView() {
  const { schedules } = await api("/api/v1/schedules");
  const items = schedules || [];
  return h("section", {},
    h("h1", {}, `Schedules (${items.length})`),
    items.length ? null : h("p", { class: "muted", id: "schedules-empty" }, "No RunSchedule is visible to this key."),
    h("ul", { class: "resources", id: "schedules-list" }, items.map((s) => {
      const status = s.status || {};
      const spec = s.spec || {};
      const state = !ready(s) ? ["Not ready", "failed"] : suspended(s) ? ["Suspended", "pending"] : ["Active", "ok"];
      const message = h("div", { class: "run-now-message", role: "status" });
      return h("li", { class: `resource schedule ${ready(s) ? "ready" : "failing"}`, "data-name": s.name, "data-namespace": s.namespace },
        h("div", { class: "head" }, badge(state[0], state[1]), " ", h("strong", {}, `${s.namespace}/${s.name}`), " ",
          h("code", {}, spec.schedule || "?"), spec.timeZone ? h("span", { class: "muted" }, ` ${spec.timeZone}`) : null),
        h("p", { class: "muted times" },
          `next tick ${status.nextScheduleTime ? when(status.nextScheduleTime) : suspended(s) ? "none (suspended)" : "—"}`,
          ` · last ${status.lastScheduleTime ? when(status.lastScheduleTime) : "never"}`,
          ` · ${status.consecutiveFailures || 0} failures in a row · ${status.missedTicks || 0} missed · ${status.skippedTicks || 0} skipped`),
        status.lastSkipped ? h("p", { class: "error" }, `Skipped ${when(status.lastSkipped.scheduledTime)}: ${status.lastSkipped.message}`) : null,
        (s.errors || []).length ? h("ul", { class: "errors" }, s.errors.map((e) => h("li", {}, e))) : null,
        resultLine(status.lastResult),
        h("div", { class: "actions" }, runNow(s, message), message),
        (status.recentRuns || []).length ? details(`Recent Runs (${status.recentRuns.length})`,
          h("ul", {}, status.recentRuns.map((id) => h("li", {}, h("a", { href: `/runs/${encodeURIComponent(id)}` }, id))))) : null,
        details("Spec", jsonBlock(spec)));
    })));
}
