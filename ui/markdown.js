// Safe Markdown: builds DOM nodes with createElement/textContent only. Raw HTML is shown
// as text, links keep only http(s) targets, images are never loaded.

import { h, safeUrl } from "./dom.js";

const MAX_DEPTH = 8;

/** Renders Markdown text into a fragment. */
export function markdown(text) {
  const fragment = document.createDocumentFragment();
  renderBlocks(String(text ?? "").replace(/\r\n?/g, "\n").split("\n"), fragment, 0);
  return fragment;
}

const fence = /^\s*(`{3,}|~{3,})\s*([^`]*)$/;
const heading = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
const rule = /^\s*([-*_])(\s*\1){2,}\s*$/;
const bullet = /^\s*[-*+]\s+(.*)$/;
const ordered = /^\s*(\d{1,9})[.)]\s+(.*)$/;
const quote = /^\s*>\s?(.*)$/;
const tableSep = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function renderBlocks(lines, parent, depth) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    let m;
    if ((m = line.match(fence))) {
      // Closed by a fence of the same character at least as long (CommonMark).
      const open = m[1];
      const closes = (l) => { const t = l.trim(); return t.length >= open.length && t === open[0].repeat(t.length); };
      const body = [];
      i++;
      while (i < lines.length && !closes(lines[i])) body.push(lines[i++]);
      i++;
      const lang = m[2].trim().split(/\s+/)[0];
      if (lang === "diff") {
        parent.append(diffBlock(body.join("\n")));
        continue;
      }
      const code = h("code", {}, body.join("\n"));
      if (lang) code.dataset.lang = lang.slice(0, 32);
      parent.append(h("pre", { class: "code" }, code));
    } else if ((m = line.match(heading))) {
      parent.append(inline(h(`h${Math.min(m[1].length + 2, 6)}`), m[2], 0));
      i++;
    } else if (rule.test(line)) {
      parent.append(h("hr"));
      i++;
    } else if (quote.test(line)) {
      const body = [];
      while (i < lines.length && (m = lines[i].match(quote))) { body.push(m[1]); i++; }
      const block = h("blockquote");
      if (depth < MAX_DEPTH) renderBlocks(body, block, depth + 1);
      else block.textContent = body.join("\n");
      parent.append(block);
    } else if (bullet.test(line) || ordered.test(line)) {
      const isOrdered = !bullet.test(line);
      const pattern = isOrdered ? ordered : bullet;
      const list = h(isOrdered ? "ol" : "ul");
      if (isOrdered) {
        const start = Number(line.match(ordered)[1]);
        if (start !== 1) list.setAttribute("start", String(start));
      }
      while (i < lines.length && (m = lines[i].match(pattern))) {
        let item = m[m.length - 1];
        i++;
        // Continuation lines (indented, not a new item) belong to the item.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !bullet.test(lines[i]) && !ordered.test(lines[i])) {
          item += " " + lines[i].trim();
          i++;
        }
        list.append(inline(h("li"), item, 0));
      }
      parent.append(list);
    } else if (line.includes("|") && i + 1 < lines.length && tableSep.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const header = cells(line);
      const align = cells(lines[i + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : ""));
      i += 2;
      const table = h("table", { class: "md" });
      const head = h("tr");
      header.forEach((c, k) => head.append(inline(h("th", { class: align[k] ? `al-${align[k]}` : null }), c, 0)));
      table.append(h("thead", {}, head));
      const tbody = h("tbody");
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const row = h("tr");
        cells(lines[i]).forEach((c, k) => row.append(inline(h("td", { class: align[k] ? `al-${align[k]}` : null }), c, 0)));
        tbody.append(row);
        i++;
      }
      table.append(tbody);
      parent.append(h("div", { class: "scroll" }, table));
    } else {
      const body = [];
      while (i < lines.length && lines[i].trim() && !startsBlock(lines, i)) body.push(lines[i++].trim());
      if (!body.length) body.push(lines[i++].trim());
      parent.append(inline(h("p"), body.join(" "), 0));
    }
  }
}

function startsBlock(lines, i) {
  const line = lines[i];
  return fence.test(line) || heading.test(line) || rule.test(line) || quote.test(line) || bullet.test(line) || ordered.test(line)
    || (line.includes("|") && i + 1 < lines.length && tableSep.test(lines[i + 1]) && lines[i + 1].includes("-"));
}

function cells(row) {
  let text = row.trim();
  if (text.startsWith("|")) text = text.slice(1);
  if (text.endsWith("|") && !text.endsWith("\\|")) text = text.slice(0, -1);
  return text.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

/** Parses `[text](url)` at `at` (pointing at "["); null when it is not one. */
function bracketed(text, at) {
  const close = text.indexOf("](", at);
  if (close < 0) return null;
  const end = text.indexOf(")", close + 2);
  if (end < 0) return null;
  const label = text.slice(at + 1, close);
  if (label.includes("\n")) return null;
  const target = text.slice(close + 2, end).trim().split(/\s+/)[0] || "";
  return { label, target, end: end + 1 };
}

/** Appends inline Markdown of `text` to `node` and returns the node. */
function inline(node, text, depth) {
  let plain = "";
  const flush = () => { if (plain) { node.append(document.createTextNode(plain)); plain = ""; } };
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && i + 1 < text.length && /[\\`*_[\]()#+\-.!|>~]/.test(text[i + 1])) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      const end = text.indexOf("`", i + 1);
      if (end > i) {
        flush();
        node.append(h("code", {}, text.slice(i + 1, end)));
        i = end + 1;
        continue;
      }
    }
    if (c === "!" && text[i + 1] === "[") {
      const image = bracketed(text, i + 1);
      if (image) {
        // Never loaded: the alt text and the address, as text or a plain http(s) link.
        flush();
        const url = safeUrl(image.target);
        const label = `image: ${image.label || "untitled"}`;
        node.append(url ? h("a", { class: "image-link", href: url }, label) : h("span", { class: "image-link" }, `[${label}] (${image.target})`));
        i = image.end;
        continue;
      }
    }
    if (c === "[") {
      const link = bracketed(text, i);
      if (link) {
        flush();
        const url = safeUrl(link.target);
        if (url && depth < MAX_DEPTH) node.append(inline(h("a", { href: url }), link.label, depth + 1));
        else node.append(document.createTextNode(`${link.label} (${link.target})`));
        i = link.end;
        continue;
      }
    }
    if ((c === "*" || c === "_") && depth < MAX_DEPTH) {
      const strong = text[i + 1] === c;
      const marker = strong ? c + c : c;
      const end = text.indexOf(marker, i + marker.length + 1);
      const inner = end > 0 ? text.slice(i + marker.length, end) : "";
      // `_` inside words (snake_case) is not emphasis.
      const wordy = c === "_" && i > 0 && /\w/.test(text[i - 1]);
      if (end > 0 && inner.trim() === inner && inner && !wordy) {
        flush();
        node.append(inline(h(strong ? "strong" : "em"), inner, depth + 1));
        i = end + marker.length;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
  return node;
}

/** A unified diff as text, each line styled by its first character. */
export function diffBlock(diff) {
  return h("pre", { class: "code diff" }, String(diff || "").split("\n").map((line) => {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "ctx";
    return h("span", { class: `line ${kind}` }, line + "\n");
  }));
}
