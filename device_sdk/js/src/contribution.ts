/** What the device masks, from the kind's vector x (device_sdk/noise.py and validity.py): s·x plus its noise share;
 * when the cohort validates inputs, a noise share truncated at the round's bound B, the content s·x + e followed by
 * the blinding limbs, and the validity proof that goes with the masked input, bound to the device's own task digest.
 * `task`: the assignment's task as parsed when it was admitted. */

import { unhex } from "./bytes.js";
import { perDeviceStd, sampleNoise, sampleNoiseBounded } from "./dp/noise.js";
import { Assignment } from "./envelope.js";
import { TypedTask, kindOf } from "./kinds/registry.js";
import { ContributionRandomness } from "./randomness.js";
import { prove } from "./validity/proof.js";
import { blindLimbs } from "./validity/statement.js";

/** Smallest noise bound the device accepts, in standard deviations of its own noise share. */
export const MIN_BOUND_STDS = 6.0;

export async function maskedContent(a: Assignment, task: TypedTask, x: number[], draws: ContributionRandomness, taskDigest: Uint8Array = new Uint8Array(32)): Promise<[bigint[], Uint8Array | null]> {
  const noisy = a.noise !== null && a.noise.mechanism !== "none";
  if (a.validation === null) {
    if (!noisy || !a.noise) return [x.map(BigInt), null];
    const share = await sampleNoise(a.noise.mechanism, a.noise.scale, x.length, draws.noise);
    const s = BigInt(a.noise.encoding_scale);
    return [x.map((v, i) => BigInt(v) * s + BigInt(share[i])), null];
  }
  const base = kindOf(task).validity(task.task);
  if (base === null) throw new Error(`validation: ${a.kind} has no validity statement for this task`);
  const scale = noisy && a.noise ? a.noise.encoding_scale : 1;
  const bound = noisy ? a.validation.noise_bound : 0;
  let noise: number[] | null = null;
  if (noisy && a.noise) {
    const std = perDeviceStd(a.noise.mechanism, a.noise.scale);
    if (bound < MIN_BOUND_STDS * std) {
      throw new Error(`validation.noise_bound: ${bound} is below ${MIN_BOUND_STDS} standard deviations (${std.toPrecision(3)}) of this device's noise share; refusing to truncate the noise there`);
    }
    noise = await sampleNoiseBounded(a.noise.mechanism, a.noise.scale, x.length, draws.noise, bound);
  }
  const statement = base.withNoise(BigInt(scale), BigInt(bound));
  const context = { sessionId: unhex(String(a.secagg.session_id)), queryId: a.query_id, round: a.round, party: a.party_id, taskDigest };
  const xs = x.map(BigInt);
  const es = noise === null ? null : noise.map(BigInt);
  const [proof, blind] = await prove(statement, context, xs, es, draws.validity);
  const content = xs.map((v, i) => v * BigInt(scale) + (es ? es[i] : 0n));
  return [[...content, ...blindLimbs(blind).map(BigInt)], proof];
}
