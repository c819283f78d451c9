// Incidents: the list and one incident with a single chronological timeline of its
// alert events, jobs, Runs and deliveries, and the InvestigationResult.

import { api } from "./api.js";
import { badge, details, facts, h, jsonBlock, replace, when } from "./dom.js";
import { markdown } from "./markdown.js";
import { investigation } from "./runs.js";

const entity = (e) => (e ? `${e.kind}: ${e.display_name || e.id}` : "");

/** The Incidents page. */
export async function incidentsView() {
  const { incidents } = await api("/api/v1/incidents?limit=200");
  return h("section", {}, h("h1", {}, `Incidents (${incidents.length})`),
    incidents.length ? h("ul", { class: "cards", id: "incidents-list" }, incidents.map((i) => h("li", {},
      h("a", { href: `/incidents/${i.id}`, class: `card incident ${i.state}` },
        h("span", { class: "title" }, i.name), badge(i.state), badge(i.severity, `severity ${i.severity}`),
        h("span", { class: "muted" }, `${entity(i.entity)} · opened ${when(i.opened_at)} · updated ${when(i.updated_at)}`),
        h("code", { class: "id" }, i.id)))))
      : h("p", { class: "muted" }, "No incidents yet."));
}

/** One incident; refreshes itself while an investigation is pending or running. */
export async function incidentView(id) {
  const section = h("section", { class: "incident-detail" });
  await fill(section, id);
  return section;
}

async function fill(section, id) {
  const detail = await api(`/api/v1/incidents/${encodeURIComponent(id)}`);
  const runs = await Promise.all((detail.runs || []).map((run) => api(`/api/v1/runs/${encodeURIComponent(run)}`).then((r) => r.run, () => ({ id: run }))));
  const incident = detail.incident;
  const jobs = detail.jobs || [];
  const busy = jobs.some((j) => j.status === "deferred" || j.status === "pending" || j.status === "running");
  const entries = [];
  for (const stored of detail.events || []) {
    const e = stored.event;
    entries.push({ at: e.observed_at, kind: "alert", node: [h("strong", {}, `Alert ${e.state}`), " ", e.name, " ", badge(e.severity, `severity ${e.severity}`), h("div", { class: "md" }, markdown(e.summary || "")), e.description ? details("Description", h("div", { class: "md" }, markdown(e.description))) : null, details("Event", jsonBlock(stored))] });
  }
  for (const job of jobs) {
    // A deferred job waits for its source's rate or the pending cap; a storm job stands for many incidents.
    const waiting = job.status === "deferred" ? [" ", badge("deferred")] : [];
    const storm = job.storm_incidents ? ` · storm investigation of ${job.storm_incidents} incidents` : "";
    entries.push({ at: job.created_at, kind: "job", node: [h("strong", {}, "Investigation job created"), " ", h("code", {}, job.id), ...waiting, storm] });
    if (job.updated_at !== job.created_at) entries.push({ at: job.updated_at, kind: "job", node: [h("strong", {}, "Investigation job "), badge(job.status), ` after ${job.attempts} attempt(s)`, job.error ? h("div", { class: "error" }, `${job.error_code || "error"}: ${job.error}`) : null] });
    // Deliveries carry no time of their own: they are finished by the job's last change.
    for (const d of job.deliveries || []) {
      entries.push({ at: job.updated_at, kind: "delivery", node: [h("strong", {}, "Notification "), badge(d.status), ` ${d.type} → ${d.receiver}`, d.attempts ? ` · ${d.attempts} attempt(s)` : "", d.http_status ? ` · HTTP ${d.http_status}` : "", d.error ? ` · ${d.error}` : "", d.reason ? ` · filtered: ${d.reason}` : ""] });
    }
  }
  for (const run of runs) {
    entries.push({ at: run.started_at, kind: "run", node: [h("strong", {}, "Run started "), h("a", { href: `/runs/${run.id}` }, run.id), run.source ? ` (${run.source})` : ""] });
    if (run.completed_at) entries.push({ at: run.completed_at, kind: "run", node: [h("strong", {}, "Run finished "), badge(run.status), " ", h("a", { href: `/runs/${run.id}` }, run.id), run.error ? ` · ${run.error_code || ""} ${run.error}` : ""] });
  }
  const order = { alert: 0, job: 1, run: 2, delivery: 3 };
  entries.sort((a, b) => String(a.at).localeCompare(String(b.at)) || order[a.kind] - order[b.kind]);
  const succeeded = jobs.filter((j) => j.result);
  // The last job failed for good: say so first, with whom the host told.
  const last = jobs[jobs.length - 1];
  const failed = last && last.status === "failed"
    ? h("div", { class: "error", id: "not-investigated" }, h("strong", {}, "Not investigated: "), `${last.error_code || "failed"}: ${last.error || ""}`,
      (last.deliveries || []).length ? ` · receivers told: ${last.deliveries.map((d) => `${d.receiver} (${d.status})`).join(", ")}` : " · no receiver was told")
    : null;
  replace(section,
    h("h1", {}, incident.name, " ", badge(incident.state)),
    facts([["Incident", h("code", {}, incident.id)], ["Severity", incident.severity], ["Entity", entity(incident.entity)], ["Source", `${incident.namespace}/${incident.source}`], ["Opened", when(incident.opened_at)], ["Updated", when(incident.updated_at)], ["Resolved", when(incident.resolved_at)], ["Events", String((incident.event_ids || []).length)]]),
    busy ? h("p", { class: "muted", id: "investigating" }, "Investigation in progress… this page refreshes itself.") : null,
    failed,
    succeeded.map((job) => investigation(job.result, job.run_id)),
    h("h2", {}, `Timeline (${entries.length})`),
    h("ol", { class: "timeline", id: "incident-timeline" }, entries.map((e) => h("li", { class: `entry ${e.kind}`, "data-kind": e.kind }, h("span", { class: "time" }, when(e.at)), " ", e.node))));
  if (busy) {
    setTimeout(() => {
      if (section.isConnected) fill(section, id).catch(() => {});
    }, 1500);
  }
}
