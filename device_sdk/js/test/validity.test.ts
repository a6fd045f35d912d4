/** Validity proofs against tests/vectors/validity.json: generators (G_i, the bit generators g_k, h_k and g_t), the
 * statement's bit layout and witness, transcript bytes, a seeded prover's proof byte for byte, the verifier's
 * commitment, the blinding and its limbs; tampered proofs, proofs for another context and proofs of invalid bit
 * vectors are refused; the prover's curve operations do not depend on the device's bits. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { hex, unhex, utf8 } from "../src/bytes.js";
import { SeededRandom } from "../src/randomness.js";
import * as g from "../src/validity/group.js";
import { layout, witness } from "../src/validity/layout.js";
import { InvalidProof, ProofContext, TRANSCRIPT_DOMAIN, bitCommitment, commitmentOf, encodeContext, proofSize, prove, proveBits, verify, weightedBits } from "../src/validity/proof.js";
import { Bits, Ranged, Signs, Statement, StatementError, blindLimbs, relation, statementFromJson } from "../src/validity/statement.js";
import { vectors } from "./helpers.js";

const statement = statementFromJson;
const hexes = (ps: g.Point[]): string[] => ps.map((p) => hex(p.toBytes()));

test("validity: generators, layout, witness, transcript bytes, seeded proofs and commitments match the vectors", async () => {
  for (const { input, output } of vectors("validity").cases) {
    const st = statement(input.statement);
    const ctx: ProofContext = {
      sessionId: unhex(input.context.session_id), queryId: input.context.query_id, round: input.context.round, party: input.context.party,
      taskDigest: unhex(input.context.task_digest),
    };
    const what = JSON.stringify(input.statement);
    assert.deepEqual(hexes(await g.generators(st.dim)), output.generators);
    const lay = layout(st);
    const [gv, hv] = await g.bitGenerators(lay.n);
    assert.deepEqual(hexes(gv), output.bit_generators);
    assert.deepEqual(hexes(hv), output.complement_generators);
    assert.equal(hex((await g.innerProductGenerator()).toBytes()), output.inner_product_generator);
    assert.deepEqual(lay.entry, output.layout.entry, what);
    assert.deepEqual(lay.coef.map(String), output.layout.coef, what);
    assert.deepEqual(lay.offsets.map(String), output.layout.offsets, what);
    assert.deepEqual(lay.constraints.map(([terms, v]) => [terms.map(([k, w]) => [k, String(w)]), String(v)]), output.layout.constraints, what);
    const values = input.values.map(BigInt);
    const noise = input.noise === null ? null : input.noise.map(BigInt);
    assert.deepEqual(witness(st, values, noise).map(Number), output.witness, what);
    assert.equal(hex(g.mulBase(1n).toBytes()), output.base_point);
    assert.equal(hex(encodeContext(ctx)), output.context_bytes);
    assert.equal(new TextDecoder().decode(TRANSCRIPT_DOMAIN), output.transcript_domain);
    assert.equal(hex(st.encode()), output.statement_bytes);
    assert.equal(proofSize(st), output.proof_size);
    const [proof, blind] = await prove(st, ctx, values, noise, new SeededRandom(unhex(input.seed)));
    assert.equal(hex(proof), output.proof, what);
    assert.equal(String(blind), output.blind);
    assert.deepEqual(blindLimbs(blind), output.blind_limbs);
    const k = await verify(st, ctx, unhex(output.proof));
    assert.equal(hex(k.toBytes()), output.commitment);
    assert.equal(hex((await commitmentOf(st, values, noise, blind)).toBytes()), output.commitment);
    // a flipped bit anywhere: in a point (A), in τ_x, μ, an l and the last r
    for (const at of [32 + 5, 192, 224 + 3, 256 + 1, proof.length - 32]) {
      const bad = unhex(output.proof);
      bad[at] ^= 1;
      await assert.rejects(verify(st, ctx, bad), InvalidProof, `byte ${at}`);
    }
    await assert.rejects(verify(st, ctx, unhex(output.proof).subarray(0, proof.length - 32)), InvalidProof, "truncated");
    await assert.rejects(verify(st, { ...ctx, party: ctx.party + 1 }, unhex(output.proof)), InvalidProof, "bound to its party");
    await assert.rejects(verify(st, { ...ctx, round: ctx.round + 1 }, unhex(output.proof)), InvalidProof, "bound to its round");
    await assert.rejects(verify(st, { ...ctx, taskDigest: new Uint8Array(32).fill(7) }, unhex(output.proof)), InvalidProof, "bound to the task");
  }
});

test("validity: proofs of invalid bit vectors do not verify", async () => {
  const st = new Statement([Bits(3, 1)]);
  const ctx = { sessionId: new Uint8Array(16), queryId: "q", round: 0, party: 1 };
  assert.deepEqual(witness(st, [0n, 1n, 0n], null), [0n, 1n, 0n, 0n]); // the three entries, then the slack
  const ok = (await proveBits(st, ctx, [0n, 1n, 0n, 0n], new SeededRandom(utf8("bits"))))[0];
  await verify(st, ctx, ok);
  // a non-binary "bit": 2 in one entry and −1 in the slack meets the one-vote constraint (2 + (−1) = 1)
  const [nonBinary] = await proveBits(st, ctx, [2n, 0n, 0n, g.ORDER - 1n], new SeededRandom(utf8("bits")));
  await assert.rejects(verify(st, ctx, nonBinary), InvalidProof, "a non-binary bit");
  // binary, but two votes where one is allowed
  const [twoVotes] = await proveBits(st, ctx, [1n, 1n, 0n, 0n], new SeededRandom(utf8("bits")));
  await assert.rejects(verify(st, ctx, twoVotes), InvalidProof, "a violated one-vote constraint");
  // a range's digits out of range: the noise bound, and a value out of a ranged segment (witness gives a non-bit digit)
  const noisy = new Statement([Ranged(1, 0, 5)], 1n, 2n);
  const [outOfRange] = await proveBits(noisy, ctx, witness(noisy, [7n], [0n]), new SeededRandom(utf8("bits")));
  await assert.rejects(verify(noisy, ctx, outOfRange), InvalidProof, "a value outside its range");
  const [tooNoisy] = await proveBits(noisy, ctx, witness(noisy, [3n], [3n]), new SeededRandom(utf8("bits")));
  await assert.rejects(verify(noisy, ctx, tooNoisy), InvalidProof, "noise beyond its bound");
});

test("validity: a false statement cannot be proved", async () => {
  const st = new Statement([Bits(3, 1)]);
  const ctx = { sessionId: new Uint8Array(16), queryId: "q", round: 0, party: 1 };
  await assert.rejects(prove(st, ctx, [1n, 1n, 0n], null, new SeededRandom(utf8("x"))), /does not satisfy/);
  await assert.rejects(prove(new Statement([Bits(2, 1)], 1n, 2n), ctx, [1n, 0n], [3n, 0n], new SeededRandom(utf8("x"))), /exceeds the bound/);
});

test("validity: a contribution that breaks a relation cannot be proved; bad relations are refused", async () => {
  const st = new Statement([Ranged(2, 0n, 100n)], 1n, 0n, [relation([[0, 1], [1, -1]], 0n, 100n)]);
  const ctx = { sessionId: new Uint8Array(16), queryId: "q", round: 0, party: 1 };
  await assert.rejects(prove(st, ctx, [10n, 11n], null, new SeededRandom(utf8("x"))), /relation 0/);
  const [proof] = await prove(st, ctx, [11n, 10n], null, new SeededRandom(utf8("x")));
  await verify(st, ctx, proof);
  const [broken] = await proveBits(st, ctx, witness(st, [10n, 11n], null), new SeededRandom(utf8("x")));
  await assert.rejects(verify(st, ctx, broken), InvalidProof, "a broken relation");
  assert.throws(() => new Statement([Bits(2, 1), Ranged(1, 0n, 3n)], 1n, 0n, [relation([[0, 1]], 0n, 1n)]), StatementError);
  assert.throws(() => new Statement([Ranged(2, 0n, 3n)], 1n, 0n, [relation([[0, 1], [0, 1]], 0n, 1n)]), StatementError);
  assert.throws(() => new Statement([Ranged(2, 0n, 3n)], 1n, 0n, [relation([[0, 0]], 0n, 1n)]), StatementError);
});

test("validity: K and A cost the same group operations whatever the device's bits", async () => {
  // what a device proves must not show in how long proving takes: over a stand-in group that records every operation,
  // a histogram vote in any bucket or none (with any noise), and sign votes −1, 0 or +1, run the same additions and
  // multiplications in the same order (S and S2 are Pippenger sums over the random sL, sR, not over the bits)
  class Traced {
    constructor(readonly log: string[]) {}
    add(_other: Traced): Traced {
      this.log.push("add");
      return new Traced(this.log);
    }
    multiply(scalar: bigint): Traced {
      this.log.push(`mul ${scalar}`);
      return new Traced(this.log);
    }
  }
  const trace = (st: Statement, values: bigint[], noise: bigint[] | null): string => {
    const log: string[] = [];
    const lay = layout(st);
    const bits = witness(st, values, noise);
    const pts = (n: number): Traced[] => Array.from({ length: n }, () => new Traced(log));
    weightedBits(lay, bits, pts(st.dim), new Traced(log));
    log.push("|");
    bitCommitment(bits, pts(lay.n), pts(lay.n), new Traced(log));
    return log.join(",");
  };
  const hist = new Statement([Bits(4, 1)], 2n, 3n);
  const seen = new Set<string>();
  for (const v of [[0n, 0n, 0n, 0n], [1n, 0n, 0n, 0n], [0n, 0n, 0n, 1n]]) seen.add(trace(hist, v, [3n, -3n, 0n, 1n]));
  seen.add(trace(hist, [0n, 1n, 0n, 0n], [-3n, -3n, -3n, -3n]));
  assert.equal(seen.size, 1, "histogram votes and noise");
  assert.ok([...seen][0].includes("mul"));
  seen.clear();
  const signs = new Statement([Signs(3)]);
  for (const v of [[-1n, -1n, -1n], [0n, 0n, 0n], [1n, 1n, 1n], [-1n, 0n, 1n]]) seen.add(trace(signs, v, null));
  assert.equal(seen.size, 1, "sign votes");
  // and over the real points it is K's definition
  const st = new Statement([Bits(2, 2), Signs(2)], 3n);
  const values = [1n, 0n, -1n, 1n];
  const k = weightedBits(layout(st), witness(st, values, null), await g.generators(st.dim), g.IDENTITY);
  assert.ok(k.equals(await commitmentOf(st, values, null, 0n)));
});
