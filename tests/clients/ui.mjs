// Drives the Akritas web UI in headless Chromium with playwright-core.
//
//   node ui.mjs <url> <api key> <screenshot dir> <alertmanager token> <alert json>
//     the UI test: chat round trip, Run detail, an alert as an incident, resources,
//     model/alert HTML rendered inert, a phone viewport; exits non-zero on any failure.
//   node ui.mjs --bench <url> <loads>
//     page weight (bytes, gzip) and time to interactive (the app's `akritas-ready` mark).
//
// Needs NODE_PATH pointing at the node_modules holding playwright-core and
// AKRITAS_TEST_CHROMIUM (or /usr/bin/chromium).

import { createRequire } from "node:module";
import { gzipSync } from "node:zlib";
import path from "node:path";

const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"];
const TIMEOUT = 60_000;

function check(condition, message) {
  if (!condition) throw new Error(`check failed: ${message}`);
  console.log(`ok - ${message}`);
}

async function launch() {
  return chromium.launch({ executablePath: process.env.AKRITAS_TEST_CHROMIUM || "/usr/bin/chromium", args: ARGS });
}

/** Watches a page for script errors and CSP violations. */
function watch(page, problems) {
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error" && !/status of 40[14]/.test(message.text())) problems.push(`console error: ${message.text()}`);
  });
}

/** Nothing the model or an alert wrote became markup: no script ran, no element, no javascript: link. */
async function inert(page, where) {
  const facts = await page.evaluate(() => ({
    pwned: typeof window.pwned,
    scripts: [...document.querySelectorAll("script")].map((s) => s.getAttribute("src")),
    images: document.querySelectorAll("img, iframe, object, embed").length,
    hrefs: [...document.querySelectorAll("body [href]")].map((a) => a.getAttribute("href")),
    handlers: [...document.querySelectorAll("*")].flatMap((e) => [...e.attributes].map((a) => a.name)).filter((n) => n.startsWith("on")),
  }));
  check(facts.pwned === "undefined", `${where}: window.pwned is undefined`);
  check(facts.scripts.length === 1 && facts.scripts[0] === "/ui/app.js", `${where}: the only <script> is the app's (${JSON.stringify(facts.scripts)})`);
  check(facts.images === 0, `${where}: no <img>/<iframe> element was created`);
  check(facts.hrefs.every((h) => !/^\s*(javascript|data|vbscript):/i.test(h)), `${where}: no javascript: href`);
  check(facts.handlers.length === 0, `${where}: no inline event handler attribute`);
}

async function enterKey(page, key) {
  await page.fill("#api-key", key);
  await page.click("#save-key");
  await page.waitForFunction(() => /tools/.test(document.querySelector("#host-status").textContent) && !/no key/.test(document.querySelector("#host-status").textContent), null, { timeout: TIMEOUT });
}

