/** Validity proofs against tests/vectors/validity.json: generators, transcript bytes, a seeded prover's proof byte for
 * byte, the verifier's commitment, the blinding and its limbs; a tampered proof is refused. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex, unhex, utf8 } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import * as g from "../src/validity/group.js";
import { InvalidProof, ProofContext, TRANSCRIPT_DOMAIN, commitmentOf, encodeContext, proofSize, prove, verify } from "../src/validity/proof.js";
import { Bits, Ranged, Statement, StatementError, blindLimbs, relation, statementFromJson } from "../src/validity/statement.js";
import { vectors } from "./helpers.js";

const statement = statementFromJson;

test("validity: generators, transcript bytes, seeded proofs and commitments match the vectors", async () => {
  for (const { input, output } of vectors("validity").cases) {
    const st = statement(input.statement);
    const ctx: ProofContext = {
      sessionId: unhex(input.context.session_id), queryId: input.context.query_id, round: input.context.round, party: input.context.party,
      taskDigest: unhex(input.context.task_digest),
    };
    assert.deepEqual((await g.generators(st.dim)).map((p) => hex(p.toBytes())), output.generators);
    assert.equal(hex((await g.sumGenerator()).toBytes()), output.sum_generator);
    assert.deepEqual(await Promise.all(st.relations.map(async (_, k) => hex((await g.relationGenerator(k)).toBytes()))), output.relation_generators);
    assert.equal(hex(g.mulBase(1n).toBytes()), output.base_point);
    assert.equal(hex(encodeContext(ctx)), output.context_bytes);
    assert.equal(new TextDecoder().decode(TRANSCRIPT_DOMAIN), output.transcript_domain);
    assert.equal(hex(st.encode()), output.statement_bytes);
    assert.equal(proofSize(st), output.proof_size);
    const values = input.values.map(BigInt);
    const noise = input.noise === null ? null : input.noise.map(BigInt);
    const [proof, blind] = await prove(st, ctx, values, noise, new SeededRandom(unhex(input.seed)));
    assert.equal(hex(proof), output.proof);
    assert.equal(String(blind), output.blind);
    assert.deepEqual(blindLimbs(blind), output.blind_limbs);
    const k = await verify(st, ctx, unhex(output.proof));
    assert.equal(hex(k.toBytes()), output.commitment);
    assert.equal(hex((await commitmentOf(st, values, noise, blind)).toBytes()), output.commitment);
    const bad = unhex(output.proof);
    bad[bad.length - 1] ^= 1;
    await assert.rejects(verify(st, ctx, bad), InvalidProof);
    await assert.rejects(verify(st, { ...ctx, party: ctx.party + 1 }, unhex(output.proof)), InvalidProof, "bound to its party");
    await assert.rejects(verify(st, { ...ctx, taskDigest: new Uint8Array(32).fill(7) }, unhex(output.proof)), InvalidProof, "bound to the task");
  }
});

test("validity: a false statement cannot be proved", async () => {
  const st = new Statement([Bits(3, 1)]);
  const ctx = { sessionId: new Uint8Array(16), queryId: "q", round: 0, party: 1 };
  await assert.rejects(prove(st, ctx, [1n, 1n, 0n], null, new SeededRandom(utf8("x"))), /does not satisfy/);
});

test("validity: a contribution that breaks a relation cannot be proved; bad relations are refused", async () => {
  const st = new Statement([Ranged(2, 0n, 100n)], 1n, 0n, [relation([[0, 1], [1, -1]], 0n, 100n)]);
  const ctx = { sessionId: new Uint8Array(16), queryId: "q", round: 0, party: 1 };
  await assert.rejects(prove(st, ctx, [10n, 11n], null, new SeededRandom(utf8("x"))), /relation 0/);
  const [proof] = await prove(st, ctx, [11n, 10n], null, new SeededRandom(utf8("x")));
  await verify(st, ctx, proof);
  assert.throws(() => new Statement([Bits(2, 1), Ranged(1, 0n, 3n)], 1n, 0n, [relation([[0, 1]], 0n, 1n)]), StatementError);
  assert.throws(() => new Statement([Ranged(2, 0n, 3n)], 1n, 0n, [relation([[0, 1], [0, 1]], 0n, 1n)]), StatementError);
  assert.throws(() => new Statement([Ranged(2, 0n, 3n)], 1n, 0n, [relation([[0, 0]], 0n, 1n)]), StatementError);
});

test("validity: a commitment to −1, 0 or 1 runs the same curve operations whatever the value", async () => {
  // what a device proves must not show in how long proving takes (a 1 bit or a −1 vote used to cost a multiplication)
  const [gen] = await g.generators(1);
  const blind = 123456789n;
  const seen: string[] = [];
  for (const v of [-1n, 0n, 1n]) {
    const calls: string[] = [];
    const traced = new Proxy(gen, {
      get(target, name, receiver) {
        const got = Reflect.get(target, name, receiver);
        return typeof got === "function" ? (...a: unknown[]) => (calls.push(String(name)), got.apply(target, a)) : got;
      },
    });
    const c = g.commit(v, blind, traced);
    const expected = v === 0n ? g.mulBase(blind) : g.mulBase(blind).add(v === 1n ? gen : gen.negate());
    assert.ok(c.equals(expected));
    seen.push(calls.join(","));
  }
  assert.deepEqual(seen, ["negate", "negate", "negate"]);
});
