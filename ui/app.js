// Akritas web UI: header (API key, host status, tools), navigation and the client-side routes.

import { api, apiKey, setApiKey, forgetApiKey, remembered } from "./api.js";
import { errorBox, h, replace } from "./dom.js";
import { chatView } from "./chat.js";
import { runsView, runView } from "./runs.js";
import { incidentsView, incidentView } from "./incidents.js";
import { resourcesView } from "./resources.js";
import { changeView } from "./change.js";
import { schedulesView } from "./schedules.js";

const routes = [
  [/^\/(?:chat)?$/, "chat", () => chatView()],
  [/^\/runs$/, "runs", () => runsView()],
  [/^\/runs\/([^/]+)$/, "runs", (id) => runView(id)],
  [/^\/incidents$/, "incidents", () => incidentsView()],
  [/^\/incidents\/([^/]+)$/, "incidents", (id) => incidentView(id)],
  [/^\/resources$/, "resources", () => resourcesView()],
  [/^\/schedules$/, "schedules", () => schedulesView()],
  [/^\/change$/, "change", () => changeView()],
];

const main = document.getElementById("main");
let generation = 0;
const current = (token) => token === generation;

/** Navigates within the page (history API). */
function navigate(path) {
  if (path !== location.pathname + location.hash) history.pushState(null, "", path);
  render();
}

async function render() {
  const token = ++generation;
  const path = location.pathname;
  const match = routes.map(([re, tab, view]) => [path.match(re), tab, view]).find(([m]) => m);
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("active", Boolean(match) && link.dataset.tab === match[1]);
    if (match && link.dataset.tab === match[1]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!match) {
    replace(main, h("p", { class: "error" }, `No page at ${path}.`));
    return;
  }
  const args = match[0].slice(1).map((part) => part && decodeURIComponent(part));
  try {
    const view = await match[2](...args);
    if (!current(token)) return;
    replace(main, view);
    if (location.hash) {
      const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) {
        if (target.tagName === "DETAILS") target.open = true;
        target.classList.add("target");
        target.scrollIntoView();
      }
    }
  } catch (error) {
    if (current(token)) replace(main, errorBox(error));
  }
  if (!document.documentElement.dataset.ready) {
    document.documentElement.dataset.ready = "1";
    performance.mark("akritas-ready");
  }
}

function header() {
  const input = h("input", { type: "password", id: "api-key", placeholder: "API key", autocomplete: "off", "aria-label": "API key", value: apiKey() });
  const remember = h("input", { type: "checkbox", id: "remember-key", checked: remembered() });
  const status = h("button", { type: "button", id: "host-status", class: "status", "aria-haspopup": "dialog" }, "host …");
  const dialog = h("dialog", { id: "tools-dialog" });
  const save = (event) => {
    event.preventDefault();
    const key = input.value.trim();
    if (key) setApiKey(key, remember.checked);
    else forgetApiKey();
    refreshStatus(status);
    render();
  };
  const form = h("form", { class: "key", onsubmit: save },
    input,
    h("label", { class: "check" }, remember, "remember"),
    h("button", { type: "submit", id: "save-key" }, "Use key"),
    h("button", { type: "button", class: "secondary", onclick: () => { forgetApiKey(); input.value = ""; remember.checked = false; refreshStatus(status); render(); } }, "Forget"));
  status.addEventListener("click", () => showTools(dialog));
  const nav = h("nav", {},
    ...[["/chat", "chat", "Chat"], ["/runs", "runs", "Runs"], ["/incidents", "incidents", "Incidents"], ["/resources", "resources", "Resources"], ["/schedules", "schedules", "Schedules"], ["/change", "change", "Change"]]
      .map(([href, tab, label]) => h("a", { href, "data-tab": tab }, label)));
  replace(document.getElementById("header"), h("div", { class: "bar" }, h("strong", { class: "brand" }, "Akritas"), status, form), nav, dialog);
  refreshStatus(status);
}

async function refreshStatus(button) {
  try {
    // With the key, /health names the model; without one it says only the status.
    const health = await api("/health");
    let tools = "?";
    try {
      tools = String((await api("/api/v1/tools")).tools.length);
    } catch {
      tools = "no key";
    }
    button.textContent = `${health.model || "host"} · ${tools} tools · ${health.status}`;
    button.classList.toggle("degraded", health.status !== "ok");
  } catch {
    button.textContent = "host unreachable";
  }
}

async function showTools(dialog) {
  replace(dialog, h("h2", {}, "Tools"), h("p", {}, "Loading…"));
  dialog.showModal();
  const close = h("button", { type: "button", onclick: () => dialog.close() }, "Close");
  try {
    const { tools } = await api("/api/v1/tools");
    const list = h("ul", { class: "tools" }, tools.map((t) => h("li", {}, h("code", {}, t.name), " · ", t.permission, h("div", { class: "muted" }, t.description))));
    replace(dialog, h("h2", {}, `Tools (${tools.length})`), list, close);
  } catch (error) {
    replace(dialog, h("h2", {}, "Tools"), errorBox(error), close);
  }
}

document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[href]");
  if (!link || link.target === "_blank" || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  const href = link.getAttribute("href");
  if (!href.startsWith("/") || href.startsWith("//")) return;
  event.preventDefault();
  navigate(href);
});
window.addEventListener("popstate", render);

header();
render();
