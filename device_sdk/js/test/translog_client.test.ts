/** The device and the public transparency log (docs/transparency.md, "What a device does"), against fake servers
 * that keep a log (fakeLog.ts): the device checks the `log` proof of each assignment right after it computes the task
 * digest and before it reads any data, stores the head, says its size in its next check-in (`log_size`) and keeps the
 * head and entry with the contribution; a proof that does not check — another digest, an inconsistent or rewritten
 * log, another key — or none while `requireLog` is refused with `not_logged`, reported and kept in its transparency
 * log. The log key is pinned on first use (`GET /v1/log/key`, once) unless the policy pins it. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex } from "../src/bytes.js";
import { DeviceClient, LOG_HEAD_META, LOG_KEYS_META, Outcome } from "../src/client.js";
import { DevicePolicy, DevicePolicyOptions } from "../src/policy.js";
import { SecAggConfig } from "../src/secagg/config.js";
import { LocalStore } from "../src/store.js";
import { taskDigest } from "../src/taskDigest.js";
import { FakeLog } from "./fakeLog.js";
import { FakeCohort, Seen, bodyJson, fakeServer, json } from "./fakeServer.js";

type Obj = Record<string, any>;

const assignment = (cohort: string): Obj => ({
  query_id: "q".repeat(32), round: 0, cohort_id: cohort, party_id: 1, kind: "histogram", source: "colors",
  task: { buckets: ["red", "blue", "green"], other_bucket: null, max_contributions: 1 },
  secagg: { session_id: "14215981eb0a6d5f17137db942e2ae07", n: 3, dim: 3, bits: 16, graph: "auto", threat_model: "active" },
  threat_model: "active", phase_timeout_s: 5,
});

/** The cohort parameters a task entry records (the config's public summary). */
const summary = (a: Obj): Obj => SecAggConfig.fromDict(a.secagg).publicSummary() as unknown as Obj;

/** A log with a few entries before any task (so proofs are not trivial). */
async function logWith(entries: number, label?: string, salt = "x"): Promise<FakeLog> {
  const log = await FakeLog.create(label);
  for (let i = 0; i < entries; i++) await log.append({ type: "budget", at: 1_764_300_000_000 + i, source: `${salt}${i}`, total_epsilon: 10, total_delta: 1e-5 });
  return log;
}

/** The TaskProof of `log` for an assignment (its task entry appended if new), from the device's `log_size`. */
async function proofFor(log: FakeLog, a: Obj, body: Obj, digest?: string): Promise<Obj> {
  const d = digest ?? hex(await taskDigest(a));
  return log.proof(await log.task(a.query_id, a.round, a.cohort_id, d, summary(a)), typeof body.log_size === "number" ? body.log_size : null) as Promise<Obj>;
}

interface Device {
  client: DeviceClient;
  store: LocalStore;
  /** Rows read from the store (any collection). */
  reads: () => number;
}

async function device(fetchFn: typeof fetch, policy: DevicePolicyOptions = {}): Promise<Device> {
  const store = new LocalStore();
  await store.addMany("colors", ["red", "blue"]);
  let reads = 0;
  const rows = store.rows.bind(store);
  store.rows = (c: string) => {
    reads++;
    return rows(c);
  };
  const client = new DeviceClient("http://fa.test", store, { policy: new DevicePolicy(policy), log: () => {}, keysWithCheckin: false, network: { fetch: fetchFn } });
  return { client, store, reads: () => reads };
}

/** A server that hands out `next()` at each check-in (with the answer's extra members), takes refusals, and ends
 * every cohort at its first phase message (410: the device got past its checks, read its data and started). */
function server(next: (body: Obj) => Obj | Promise<Obj>, log: FakeLog | false) {
  const refusals: Obj[] = [];
  const checkins: Obj[] = [];
  const s = fakeServer(async (req: Seen) => {
    if (req.path === "/v1/device/checkin") {
      const body = bodyJson(req);
      checkins.push(body);
      return json(200, { queries_running: 1, ...(await next(body)) });
    }
    if (req.path.endsWith("/refusal")) {
      refusals.push(bodyJson(req));
      return json(200, {});
    }
    return json(410, { error: "cohort over" });
  }, { log });
  const keyFetches = () => s.seen.filter((r) => r.path === "/v1/log/key").length;
  return { ...s, refusals, checkins, keyFetches };
}

