// Change: pick a Workspace, describe the change, preview the diff (nothing is written),
// then apply it once after a confirmation.

import { api } from "./api.js";
import { details, errorBox, h, jsonBlock, replace } from "./dom.js";
import { diffBlock, markdown } from "./markdown.js";

/** The Change page. */
export async function changeView() {
  const { workspaces } = await api("/api/v1/workspaces");
  const select = h("select", { id: "change-workspace", "aria-label": "Workspace" },
    workspaces.map((w) => h("option", { value: JSON.stringify([w.namespace, w.name]) }, `${w.namespace}/${w.name}${w.writable === false ? " (read-only)" : ""}`)));
  const request = h("textarea", { id: "change-request", rows: 4, maxlength: 16000, "aria-label": "Requested change", placeholder: "Describe the change, e.g. allow TCP 8443 from the monitoring network" });
  const files = h("input", { id: "change-files", type: "text", placeholder: "optional: files to consider, comma separated", "aria-label": "Files" });
  const preview = h("button", { type: "submit", id: "change-preview" }, "Preview");
  const out = h("div", { id: "change-result", "aria-live": "polite" });
  const submit = async (event) => {
    event.preventDefault();
    const [namespace, workspace] = JSON.parse(select.value || "[null,null]");
    if (!workspace) return;
    preview.disabled = true;
    replace(out, h("p", { class: "muted" }, "Preparing the change… nothing is written."));
    try {
      const body = { workspace, namespace, request: request.value, files: files.value.split(",").map((f) => f.trim()).filter(Boolean) };
      replace(out, result(await api("/api/v1/change/simulations", { body })));
    } catch (error) {
      replace(out, errorBox(error), diagnostics(error));
    } finally {
      preview.disabled = false;
    }
  };
  return h("section", {}, h("h1", {}, "Prepare a change"),
    workspaces.length ? h("form", { class: "composer", onsubmit: submit }, h("label", {}, "Workspace ", select), request, files, h("div", { class: "row" }, preview))
      : h("p", { class: "muted" }, "No Workspace is available to this key."),
    out);
}

function diagnostics(error) {
  const attempts = error.body && error.body.error && error.body.error.details;
  if (!Array.isArray(attempts)) return null;
  return attempts.map((attempt, index) => h("div", { class: "card diagnostics" }, h("strong", {}, `Attempt ${index + 1}`), details("Full diagnostics", jsonBlock(attempt))));
}

function result(outcome) {
  const approval = outcome.approval;
  const state = h("p", { id: "change-state", class: "muted" });
  const apply = h("button", { type: "button", id: "change-apply", class: "danger", disabled: !approval }, "Apply this diff");
  if (!approval) state.textContent = `Not applicable: ${outcome.result && outcome.result.approval_withheld ? outcome.result.approval_withheld : "no approval was issued"}`;
  else state.textContent = `Approval ${approval.id} pending until ${approval.expires_at}.`;
  apply.addEventListener("click", async () => {
    if (!window.confirm(`Apply this diff to ${outcome.namespace}/${outcome.workspace}? This writes the files once.`)) return;
    apply.disabled = true;
    try {
      const applied = await api(`/api/v1/change/simulations/${encodeURIComponent(approval.id)}/apply`, { body: { confirm: true } });
      replace(state, `Applied (${applied.status}): ${applied.changed_files.join(", ")}`, applied.commit ? ` · commit ${applied.commit}` : "", applied.branch ? ` · branch ${applied.branch}` : "", " · Run ", h("a", { href: `/runs/${applied.run_id}` }, applied.run_id));
    } catch (error) {
      replace(state, errorBox(error), "New preview required.");
    }
  });
  // The host's answer carries the diff in a `diff` fence, which the renderer styles;
  // an answer without one gets the diff from the structured result.
  const answer = h("div", { class: "md" }, markdown(outcome.answer || ""));
  const diff = outcome.result && outcome.result.diff;
  return h("div", { class: "change-outcome" },
    h("p", {}, "Run ", h("a", { href: `/runs/${outcome.run_id}` }, outcome.run_id), ` · ${outcome.namespace}/${outcome.workspace}`),
    answer,
    diff && !answer.querySelector(".diff") ? [h("h2", {}, "Diff"), diffBlock(diff)] : null,
    state, apply);
}
