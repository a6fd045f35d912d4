// The JS device's check of its task against the transparency log, for scripts/bench_translog.py (`make bench`):
//   node scripts/bench_translog.mjs < cases.json
// cases.json: {"cases": [{"case": name, "proof": <TaskProof JSON>, "context": {task_digest (hex), query_id, round,
// cohort_id, log_key (base64)}, "last": <head JSON> | null, "repeat": k}]}. Prints {"node": version, "cases":
// [{"case", "device_check_ms" (median)}]}: parsing the proof, the inclusion and consistency paths, one Ed25519
// verification (WebCrypto), as the SDK does before it reads any data.
import { readFileSync } from "node:fs";

import { checkTaskProof, keyTable, parseHead } from "../dist/src/translog.js";

const unhex = (s) => Uint8Array.from(s.match(/../g).map((b) => parseInt(b, 16)));
const input = JSON.parse(readFileSync(0, "utf8"));
const out = [];
for (const c of input.cases) {
  const ctx = {
    taskDigest: unhex(c.context.task_digest), queryId: c.context.query_id, round: c.context.round,
    cohortId: c.context.cohort_id, logKeys: await keyTable([Uint8Array.from(Buffer.from(c.context.log_key, "base64"))]),
    last: c.last ? parseHead(c.last).head : null,
  };
  await checkTaskProof(c.proof, ctx); // warm-up (and it must pass)
  const times = [];
  for (let i = 0; i < Math.max(1, c.repeat); i++) {
    const t0 = performance.now();
    await checkTaskProof(c.proof, ctx);
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  out.push({ case: c.case, device_check_ms: Math.round(1000 * times[Math.floor(times.length / 2)]) / 1000 });
}
console.log(JSON.stringify({ node: process.version, cases: out }));
