// Validity-proof proving time in the JS SDK, for scripts/bench_validity.py (`make bench`):
//   node scripts/bench_validity.mjs < cases.json
// cases.json: {"cases": [{"case": name, "statement": <Statement.to_json()>, "values": [...], "noise": [...] | null,
// "repeat": k}]}. Prints {"node": version, "cases": [{"case", "device_prove_ms" (median), "proof_bytes"}]}: one
// device proving on one thread, with the OS's randomness, as a device does.
import { readFileSync } from "node:fs";

import { OsRandom } from "../dist/src/randomness.js";
import { prove } from "../dist/src/validity/proof.js";
import { statementFromJson } from "../dist/src/validity/statement.js";

const input = JSON.parse(readFileSync(0, "utf8"));
const context = { sessionId: new Uint8Array(16).map((_, i) => i), queryId: "bench", round: 0, party: 1 };
const out = [];
for (const c of input.cases) {
  const st = statementFromJson(c.statement);
  const values = c.values.map(BigInt);
  const noise = c.noise === null ? null : c.noise.map(BigInt);
  const times = [];
  let bytes = 0;
  await prove(st, context, values, noise, new OsRandom());  // warm-up: generators and JIT
  for (let i = 0; i < Math.max(1, c.repeat); i++) {
    const t0 = performance.now();
    const [proof] = await prove(st, context, values, noise, new OsRandom());
    times.push(performance.now() - t0);
    bytes = proof.length;
  }
  times.sort((a, b) => a - b);
  out.push({ case: c.case, device_prove_ms: Math.round(100 * times[Math.floor(times.length / 2)]) / 100, proof_bytes: bytes });
}
console.log(JSON.stringify({ node: process.version, cases: out }));
