// Resources: every resource with its conditions and errors; a failing one is marked.

import { api } from "./api.js";
import { badge, details, h, jsonBlock, when } from "./dom.js";

function failing(resource) {
  const ready = (resource.conditions || []).find((c) => c.type === "Ready");
  return (resource.errors || []).length > 0 || resource.inForce !== "current" || !ready || ready.status !== "True";
}

/** The Resources page. */
export async function resourcesView() {
  const body = await api("/api/v1/resources");
  const resources = body.resources || [];
  const bad = resources.filter(failing).length;
  return h("section", {},
    h("h1", {}, `Resources (${resources.length})`),
    h("p", { class: bad ? "error" : "muted", id: "resources-summary" }, `Catalog version ${body.catalog_version} · loaded ${when(body.loaded_at)} · ${bad} failing`),
    h("ul", { class: "resources", id: "resources-list" }, resources.map((r) => {
      const broken = failing(r);
      return h("li", { class: `resource ${broken ? "failing" : "ready"}`, "data-kind": r.kind, "data-name": r.name },
        h("div", { class: "head" }, badge(broken ? "Failing" : "Ready", broken ? "failed" : "ok"), " ", h("strong", {}, `${r.kind} ${r.namespace}/${r.name}`), " ", h("span", { class: "muted" }, `${r.source} · in force: ${r.inForce}`)),
        (r.errors || []).length ? h("ul", { class: "errors" }, r.errors.map((e) => h("li", {}, e))) : null,
        (r.conditions || []).length ? h("div", { class: "scroll" }, h("table", { class: "conditions" },
          h("thead", {}, h("tr", {}, ["type", "status", "reason", "message", "since"].map((c) => h("th", {}, c)))),
          h("tbody", {}, r.conditions.map((c) => h("tr", { class: c.status === "True" ? "" : "bad" }, h("td", {}, c.type), h("td", {}, c.status), h("td", {}, c.reason || ""), h("td", {}, c.message || ""), h("td", {}, when(c.lastTransitionTime)))))))
          : null,
        r.status ? details("Status", jsonBlock(r.status)) : null,
        r.spec ? details("Spec", jsonBlock(r.spec)) : null);
    })),
    (body.problems || []).length ? [h("h2", {}, "Load problems"), h("ul", { class: "errors" }, body.problems.map((p) => h("li", {}, `${p.location}${p.object ? ` (${p.object})` : ""}: ${p.error}`)))] : null);
}