const short = (o: Outcome) => [o.status, o.reason];

test("a logged task is run; the head is stored, the next check-in says its size and gets a consistency proof from it", async () => {
  const log = await logWith(5);
  let n = 0;
  const srv = server(() => ({ assignment: assignment(String(++n).repeat(32)) }), log);
  const d = await device(srv.fetch);
  assert.equal(await d.client.logHead(), null);

  assert.deepEqual(short(await d.client.runOnce()), ["aborted", null], "checked, then the cohort ended");
  assert.ok(!("log_size" in srv.checkins[0]), "no head stored yet: no log_size");
  assert.equal(srv.keyFetches(), 1, "the log key is pinned on first use");
  assert.deepEqual(JSON.parse((await d.store.getMeta(LOG_KEYS_META)) as string), [(log.keyResponse() as Obj).public_key]);
  const first = await d.client.logHead();
  assert.equal(first?.size, 6);
  assert.deepEqual(first, await log.head(6), "the signed head, as HeadModel JSON");
  assert.equal(d.reads(), 1, "the data was read once the task was found in the log");

  for (let i = 0; i < 4; i++) await log.append({ type: "budget", at: 1, source: `later${i}`, total_epsilon: 1, total_delta: 0 });
  assert.deepEqual(short(await d.client.runOnce()), ["aborted", null]);
  assert.equal(srv.checkins[1].log_size, 6, "the check-in carries the stored head's size");
  assert.equal((await d.client.logHead())?.size, 11);
  assert.equal(srv.keyFetches(), 1, "the pinned key is never fetched again");
  assert.deepEqual(srv.refusals, []);

  await d.client.runOnce();
  assert.equal(srv.checkins[2].log_size, 11);
});

test("a whole cohort under the log: every member keeps the head and its entry's index with the contribution", async () => {
  const log = await logWith(3);
  const cohort = new FakeCohort({ devices: 3, log });
  const devices = await Promise.all([0, 1, 2].map(async (i) => {
    const store = new LocalStore();
    await store.add("colors", ["red", "blue", "green"][i]);
    return new DeviceClient("http://fa.test", store, { log: () => {}, network: { fetch: cohort.fetch, checkinWaitS: 1 } });
  }));
  for (const d of devices) cohort.seat((await d.identity()).deviceId);
  const outs = await Promise.all(devices.map((d) => d.runOnce()));
  assert.deepEqual(outs.map((o) => o.status), ["finished", "finished", "finished"], JSON.stringify(outs));
  assert.equal(log.entries.length, 4, "one task entry for the cohort's one task");
  const head = await log.head(4);
  for (const d of devices) {
    assert.deepEqual(await d.logHead(), head);
    const [row] = await d.transparencyLog();
    assert.deepEqual([row.status, row.log_size, row.log_root, row.log_index], ["finished", 4, head.root, 3]);
  }
});

test("a task logged with another digest is refused with not_logged before any data is read, reported and kept in the log", async () => {
  const log = await logWith(4);
  const srv = server(async (body) => {
    const a = assignment("d".repeat(32));
    return { assignment: a, log: await proofFor(log, a, body, hex(new Uint8Array(32).fill(9))) };  // the decoy's digest
  }, log);
  const d = await device(srv.fetch);
  const out = await d.client.runOnce();
  assert.deepEqual(short(out), ["refused", "not_logged"]);
  assert.equal(out.detail, "the logged entry 4 is not this task (it differs in task_digest)");
  assert.equal(d.reads(), 0, "no data was read");
  assert.deepEqual(srv.refusals, [{ reason: "not_logged", detail: out.detail }]);
  const [row] = await d.client.transparencyLog();
  assert.deepEqual([row.status, row.epsilon, row.detail, row.log_size], ["refused", null, `not_logged: ${out.detail}`, null]);
  assert.equal(await d.client.logHead(), null, "nothing stored from a refused proof");
  assert.equal(srv.seen.filter((r) => r.path.includes("/phases/")).length, 0, "no phase message was sent");
});

