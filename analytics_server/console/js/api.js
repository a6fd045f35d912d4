// The analyst API from the browser: the bearer token lives in this tab's sessionStorage only (never a cookie,
// never localStorage), and every request carries it in the Authorization header.

const KEY = "fa.console.session";

export class ApiError extends Error {
  constructor(status, message, detail) {
    super(message);
    this.status = status;
    this.detail = detail || [];
  }
}

export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY) || "null");
  } catch {
    return null;
  }
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

export async function signIn(token) {
  const who = await request("GET", "/v1/whoami", undefined, token.trim());
  sessionStorage.setItem(KEY, JSON.stringify({ token: token.trim(), role: who.role, tokenId: who.token_id }));
  return who;
}

async function request(method, path, body, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (err) {
    throw new ApiError(0, `cannot reach the server: ${err.message}`);
  }
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!res.ok) {
    const message = (data && data.error) || `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, message, data && data.detail);
  }
  return data;
}

/** JSON from the API with the session's token; a 401 ends the session. */
export async function api(method, path, body) {
  const s = session();
  if (!s) throw new ApiError(401, "not signed in");
  try {
    return await request(method, path, body, s.token);
  } catch (err) {
    if (err.status === 401) {
      signOut();
      location.hash = "#/signin";
    }
    throw err;
  }
}

/** JSON from a public route (the transparency log): no token is sent. */
export async function publicApi(path) {
  return request("GET", path, undefined, null);
}

/**
 * Server-sent events over fetch (EventSource cannot send an Authorization header). Calls onEvent({event, data, id})
 * for each event until the stream ends or `signal` aborts; resolves when it ends.
 */
export async function streamEvents(path, onEvent, signal) {
  const s = session();
  if (!s) throw new ApiError(401, "not signed in");
  const res = await fetch(path, { headers: { Authorization: `Bearer ${s.token}`, Accept: "text/event-stream" }, signal });
  if (!res.ok || !res.body) throw new ApiError(res.status, `event stream: ${res.status}`);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const ev = { event: "message", data: "", id: null };
      for (const line of block.split("\n")) {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") ev.event = val;
        else if (field === "data") ev.data += (ev.data ? "\n" : "") + val;
        else if (field === "id") ev.id = val;
      }
      onEvent(ev);
    }
  }
}