async function uiTest([url, key, dir, amToken, alertJson]) {
  const browser = await launch();
  const problems = [];
  let page;
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    context.setDefaultTimeout(TIMEOUT);
    page = await context.newPage();
    watch(page, problems);
    await page.goto(`${url}/`);
    await page.waitForSelector("html[data-ready]");
    await enterKey(page, key);
    const header = await page.textContent("#host-status");
    check(header.includes("tools") && !header.includes("undefined"), `the header shows the model and the tool count (${header})`);

    // Chat round trip.
    await page.fill("#chat-input", "Why is db-7 slow?");
    await page.click("#chat-send");
    await page.waitForSelector(".turn.assistant .run-panel");
    const answer = await page.textContent(".turn.assistant .text");
    check(answer.includes("db-7 is busy"), "the answer is shown");
    check(answer.includes("<script>window.pwned=1</script>"), "the model's <script> is shown as text");
    check(await page.locator(".turn.assistant strong", { hasText: "db-7" }).count() === 1, "Markdown bold is rendered");
    check(await page.locator(".turn.assistant table.md td", { hasText: "listed" }).count() === 1, "Markdown tables are rendered");
    const tools = await page.locator(".run-panel .tool-line").allTextContents();
    check(tools.some((t) => /^mcp\.victoriametrics\.query · ok · \d+ ms · call-1$/.test(t)), `the Run panel lists the tool call (${tools.join(" | ")})`);
    check(await page.locator(".run-panel table.budget tbody tr").count() >= 5, "the Run panel shows the budget table");
    check((await page.textContent(".run-panel")).includes("linux.kernel.logs"), "the Run panel lists the unavailable check");
    const safe = await page.getAttribute(".turn.assistant a[href='https://example.com/runbook']", "rel");
    check(safe === "noopener noreferrer", "http(s) links open with noopener noreferrer");
    await inert(page, "chat");
    await page.screenshot({ path: path.join(dir, "chat.png"), fullPage: true });

    // The renderer itself, on inputs built to escape it.
    const rendered = await page.evaluate(async () => {
      const { markdown } = await import("/ui/markdown.js");
      const hostile = [
        "[x](JaVaScRiPt:alert(1))", "[x]( javascript:alert(1))", "[x](data:text/html,<script>alert(1)</script>)",
        "[x](vbscript:msgbox)", "[x](//evil.example/a)", "![a](https://evil.example/t.png)", "![a](javascript:alert(1))",
        "<a href=\"javascript:alert(1)\">x</a>", "<iframe src=x></iframe>", "<svg onload=alert(1)>", "**<b>bold</b>**",
        "[**[x](javascript:alert(1))**](https://ok.example)", "| a |\n|---|\n| <img src=x onerror=alert(1)> |",
        "```\n<script>alert(1)</script>\n```", "> <script>alert(1)</script>", "- [x](javascript:alert(1))",
        "[a](https://ok.example \"title\")", "`<img src=x>`", "````diff\n+ <img src=x>\n```\n````",
      ];
      const allowed = new Set(["P", "A", "STRONG", "EM", "CODE", "PRE", "SPAN", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD", "DIV", "BLOCKQUOTE", "UL", "OL", "LI", "H3", "H4", "H5", "H6", "HR"]);
      const found = [];
      let links = 0;
      for (const text of hostile) {
        const box = document.createElement("div");
        box.append(markdown(text));
        links += box.querySelectorAll("a[href^='https://ok.example']").length;
        for (const el of box.querySelectorAll("*")) {
          if (!allowed.has(el.tagName)) found.push(`${text} -> <${el.tagName}>`);
          for (const attr of el.attributes) {
            if (attr.name === "href" ? !/^https?:\/\//.test(attr.value) : !["class", "rel", "target", "start", "data-lang"].includes(attr.name)) found.push(`${text} -> ${attr.name}=${attr.value}`);
          }
        }
      }
      return { found, count: hostile.length, links };
    });
    check(rendered.links === 1, `the safe link among them is still a link (${rendered.links})`);
    check(rendered.found.length === 0, `${rendered.count} hostile Markdown inputs make only allowed elements and http(s) links (${rendered.found.join("; ")})`);

    // The Run detail with its raw tool result.
    const runId = await page.textContent(".run-panel .run-link");
    await page.click(".run-panel .run-link");
    await page.waitForSelector("details#call-1");
    check(new URL(page.url()).pathname === `/runs/${runId}`, "the Run link opens the Run detail");
    const protocol = await page.evaluate(() => {
      const label = [...document.querySelectorAll(".run dl.facts dt")].find((dt) => dt.textContent === "Model protocol");
      return label ? [label.nextElementSibling.textContent, label.nextElementSibling.firstElementChild?.title] : null;
    });
    check(protocol && protocol[0] === "json_schema (1 fallback)" && protocol[1] === "plan: tool_call -> json_schema",
      `the Run facts show the model protocol and the plan's fallback (${JSON.stringify(protocol)})`);
    await page.click("details#call-1 > summary");
    const result = await page.textContent("details#call-1");
    check(result.includes("mcp.victoriametrics.query") && result.includes("7.25"), "the Run detail shows the raw tool result");
    await page.fill("#follow-up-input", "And now?");
    await page.click("#follow-up-send");
    await page.waitForSelector("#follow-up-answer .run-panel");
    check((await page.textContent("#follow-up-answer")).includes("db-7 is busy"), "a follow-up is answered on the Run page");
    await inert(page, "run detail");
    await page.screenshot({ path: path.join(dir, "run.png"), fullPage: true });

    // An alert through the real Alertmanager webhook becomes an incident with its timeline.
    const posted = await fetch(`${url}/api/v1/alerts/default/am/webhook`, {
      method: "POST", headers: { Authorization: `Bearer ${amToken}`, "Content-Type": "application/json" }, body: alertJson,
    });
    check(posted.status === 202, `the alert is accepted (${posted.status})`);
    await page.click("nav a[data-tab=incidents]");
    await page.waitForSelector("#incidents-list a.card");
    await page.click("#incidents-list a.card");
    await page.waitForSelector("#incident-timeline");
    await page.waitForFunction(() => !document.querySelector("#investigating") && document.querySelector("#incident-timeline li.delivery"), null, { timeout: TIMEOUT });
    const kinds = await page.locator("#incident-timeline li").evaluateAll((items) => items.map((i) => i.dataset.kind));
    check(["alert", "job", "run", "delivery"].every((k) => kinds.includes(k)), `the timeline holds alert, job, Run and delivery entries (${kinds.join(",")})`);
    const times = await page.locator("#incident-timeline li").evaluateAll((items) => items.length);
    check(times >= 5, "the timeline is one list of every entry");
    check((await page.textContent(".investigation")).includes("confirmed"), "the InvestigationResult is shown");
    check((await page.textContent(".investigation")).includes("Evidence verified1/1 (100%)"), "the evidence coverage the host recorded is shown");
    await inert(page, "incident");
    await page.screenshot({ path: path.join(dir, "incident.png"), fullPage: true });
    const evidence = await page.getAttribute(".investigation a.evidence-link", "href");
    check(/^\/runs\/[^/#]+#call-1$/.test(evidence), `evidence links to its tool call (${evidence})`);
    await page.click(".investigation a.evidence-link");
    await page.waitForSelector("details#call-1[open].target");
    check(true, "the evidence link opens the tool call in its Run");

    // Resources: the failing one is marked as failing in text and class.
    await page.click("nav a[data-tab=resources]");
    await page.waitForSelector("#resources-list");
    const broken = page.locator("li.resource[data-name='broken-tools']");
    check(await broken.count() === 1, "the broken McpAdapter is listed");
    check((await broken.getAttribute("class")).includes("failing") && (await broken.textContent()).includes("Failing"), "the broken McpAdapter is marked failing");
    check((await page.getAttribute("li.resource[data-kind='Skill'][data-name='postgresql']", "class")).includes("ready"), "a healthy resource is marked ready");
    await page.screenshot({ path: path.join(dir, "resources.png"), fullPage: true });

    // Schedules: the next tick, "Run now", then the Run's result on the page.
    await page.click("nav a[data-tab=schedules]");
    await page.waitForSelector("#schedules-list");
    const schedule = page.locator("li.schedule[data-name='db-load']");
    check(await schedule.count() === 1, "the RunSchedule is listed");
    check(/next tick /.test(await schedule.locator(".times").textContent()) && !/next tick —/.test(await schedule.locator(".times").textContent()), "its next tick is shown");
    check((await schedule.textContent()).includes("No Run has finished yet."), "no result before the first Run");
    await schedule.locator("button.run-now").click();
    await page.waitForFunction(() => /Started: the Run for/.test(document.querySelector("li.schedule[data-name='db-load'] .run-now-message").textContent));
    check(true, "Run now starts a Run");
    let finished = false;
    for (let i = 0; i < 60 && !finished; i++) {
      await page.waitForTimeout(500);
      await page.click("nav a[data-tab=schedules]");
      await page.waitForSelector("li.schedule[data-name='db-load']");
      finished = !(await page.locator("li.schedule[data-name='db-load']").textContent()).includes("No Run has finished yet.");
    }
    check(finished, "the Run's result shows on the page");
    const shown = await page.locator("li.schedule[data-name='db-load'] .result").textContent();
    check(/Succeeded/.test(shown) && /evidence 1\/1 verified/.test(shown), `the result and its verified evidence are shown (${shown})`);
    check(await page.locator("li.schedule[data-name='db-load'] .result a[href^='/runs/run_']").count() === 1, "the result links to its Run");
    await inert(page, "schedules");
    await page.screenshot({ path: path.join(dir, "schedules.png"), fullPage: true });

    // Change: preview the diff, refuse the confirmation once, then apply once.
    await page.click("nav a[data-tab=change]");
    await page.waitForSelector("#change-workspace");
    await page.fill("#change-request", "Add orders-v2 (10.20.4.15) on port 8443 to the production pillar");
    await page.fill("#change-files", "pillar/prod/nftables.sls");
    await page.click("#change-preview");
    await page.waitForSelector("#change-result .diff");
    check(await page.locator("#change-result .diff").count() === 1, "the diff is shown once");
    const added = await page.locator("#change-result .diff .line.add").allTextContents();
    check(added.some((l) => l.includes("orders-v2")), "the preview shows the diff with added lines marked");
    check((await page.textContent("#change-result")).includes("<script>window.pwned=5</script>"), "the proposal's analysis is shown as text");
    let asked = "";
    page.once("dialog", (dialog) => { asked = dialog.message(); dialog.dismiss(); });
    await page.click("#change-apply");
    check(asked.includes("Apply this diff") && !(await page.isDisabled("#change-apply")), "apply asks for confirmation; refusing it writes nothing");
    page.once("dialog", (dialog) => dialog.accept());
    await page.click("#change-apply");
    await page.waitForFunction(() => /Applied/.test(document.querySelector("#change-state").textContent));
    check(await page.isDisabled("#change-apply"), "the apply button stays disabled after the apply");
    await inert(page, "change");
    await page.screenshot({ path: path.join(dir, "change.png"), fullPage: true });

    // A phone.
    const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
    phone.setDefaultTimeout(TIMEOUT);
    const mobile = await phone.newPage();
    watch(mobile, problems);
    await mobile.goto(`${url}/chat`);
    await mobile.waitForSelector("html[data-ready]");
    await enterKey(mobile, key);
    await mobile.fill("#chat-input", "Why is db-7 slow?");
    await mobile.click("#chat-send");
    await mobile.waitForSelector(".turn.assistant .run-panel");
    const width = await mobile.evaluate(() => document.documentElement.scrollWidth);
    check(width <= 390, `no horizontal scroll on a phone (${width}px)`);
    await mobile.screenshot({ path: path.join(dir, "phone-chat.png"), fullPage: true });
    await mobile.goto(`${url}/incidents`);
    await mobile.waitForSelector("#incidents-list a.card");
    await mobile.click("#incidents-list a.card");
    await mobile.waitForSelector("#incident-timeline");
    const incidentWidth = await mobile.evaluate(() => document.documentElement.scrollWidth);
    check(incidentWidth <= 390, `no horizontal scroll on a phone's incident page (${incidentWidth}px)`);
    await mobile.screenshot({ path: path.join(dir, "phone-incident.png"), fullPage: true });
    check(problems.length === 0, `no script error or CSP violation (${problems.join("; ")})`);
  } catch (error) {
    // What the page showed when it failed, for the test's output.
    if (page) {
      console.error(`page at failure: ${page.url()}\n${await page.textContent("main").catch(() => "?")}`);
      await page.screenshot({ path: path.join(dir, "failure.png"), fullPage: true }).catch(() => {});
    }
    throw error;
  } finally {
    await browser.close();
  }
}

async function bench([url, loads]) {
  const names = ["index.html", "app.css", "app.js", "api.js", "dom.js", "markdown.js", "chat.js", "runs.js", "incidents.js", "resources.js", "schedules.js", "change.js"];
  let bytes = 0;
  let gzip = 0;
  for (const name of names) {
    const body = Buffer.from(await (await fetch(name === "index.html" ? `${url}/` : `${url}/ui/${name}`)).arrayBuffer());
    bytes += body.length;
    gzip += gzipSync(body, { level: 9 }).length;
  }
  console.log(`page weight: ${names.length} files, ${bytes} bytes, ${gzip} bytes gzip -9`);
  const browser = await launch();
  try {
    const times = [];
    for (let i = 0; i < Number(loads); i++) {
      // A fresh context each time: a cold cache, as a first visit.
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${url}/`);
      await page.waitForSelector("html[data-ready]");
      times.push(await page.evaluate(() => performance.getEntriesByName("akritas-ready")[0].startTime));
      await context.close();
    }
    times.sort((a, b) => a - b);
    const q = (p) => times[Math.min(times.length - 1, Math.round((times.length - 1) * p))].toFixed(1);
    console.log(`time to interactive over ${times.length} cold loads: median ${q(0.5)} ms, p90 ${q(0.9)} ms, min ${q(0)} ms, max ${q(1)} ms`);
  } finally {
    await browser.close();
  }
}

const [mode, ...rest] = process.argv.slice(2);
(mode === "--bench" ? bench(rest) : uiTest([mode, ...rest])).catch((error) => {
  console.error(`not ok - ${error.stack || error}`);
  process.exit(1);
});
