// The API client: every request carries the key the user entered.

const KEY = "akritas.apiKey";

/** The entered key: this tab's (sessionStorage) or a remembered one (localStorage). */
export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
}

/** Stores the key for this tab, and on this device when `remember` is set. */
export function setApiKey(key, remember) {
  sessionStorage.setItem(KEY, key);
  if (remember) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

/** Forgets the key everywhere. */
export function forgetApiKey() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

/** Whether the key is remembered on this device. */
export function remembered() {
  return Boolean(localStorage.getItem(KEY));
}

/** An API failure with the server's message and details. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = body && body.error;
    super(error && error.message ? error.message : `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

/** Calls the API; resolves to the JSON body or throws ApiError. */
export async function api(path, options = {}) {
  const headers = { Accept: "application/json" };
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let body;
  if (options.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(options.body);
  }
  const response = await fetch(path, { method: options.method || (body ? "POST" : "GET"), headers, body, signal: options.signal });
  let json = null;
  try {
    json = await response.json();
  } catch {
    json = null;
  }
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}
