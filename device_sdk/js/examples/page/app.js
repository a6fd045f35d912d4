// The page example: a web page as a device. Serve device_sdk/js over HTTP (after `npm run bundle`), open
// examples/page/index.html, and start the server with FA_DEVICE_CORS_ORIGINS set to the page's origin.
// The functions are exported so they run in Node too (test/examples.test.ts); the DOM wiring runs only in a page.
import { DeviceClient, DevicePolicy, LocalStore } from "../../dist/fa-device-sdk.min.js";

/** The device: its data and ledger in `store` (IndexedDB in the page), its limits in the policy. */
export function openDevice(serverUrl, store, options = {}) {
  const policy = new DevicePolicy({ maxEpsilonPerDay: 4, minSurvivors: 10, ...options.policy });
  return new DeviceClient(serverUrl, store, { ...options, policy, network: { checkinWaitS: 10, ...options.network } });
}

/** The server the page talks to unless the user types another: `?server=URL`, else the page's own origin
 * (the server or a proxy in front of it serves the page), else (a page opened from a file) the local default. */
export function defaultServer(location) {
  const asked = new URLSearchParams(location.search ?? "").get("server");
  if (asked) return asked;
  return /^https?:$/.test(location.protocol) ? location.origin : "http://127.0.0.1:8080";
}

/** One line for an `Outcome` of `runOnce()`. */
export function describe(outcome) {
  const parts = [outcome.status];
  if (outcome.cohortId) parts.push(`cohort ${outcome.cohortId.slice(0, 8)}`);
  if (outcome.contributed !== null) parts.push(outcome.contributed ? "contributed" : "not counted");
  if (outcome.reason) parts.push(outcome.reason);
  if (outcome.detail) parts.push(outcome.detail);
  if (outcome.status === "idle" || outcome.status === "paused") parts.push(`next check-in in ${outcome.retryAfter.toFixed(0)} s`);
  return parts.join(" · ");
}

/** The transparency log as table cells, newest first. */
export function logRows(records) {
  return records.map((r) => [
    new Date(r.accepted_at * 1000).toISOString().replace("T", " ").slice(0, 19),
    r.query_id.slice(0, 8),
    String(r.round),
    r.kind,
    r.source,
    r.status + (r.contributed === null ? "" : r.contributed ? " (counted)" : " (not counted)"),
    r.mechanism === "none" ? "none" : `${r.mechanism} σ=${Number(r.noise_std).toPrecision(3)}`,
    r.epsilon === null ? "-" : String(r.epsilon),
    String(r.cohort_size),
  ]);
}

/** Add a value the user typed; numbers stay numbers (feature_stats), the rest are strings (histogram buckets). */
export async function addValue(store, collection, text) {
  const value = text.trim() !== "" && Number.isFinite(Number(text)) ? Number(text) : text;
  await store.add(collection, value);
  return store.count(collection);
}

function mount(doc) {
  const $ = (id) => doc.getElementById(id);
  const store = LocalStore.indexedDB("fa-page-example");
  let client = null;
  const status = (text) => ($("status").textContent = text);
  const refresh = async () => {
    const body = $("log");
    body.replaceChildren(...logRows(client ? await client.transparencyLog() : []).map((cells) => {
      const tr = doc.createElement("tr");
      for (const c of cells) tr.appendChild(Object.assign(doc.createElement("td"), { textContent: c }));
      return tr;
    }));
    $("count").textContent = `${await store.count($("collection").value)} rows`;
  };
  const connect = async () => {
    await client?.stop();
    try {
      client = openDevice($("server").value, store, {
        onContribution: () => refresh(),
        onRefusal: (r) => status(`refused ${r.reason}: ${r.detail}`),
        onError: (e) => status(`error: ${e.message} (retrying)`),
      });
      status(`device ${(await client.identity()).deviceId.slice(0, 12)}… → ${client.server}`);
    } catch (e) {
      client = null;
      status(e.message);
    }
    await refresh();
  };
  if (!$("server").value) $("server").value = defaultServer(doc.location);
  $("connect").onclick = connect;
  $("add").onclick = async () => {
    await addValue(store, $("collection").value, $("value").value);
    await refresh();
  };
  $("once").onclick = async () => {
    if (!client || client.isRunning) return status(client ? "running in the background: stop() first" : "not connected");
    status("checking in…");
    try {
      status(describe(await client.runOnce()));
    } catch (e) {
      status(`error: ${e.message}`);
    }
    await refresh();
  };
  $("start").onclick = () => {
    if (client && !client.isRunning) client.start();
    status(client ? "running in the background" : "not connected");
  };
  $("stop").onclick = async () => {
    await client?.stop();
    status("stopped");
  };
  $("optout").onclick = async () => {
    status(`opted out: ${await store.optOut($("collection").value)} rows deleted`);
    await refresh();
  };
  connect();
}

if (typeof document !== "undefined") mount(document);