test("no log proof: refused while requireLog (the default); taken with requireLog false", async () => {
  const srv = server(() => ({ assignment: assignment("e".repeat(32)) }), false);
  const d = await device(srv.fetch);
  const out = await d.client.runOnce();
  assert.deepEqual([out.status, out.reason, out.detail], ["refused", "not_logged", "the server sent no log proof"]);
  assert.deepEqual(srv.refusals.map((r) => r.reason), ["not_logged"]);
  assert.equal(d.reads(), 0);
  assert.equal((await d.client.transparencyLog())[0]?.status, "refused");

  const lax = await device(server(() => ({ assignment: assignment("f".repeat(32)) }), false).fetch, { requireLog: false });
  assert.deepEqual(short(await lax.client.runOnce()), ["aborted", null]);
  assert.equal(lax.reads(), 1);
  assert.equal(await lax.client.logHead(), null);
});

test("a head that does not extend the stored one is refused: a rewritten log, a shrunk one, another origin; the stored head stays", async () => {
  const log = await logWith(5);
  let view: (a: Obj, body: Obj) => Promise<Obj> = (a, body) => proofFor(log, a, body);
  let n = 0;
  const srv = server(async (body) => {
    const a = assignment(String(++n).repeat(32));
    return { assignment: a, log: await view(a, body) };
  }, log);
  const d = await device(srv.fetch);
  assert.deepEqual(short(await d.client.runOnce()), ["aborted", null]);
  const stored = await d.client.logHead();
  assert.equal(stored?.size, 6);

  // the same key and origin over other entries (a rewritten history), larger than the stored head
  const forked = await logWith(7, undefined, "rewritten");
  view = (a, body) => proofFor(forked, a, body);
  let out = await d.client.runOnce();
  assert.deepEqual(short(out), ["refused", "not_logged"]);
  assert.match(out.detail, /^consistency proof: does not lead to the root of the tree of size 6$/);
  assert.deepEqual(await d.client.logHead(), stored, "the stored head is kept");
  assert.equal(d.reads(), 1, "no data read for the refused one");

  // a log that shrank below the stored head
  const small = await logWith(1);
  view = (a, body) => proofFor(small, a, body);
  out = await d.client.runOnce();
  assert.match(out.detail, /^the log shrank: 2 entries, the device saw 6$/);

  // a proof that does not start from the stored head
  view = async (a) => log.proof(await log.task(a.query_id, a.round, a.cohort_id, hex(await taskDigest(a)), summary(a)));
  out = await d.client.runOnce();
  assert.match(out.detail, /^no consistency proof from the device's last head \(size 6\)$/);

  // the same entries under another origin
  const elsewhere = await FakeLog.create(undefined, "elsewhere.test/log");
  for (const e of log.entries) await elsewhere.append(e);
  view = (a, body) => proofFor(elsewhere, a, body);
  out = await d.client.runOnce();
  assert.match(out.detail, /^the head is from log 'elsewhere.test\/log', the device follows 'fa.test\/fa-log'$/);

  assert.deepEqual(srv.refusals.map((r) => r.reason), ["not_logged", "not_logged", "not_logged", "not_logged"]);
  assert.deepEqual(await d.client.logHead(), stored);
  assert.deepEqual(srv.checkins.slice(1).map((b) => b.log_size), [6, 6, 6, 6]);
});

test("the log key: pinned on first use and kept (a server key that changes later is refused); a policy's logKeys are never fetched", async () => {
  let log = await logWith(2);
  let n = 0;
  const srv = server(async (body) => {
    const a = assignment(String(++n).repeat(32));
    return { assignment: a, log: await proofFor(log, a, body) };
  }, log);
  const d = await device(srv.fetch);
  assert.deepEqual(short(await d.client.runOnce()), ["aborted", null]);

  const rekeyed = await logWith(0, "fa-test/another-log-key");
  for (const e of log.entries) await rekeyed.append(e);
  log = rekeyed;  // the same tree, heads signed by a key the device never pinned
  const out = await d.client.runOnce();
  assert.deepEqual(short(out), ["refused", "not_logged"]);
  assert.match(out.detail, /^tree head of size 4: signed by key '[0-9a-f]{16}', which is not one of the 1 pinned$/);
  assert.equal(srv.keyFetches(), 1);

  // pinned by the app: the server's /v1/log/key is never asked
  const pinnedLog = await logWith(2);
  const srv2 = server(async (body) => {
    const a = assignment("a".repeat(32));
    return { assignment: a, log: await proofFor(pinnedLog, a, body) };
  }, pinnedLog);
  const pinned = await device(srv2.fetch, { logKeys: [(pinnedLog.keyResponse() as Obj).public_key] });
  assert.deepEqual(short(await pinned.client.runOnce()), ["aborted", null]);
  assert.equal(srv2.keyFetches(), 0);
  assert.equal(await pinned.store.getMeta(LOG_KEYS_META), null);

  const other = await device(srv2.fetch, { logKeys: [(rekeyed.keyResponse() as Obj).public_key] });
  assert.match((await other.client.runOnce()).detail, /^tree head of size 3: signed by key/);

  // a server whose /v1/log/key names a key id that is not its key's
  const liar = fakeServer(async (req) => {
    if (req.path === "/v1/device/checkin") {
      const a = assignment("b".repeat(32));
      return json(200, { assignment: a, log: await proofFor(pinnedLog, a, bodyJson(req)) });
    }
    return json(410, {});
  }, { log: false });
  const fetchLiar = (async (input: RequestInfo | URL, init?: RequestInit) => String(input).endsWith("/v1/log/key")
    ? json(200, { ...pinnedLog.keyResponse(), key_id: "0".repeat(16) })
    : liar.fetch(input, init)) as typeof fetch;
  const fooled = await device(fetchLiar);
  const out2 = await fooled.client.runOnce();
  assert.deepEqual(short(out2), ["refused", "not_logged"]);
  assert.match(out2.detail, /^no log key to check the proof with: GET \/v1\/log\/key: key_id "0000000000000000" is not the id of its public_key/);
  assert.equal(await fooled.store.getMeta(LOG_KEYS_META), null, "nothing pinned");
});

test("witnesses pinned in the policy: a head without their fresh cosignatures is refused", async () => {
  const log = await logWith(3);
  const srv = server(async (body) => {
    const a = assignment("c".repeat(32));
    return { assignment: a, log: await proofFor(log, a, body) };
  }, log);
  const d = await device(srv.fetch, { witnessKeys: [(log.keyResponse() as Obj).public_key] });
  const out = await d.client.runOnce();
  assert.deepEqual([out.reason, out.detail], ["not_logged", "no witnessed head: the device requires witnesses' cosignatures"]);
});

test("ledger rows stored before the log fields existed still read, as rows without a log proof", async () => {
  const store = new LocalStore();
  await store.transaction((t) => t.put("contributions", "7", {
    id: 7, query_id: "q", round: 0, cohort_id: "c", kind: "histogram", source: "colors", accepted_at: Date.now() / 1000, sent_at: 1, ended_at: 2,
    status: "finished", contributed: true, mechanism: "none", epsilon: null, delta: null, query_epsilon: null, query_delta: null, query_privacy: {},
    noise_scale: null, noise_std: null, encoding_scale: 1, proofs: false, cohort_size: 3, min_survivors: null, detail: "",
  }));
  const client = new DeviceClient("http://fa.test", store, { log: () => {}, network: { fetch: fakeServer(() => json(404, {})).fetch } });
  const [row] = await client.transparencyLog();
  assert.deepEqual([row.id, row.status, row.log_size, row.log_root, row.log_index], [7, "finished", null, null, null]);
  // an unreadable stored head is set aside (with a warning), not trusted
  await store.setMeta(LOG_HEAD_META, "{not json");
  assert.equal(await client.logHead(), null);
});
