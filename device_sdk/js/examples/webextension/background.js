// The WebExtension example's background script (a Manifest V3 service worker in Chromium, a background script in
// Firefox): it records URL-bar interactions (the user picked a page from the address bar) into the local store as
// rows of the frecency training example, and checks in on an alarm so the device takes part in training rounds
// (sign votes under secure aggregation with distributed DP). Copy dist/fa-device-sdk.min.js next to this file
// before loading the folder as an unpacked extension (docs/device_sdk_js.md).
import { DeviceClient, DevicePolicy, LocalStore } from "./fa-device-sdk.min.js";

export const SERVER_URL = "http://127.0.0.1:8080";
export const COLLECTION = "urlbar";
export const ALARM = "fa-device-checkin";
const DAY_MS = 86_400_000;
const RECENT_VISITS = 10;
const MAX_CANDIDATES = 10;
const MAX_QUERY = 12;
/** Seconds an extension service worker may wait on one fetch before the browser stops it (Chromium: 30). */
const CHECKIN_WAIT_S = 20;

/** A browser's transition type as a frecency visit type ("link", "typed", "bookmark" or "other"). */
export function visitType(transition) {
  if (transition === "typed" || transition === "generated" || transition === "keyword") return "typed";
  if (transition === "auto_bookmark") return "bookmark";
  if (transition === "link") return "link";
  return "other";
}

/** One candidate page as the frecency function reads it: its newest visits as [age in days, type], its visit count. */
export function pageItem(visits, visitCount, now) {
  const recent = [...visits].sort((a, b) => b.visitTime - a.visitTime).slice(0, RECENT_VISITS);
  return {
    visits: recent.map((v) => [Math.max(0, (now - v.visitTime) / DAY_MS), visitType(v.transition)]),
    visit_count: Math.max(visitCount ?? 0, visits.length),
  };
}

const typedPart = (url) => {
  try {
    return new URL(url).hostname.replace(/^www\./, "");
  } catch {
    return "";
  }
};

/** What the user most likely typed (the selected page's host, at most MAX_QUERY characters) and how many of those
 * characters each candidate keeps matching (a common prefix of its host; the selected page matches them all). */
export function matchChars(urls, selected) {
  const typed = typedPart(urls[selected]).slice(0, MAX_QUERY);
  const queryLength = Math.max(1, typed.length);
  const match = urls.map((u, i) => {
    if (i === selected) return queryLength;
    const host = typedPart(u);
    let n = 0;
    while (n < typed.length && host[n] === typed[n]) n++;
    return Math.max(1, n);
  });
  return { queryLength, match };
}

/** A navigation from the address bar → one frecency row ({items, selected, match_chars, query_length}), built from
 * the browser's history as it stood before this visit; null for other navigations. */
export async function interactionRow(api, details) {
  if (details.frameId !== 0 || !(details.transitionQualifiers ?? []).includes("from_address_bar")) return null;
  const now = details.timeStamp;
  const prefix = typedPart(details.url).slice(0, 3);
  if (!prefix) return null;
  const found = await api.history.search({ text: prefix, startTime: 0, maxResults: MAX_CANDIDATES * 2 });
  const urls = [details.url, ...found.map((h) => h.url).filter((u) => u !== details.url)].slice(0, MAX_CANDIDATES);
  if (urls.length < 2) return null; // nothing to rank against
  const counts = new Map(found.map((h) => [h.url, h.visitCount]));
  const items = await Promise.all(urls.map(async (url) => {
    const visits = (await api.history.getVisits({ url })).filter((v) => v.visitTime < now); // not the visit being made
    return pageItem(visits, counts.get(url), now);
  }));
  const { queryLength, match } = matchChars(urls, 0);
  return { items, selected: 0, match_chars: match, query_length: queryLength };
}

/** Wire the device into the extension: record interactions, check in on the alarm. Listeners are added at once (a
 * service worker must register them in its first turn). `api`: `browser` or `chrome`. */
export function createDevice({ api, store, serverUrl = SERVER_URL, options = {} }) {
  const client = new DeviceClient(serverUrl, store, {
    // the device only joins training rounds on this collection, never more than ε = 2 a day, in cohorts of 20+
    policy: new DevicePolicy({ allowedSources: { [COLLECTION]: ["training"] }, maxEpsilonPerDay: 2, minCohort: 20 }),
    ...options,
    network: { checkinWaitS: CHECKIN_WAIT_S, ...options.network },
  });
  const ready = store.setRetention(COLLECTION, { maxAgeS: 90 * 86_400, maxRows: 500 });
  let running = null;

  async function record(details) {
    const row = await interactionRow(api, details);
    if (row) await store.add(COLLECTION, row);
    return row;
  }

  /** One check-in (and its cohort), never two at once; extension API calls every 20 s keep the worker alive while a
   * phase long-poll is open. */
  function checkIn() {
    running ??= (async () => {
      const keepAlive = setInterval(() => api.runtime.getPlatformInfo(), 20_000);
      try {
        await ready;
        return await client.runOnce();
      } finally {
        clearInterval(keepAlive);
        running = null;
      }
    })();
    return running;
  }

  api.webNavigation.onCommitted.addListener((details) => {
    record(details).catch((e) => console.warn("[fa-device] could not record the interaction:", e));
  });
  api.alarms.onAlarm.addListener((alarm) => {
    if (alarm.name === ALARM) checkIn().catch((e) => console.warn("[fa-device] check-in failed:", e.message));
  });
  api.alarms.create(ALARM, { periodInMinutes: 1 });
  return { client, record, checkIn, ready };
}

const api = globalThis.browser ?? globalThis.chrome;
if (api?.runtime?.id && api.webNavigation) createDevice({ api, store: LocalStore.indexedDB("fa-frecency") });
