/** The injected clock (src/clock.ts): the client's back-off, request deadlines, pauses and timestamps, the store's and
 * the ledger's times all read the store's clock. Driven here by a ManualClock, advanced when the client waits — no test
 * sleeps. Also the grouped options (`new DeviceClient(url, store, { network, callbacks, hooks, … })`) are checked as
 * the Python SDK checks its ClientOptions. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { DeviceClient } from "../src/client.js";
import { ManualClock, SYSTEM_CLOCK, deadline } from "../src/clock.js";
import { HDR_TIMESTAMP } from "../src/envelope.js";
import { LocalStore, MemoryBackend } from "../src/store.js";
import { fakeServer, idle } from "./fakeServer.js";

test("back-off after errors waits on the store's clock: full jitter under base·2^failures, capped", async () => {
  const clock = new ManualClock();
  let calls = 0;
  const down = (async () => {
    calls++;
    throw new TypeError("fetch failed");  // a network failure: sent once more, then raised
  }) as typeof fetch;
  let failed: () => void = () => undefined;
  const client = new DeviceClient("http://device.test", new LocalStore(new MemoryBackend(), clock), {
    network: { fetch: down, backoffBaseS: 1, backoffCapS: 8 }, log: () => {},
    callbacks: { onError: () => failed() },
  });
  client.start();
  try {
    for (const bound of [2, 4, 8, 8, 8]) {
      await new Promise<void>((resolve) => (failed = resolve));  // the back-off sleep begins right after onError
      assert.equal(clock.waiting.length, 1, "one wait: the back-off (the failed request's deadline was released)");
      const [wait] = clock.waiting;
      assert.ok(wait >= 0 && wait <= bound, `waits ${wait} s, at most ${bound} s`);
      const before = calls;
      clock.advance(wait);
      assert.equal(calls, before, "nothing is sent until the clock reaches the end of the wait");
    }
    assert.equal(calls, 2 * 5 + 0, "each failure: the request and its one resend");
  } finally {
    await client.stop();
  }
});

test("a request's deadline is the store's clock: it is aborted once the clock passes requestTimeoutS", async () => {
  const clock = new ManualClock();
  const hanging = ((_: RequestInfo | URL, init?: RequestInit) =>
    new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))))) as typeof fetch;
  const client = new DeviceClient("http://device.test", new LocalStore(new MemoryBackend(), clock), {
    network: { fetch: hanging, requestTimeoutS: 30 }, log: () => {},
  });
  const run = client.runOnce();
  await clock.sleeping();
  assert.deepEqual(clock.waiting, [30]);
  let settled = false;
  void run.catch(() => (settled = true));
  clock.advance(29);
  await new Promise((r) => setImmediate(r));
  assert.equal(settled, false, "still waiting one second before its deadline");
  clock.advance(1);
  await assert.rejects(run, (exc: unknown) => (exc as Error).name === "AbortError");
  assert.deepEqual(clock.waiting, []);
});

test("timestamps come from the clock: the signed request time, the registration, a paused device's poll", async () => {
  const clock = new ManualClock(1_800_000_000.75);
  const server = fakeServer(() => idle(5));
  const store = new LocalStore(new MemoryBackend(), clock);
  const client = new DeviceClient("http://device.test", store, { network: { fetch: server.fetch }, log: () => {}, ineligiblePollS: 42 });
  assert.equal((await client.runOnce()).status, "idle");
  assert.deepEqual(server.seen.map((r) => r.headers.get(HDR_TIMESTAMP)), ["1800000000", "1800000000"]);
  assert.equal(await store.getMeta("registered_at:http://device.test"), "1800000000.75");
  clock.advance(100);
  await store.add("words", "w");
  assert.deepEqual((await store.rows("words")).length, 1);
  await store.setRetention("words", { maxAgeS: 50 });
  clock.advance(51);
  assert.deepEqual(await store.rows("words"), [], "retention ages rows by the store's clock");
  await store.optOutAll();
  const paused = await client.runOnce();
  assert.deepEqual([paused.status, paused.retryAfter], ["paused", 42]);
});

test("deadline(): aborts on the clock, on the caller's signal, and never after clear()", async () => {
  const clock = new ManualClock();
  const a = deadline(clock, 5);
  clock.advance(5);
  await new Promise((r) => setImmediate(r));
  assert.equal(a.signal.aborted, true);
  const stop = new AbortController();
  const b = deadline(clock, 5, stop.signal);
  stop.abort();
  assert.equal(b.signal.aborted, true);
  b.clear();
  const c = deadline(clock, 5);
  c.clear();
  clock.advance(10);
  await new Promise((r) => setImmediate(r));
  assert.equal(c.signal.aborted, false);
  assert.deepEqual(clock.waiting, []);
  assert.ok(Math.abs(SYSTEM_CLOCK.now() - Date.now() / 1000) < 1);
});

test("options: grouped as the Python SDK's ClientOptions; a flat or unknown option and a wrong type are refused by name", () => {
  const store = new LocalStore();
  const make = (o: unknown) => () => new DeviceClient("http://device.test", store, o as never);
  assert.throws(make({ checkinWaitS: 5 }), /^TypeError: options\.checkinWaitS: unknown option \(it is options\.network\.checkinWaitS\)$/);
  assert.throws(make({ fetch: globalThis.fetch }), /options\.fetch: unknown option \(it is options\.network\.fetch\)/);
  assert.throws(make({ onRefusal: () => {} }), /options\.onRefusal: unknown option \(it is options\.callbacks\.onRefusal\)/);
  assert.throws(make({ dropout: () => null }), /options\.dropout: unknown option \(it is options\.hooks\.dropout\)/);
  assert.throws(make({ network: { checkinWait: 5 } }), /options\.network\.checkinWait: unknown option/);
  assert.throws(make({ network: { requestTimeoutS: "5" } }), /options\.network\.requestTimeoutS: must be a number of seconds/);
  assert.throws(make({ callbacks: { onError: 1 } }), /options\.callbacks\.onError: must be a function/);
  assert.throws(make({ hooks: 3 }), /options\.hooks: must be an object/);
  assert.throws(make({ keysWithCheckin: "no" }), /options\.keysWithCheckin: must be true or false/);
  assert.doesNotThrow(make({ network: { checkinWaitS: 5, backoffBaseS: 0.1 }, callbacks: { onRefusal: () => {} }, hooks: {}, ineligiblePollS: 1 }));
});
