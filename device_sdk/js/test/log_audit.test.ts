/** The log audit the analyst console runs (src/logAudit.ts on src/translog.ts, vendored into
 * analytics_server/console/vendor/translog.js): CompactRange's roots are the reference tree's; an honest log audits
 * clean, an altered entry and a head signed by another key are findings; and the committed console bundle is what
 * a fresh build of these sources gives. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";

import { build } from "esbuild";

import { utf8 } from "../src/bytes.js";
import { auditLog, digest } from "../src/logAudit.js";
import { CompactRange, HeadJson, ed25519Available, leafHash } from "../src/translog.js";
import { FakeLog, LogSigner, RefTree } from "./fakeLog.js";
import { ROOT } from "./helpers.js";

type Obj = Record<string, any>;

test("CompactRange gives the reference tree's root at every size, past powers of two", async () => {
  const leaves = await Promise.all(Array.from({ length: 40 }, (_, i) => leafHash(utf8(`leaf ${i}`))));
  const ref = new RefTree(leaves);
  const edge = new CompactRange();
  assert.deepEqual(await edge.root(), await ref.root(0));
  for (let i = 0; i < leaves.length; i++) {
    await edge.append(leaves[i]);
    assert.equal(edge.size, i + 1);
    assert.deepEqual(await edge.root(), await ref.root(i + 1), `root of ${i + 1}`);
  }
  await assert.rejects(edge.append(new Uint8Array(31)), /leaf hash: must be 32 bytes/);
});

test("Node's WebCrypto verifies Ed25519 (the RFC 8032 vector)", async () => {
  assert.equal(await ed25519Available(), true);
});

async function honestLog(): Promise<{ log: FakeLog; heads: HeadJson[] }> {
  const log = await FakeLog.create();
  const heads: HeadJson[] = [];
  const at = 1_764_300_000_000;
  const tx = async (...entries: Obj[]): Promise<void> => {
    for (const e of entries) await log.append(e);
    heads.push(await log.head());
  };
  await tx({ type: "budget", source: "*", total_epsilon: 10, total_delta: 1e-5, at });
  for (let q = 0; q < 7; q++) {
    const qid = `q${q}`;
    const spec = { kind: "histogram", source: "words", params: { buckets: ["a", "b"] } };
    await tx({ type: "query", query_id: qid, source: "words", kind: "histogram", spec, spec_digest: await digest(spec), at },
      { type: "charge", query_id: qid, source: "words", epsilon: 1, delta: 1e-7, at });
    await tx({ type: "task", query_id: qid, round: 0, cohort_id: `c${q}`, task_digest: "00".repeat(32), at });
    if (q === 3) await tx({ type: "refund", query_id: qid, source: "words", epsilon: 1, delta: 1e-7, at });
    else await tx({ type: "release", query_id: qid, status: "succeeded", result_digest: "11".repeat(32), at });
  }
  return { log, heads };
}

function routes(log: FakeLog, heads: HeadJson[], newest: HeadJson): (path: string) => Promise<any> {
  return async (path: string) => {
    const url = new URL(path, "http://log.invalid");
    const start = Number(url.searchParams.get("start"));
    const end = Number(url.searchParams.get("end"));
    if (url.pathname === "/v1/log/key") return log.keyResponse();
    if (url.pathname === "/v1/log/head") return { head: newest, cosignatures: [] };
    if (url.pathname === "/v1/log/entries") {
      return { size: log.entries.length, entries: log.entries.slice(start, end).map((entry, i) => ({ index: start + i, entry })) };
    }
    if (url.pathname === "/v1/log/heads") return { heads: heads.filter((h) => h.size >= start && h.size < end) };
    throw new Error(`no route ${path}`);
  };
}

test("an honest log audits clean; an altered entry and a head under another key are findings", async () => {
  const { log, heads } = await honestLog();
  const newest = heads[heads.length - 1];
  const report = await auditLog(routes(log, heads, newest));
  assert.deepEqual(report.findings, []);
  assert.deepEqual(report.checked, { roots: true, signatures: true });
  assert.equal(report.entries, 1 + 7 * 4);
  assert.deepEqual(report.byType, { budget: 1, query: 7, charge: 7, task: 7, release: 6, refund: 1 });
  assert.equal(report.sources.length, 1);
  assert.equal(report.sources[0].spent_epsilon, 6);
  assert.equal(report.sources[0].budget_from, "*");

  const task = log.entries[11] as Obj;
  log.entries[11] = { ...task, at: task.at + 1 };
  const altered = await auditLog(routes(log, heads, newest));
  assert.deepEqual(altered.findings.map((f) => [f.code, f.index]), [["altered", 11]]);
  assert.match(altered.findings[0].message, /^entry 11 altered or removed: the signed head of size 12 does not match/);

  const { log: clean, heads: cleanHeads } = await honestLog();
  const other = await LogSigner.fromLabel("another key");
  const forged = await other.signHead(newest.origin, 5, Buffer.from(cleanHeads[2].root, "base64"), 1);
  const forgedReport = await auditLog(routes(clean, [...cleanHeads, forged], newest));
  assert.deepEqual(forgedReport.findings.map((f) => f.code), ["bad_signature"]);
});

test("the console's vendored log verifier is a fresh build of src/logAudit.ts and src/translog.ts", async () => {
  const jsDir = join(ROOT, "device_sdk", "js");
  const { CONSOLE_BUNDLE, VENDORED } = await import(pathToFileURL(join(jsDir, "scripts", "consoleBundle.mjs")).href);
  const fresh = await build({ ...CONSOLE_BUNDLE, write: false, outfile: VENDORED });
  const committed = readFileSync(VENDORED, "utf8");
  const out = fresh.outputFiles ?? [];
  assert.ok(out.length === 1 && out[0].text === committed,
    "analytics_server/console/vendor/translog.js is stale: run `npm run vendor` in device_sdk/js and commit it");
});
