/** Several devices in one page or Node process prove at once (the generators are derived lazily, shared by every
 * proof): each proof must still match the vectors' generators and verify. Its own file, so the generator cache starts
 * empty as in a fresh page. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex, utf8 } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import * as g from "../src/validity/group.js";
import { prove, verify } from "../src/validity/proof.js";
import { Bits, Ranged, Statement } from "../src/validity/statement.js";
import { vectors } from "./helpers.js";

test("validity: concurrent proofs from an empty generator cache all verify", async () => {
  const st = new Statement([Bits(15, 2), Ranged(1, 0, 3)], 2n, 14n);
  const proofs = await Promise.all(Array.from({ length: 8 }, async (_, i) => {
    const ctx = { sessionId: new Uint8Array(16).fill(i), queryId: "q", round: 0, party: i + 1 };
    const values = Array.from({ length: 16 }, (_, j) => BigInt(j === i ? 1 : 0));
    const noise = Array.from({ length: 16 }, (_, j) => BigInt(((i + j) % 29) - 14));
    const [proof] = await prove(st, ctx, values, noise, new SeededRandom(utf8(`device ${i}`)));
    return [ctx, proof] as const;
  }));
  for (const [ctx, proof] of proofs) await verify(st, ctx, proof);
  const c = vectors("validity").cases.find((x) => x.output.generators.length >= 2);
  assert.ok(c);
  assert.deepEqual((await g.generators(c.output.generators.length)).map((p) => hex(p.toBytes())), c.output.generators);
});
