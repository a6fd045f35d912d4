/** The DP samplers: the known-answer vectors from a seed or given words, and the distributions against their exact
 * pmf (χ², as tests/queries/test_noise.py does). */

import assert from "node:assert/strict";
import { test } from "node:test";

import { unhex, utf8 } from "../src/bytes.js";
import { gaussianDelta, gaussianFloor, perDeviceFloor } from "../src/dp/floor.js";
import * as noise from "../src/dp/noise.js";
import { ByteSource, SeededRandom } from "../src/randomness.js";
import { vectors } from "./helpers.js";

class WordSource implements ByteSource {
  private data: Uint8Array;
  private pos = 0;
  private then: SeededRandom;
  constructor(words: string[], thenSeed: Uint8Array) {
    this.data = new Uint8Array(8 * words.length);
    const view = new DataView(this.data.buffer);
    words.forEach((w, i) => view.setBigUint64(8 * i, BigInt(w), true));
    this.then = new SeededRandom(thenSeed);
  }
  async bytes(n: number): Promise<Uint8Array> {
    const out = new Uint8Array(n);
    const have = Math.min(n, this.data.length - this.pos);
    out.set(this.data.subarray(this.pos, this.pos + have));
    this.pos += have;
    out.set(await this.then.bytes(n - have), have);
    return out;
  }
}

test("noise samplers reproduce the known-answer vectors", async () => {
  for (const { input, output } of vectors("noise").cases) {
    const src: ByteSource = "words" in input ? new WordSource(input.words, unhex(input.then_seed)) : new SeededRandom(unhex(input.seed));
    const { sampler, scale, size } = input;
    let values: number[];
    if (sampler === "uniform") values = await noise.sampleUniforms(size, src);
    else if (sampler === "discrete_laplace") values = await noise.sampleDiscreteLaplace(scale, size, src);
    else if (sampler === "poisson") values = await noise.samplePoisson(scale, size, src);
    else values = await noise.sampleNoise(sampler, scale, size, src);
    assert.deepEqual(values, output.values.map(Number), `${sampler} ${scale}`);
  }
});

/** Pearson's χ² over the cells with expected count ≥ 5 (the tail pooled); p-value from the Wilson–Hilferty cube root. */
function chiSquareP(observed: Map<number, number>, pmf: (k: number) => number, n: number, support: [number, number]): number {
  const cells: [number, number][] = [];
  let restObs = n;
  let restExp = n;
  for (let k = support[0]; k <= support[1]; k++) {
    const e = n * pmf(k);
    if (e < 5) continue;
    const o = observed.get(k) ?? 0;
    cells.push([o, e]);
    restObs -= o;
    restExp -= e;
  }
  cells.push([restObs, Math.max(restExp, 1e-9)]);
  const stat = cells.reduce((s, [o, e]) => s + ((o - e) * (o - e)) / e, 0);
  const df = cells.length - 1;
  const z = (Math.cbrt(stat / df) - (1 - 2 / (9 * df))) / Math.sqrt(2 / (9 * df));
  return 0.5 * erfcApprox(z / Math.SQRT2);
}

function erfcApprox(x: number): number {
  const t = 1 / (1 + 0.5 * Math.abs(x));
  const y = t * Math.exp(-x * x - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
  return x >= 0 ? y : 2 - y;
}

function counts(values: number[]): Map<number, number> {
  const m = new Map<number, number>();
  for (const v of values) m.set(v, (m.get(v) ?? 0) + 1);
  return m;
}

function dgPmf(sigma: number): (k: number) => number {
  const half = Math.ceil(40 * sigma) + 2;
  let z = 0;
  for (let k = -half; k <= half; k++) z += Math.exp(-(k * k) / (2 * sigma * sigma));
  return (k) => Math.exp(-(k * k) / (2 * sigma * sigma)) / z;
}

function logFactorial(k: number): number {
  let s = 0;
  for (let i = 2; i <= k; i++) s += Math.log(i);
  return s;
}

function skellamPmf(mu: number): (k: number) => number {
  const lam = mu / 2;
  const p = (j: number) => Math.exp(-lam + j * Math.log(lam) - logFactorial(j));
  return (k) => {
    let s = 0;
    for (let j = Math.max(0, -k); j < Math.max(0, -k) + 200 + Math.ceil(10 * lam); j++) s += p(j) * p(j + k);
    return s;
  };
}

const N = 40_000;

for (const sigma of [0.8, 3.5, 20]) {
  test(`discrete Gaussian σ=${sigma}: χ² against the exact pmf`, async () => {
    const values = await noise.sampleDiscreteGaussian(sigma, N, new SeededRandom(utf8(`chi2/dg/${sigma}`)));
    const half = Math.ceil(10 * sigma) + 3;
    const p = chiSquareP(counts(values), dgPmf(sigma), N, [-half, half]);
    assert.ok(p > 1e-4, `p = ${p}`);
    // and a wrong σ is caught: the test can fail
    assert.ok(chiSquareP(counts(values), dgPmf(sigma * 1.15), N, [-half, half]) < 1e-4);
  });
}

for (const mu of [1.5, 12, 90]) {
  test(`Skellam μ=${mu}: χ² against the exact pmf`, async () => {
    const values = await noise.sampleSkellam(mu, N, new SeededRandom(utf8(`chi2/sk/${mu}`)));
    const half = Math.ceil(8 * Math.sqrt(mu)) + 5;
    const p = chiSquareP(counts(values), skellamPmf(mu), N, [-half, half]);
    assert.ok(p > 1e-4, `p = ${p}`);
    assert.ok(chiSquareP(counts(values), skellamPmf(mu * 1.2), N, [-half, half]) < 1e-4);
  });
}

test("bounded noise stays within its bound", async () => {
  const values = await noise.sampleNoiseBounded("skellam", 50, 5000, new SeededRandom(utf8("bounded")), 20);
  assert.ok(values.every((v) => Math.abs(v) <= 20));
  await assert.rejects(noise.sampleNoiseBounded("discrete_gaussian", 1e6, 10, new SeededRandom(utf8("tight")), 0), /too tight/);
});

test("noise floor: the exact Gaussian privacy profile and the per-device floor", () => {
  // reference values printed by queries/dp/floor.py
  const z = gaussianFloor(1.0, 1e-6, 1);
  assert.ok(gaussianDelta(1.0, z) > 1e-6 * 0.999 && gaussianDelta(1.0, z * 1.0001) <= 1e-6);
  assert.ok(Math.abs(z - 4.224678889324423) < 1e-9, String(z)); // queries.dp.floor.gaussian_floor(1, 1e-6)
  assert.ok(Math.abs(gaussianFloor(1.0, 1e-6, 4) - 2 * z) < 1e-9);
  const sk = perDeviceFloor("skellam", 1.0, 1e-6, 1, 100, 1.0);
  assert.ok(Math.abs(sk - (z * z) / 100) < 1e-12);
  assert.ok(Math.abs(perDeviceFloor("discrete_gaussian", 1.0, 1e-6, 1, 100, 2.0, 3, 4) - 1.267403666797327) < 1e-9);
});
