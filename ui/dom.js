// DOM helpers: every piece of text goes in through textContent, never as HTML.

/** Creates an element: h("a", {class: "x", href: "/runs"}, "text", child, ...). */
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "href") setHref(node, value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  append(node, children);
  return node;
}

/** Appends children (nodes, strings, numbers, arrays; null skipped). */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Only same-origin paths and http(s) URLs become hrefs. */
export function setHref(node, value) {
  const href = String(value);
  if (href.startsWith("/") && !href.startsWith("//")) {
    node.setAttribute("href", href);
    return;
  }
  const url = safeUrl(href);
  if (url) {
    node.setAttribute("href", url);
    node.setAttribute("rel", "noopener noreferrer");
    node.setAttribute("target", "_blank");
  }
}

/** The URL if it is absolute http or https, else null. */
export function safeUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch {
    return null;
  }
}

/** Replaces the content of a node. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** Pretty JSON in a <pre>. */
export function jsonBlock(value) {
  return h("pre", { class: "code" }, JSON.stringify(value, null, 2));
}

/** A collapsible block. */
export function details(summary, ...children) {
  return h("details", {}, h("summary", {}, summary), ...children);
}

/** A local time for an RFC 3339 string ("" when absent). */
export function when(time) {
  if (!time) return "";
  const date = new Date(time);
  return Number.isNaN(date.getTime()) ? String(time) : date.toLocaleString();
}

/** A label: value grid. */
export function facts(pairs) {
  const dl = h("dl", { class: "facts" });
  for (const [label, value] of pairs) {
    if (value === undefined || value === null || value === "") continue;
    dl.append(h("dt", {}, label), h("dd", {}, value));
  }
  return dl;
}

/** A status badge whose text says the state (colour only repeats it). */
export function badge(text, kind) {
  return h("span", { class: `badge ${kind || String(text).toLowerCase()}` }, String(text));
}

/** A visible error, with a hint when the key is the problem. */
export function errorBox(error) {
  const box = h("div", { class: "error", role: "alert" }, error.message || String(error));
  if (error.status === 401) box.append(h("p", {}, "Enter a valid API key at the top of the page."));
  return box;
}
