/** Neighbour graphs (secagg/graph.py): the complete graph, or the SecAgg+ Harary graph H(k, n) on a ring whose order
 * is a Fisher–Yates shuffle driven by AES-CTR words keyed from the session id. */

import { concat, utf8 } from "../bytes.js";
import { aesKey, ctrKeystream, hkdf } from "../webcrypto.js";

export const DOMAIN = utf8("fa-secagg/v2/");
export const COMPLETE_MAX = 100;
const DEGREE_FACTOR = 3;

export function sparseDegree(n: number): number {
  if (n <= 2) return n - 1;
  const half = Math.ceil(DEGREE_FACTOR * Math.log2(n));
  return Math.min(n - 1, 2 * half);
}

export function graphSeed(sessionId: Uint8Array): Promise<Uint8Array> {
  return hkdf(sessionId, concat(DOMAIN, utf8("graph")));
}

/** `count` uint64 words (little-endian) of the AES-256-CTR stream keyed HKDF(seed, DOMAIN ‖ "prg-uint64"). */
export async function prgUint64(seed: Uint8Array, count: number): Promise<bigint[]> {
  const key = await hkdf(seed, concat(DOMAIN, utf8("prg-uint64")));
  const ks = await ctrKeystream(await aesKey(key, "AES-CTR"), 0n, count * 8);
  const view = new DataView(ks.buffer, ks.byteOffset, ks.byteLength);
  return Array.from({ length: count }, (_, i) => view.getBigUint64(8 * i, true));
}

export class NeighbourGraph {
  readonly complete: boolean;
  readonly degree: number;
  private order: number[] | null = null;
  private position: number[] | null = null;

  private constructor(readonly n: number, degree: number | null) {
    this.complete = degree === null || degree >= n - 1;
    this.degree = this.complete ? n - 1 : (degree as number);
  }

  static async create(n: number, degree: number | null, seed: Uint8Array): Promise<NeighbourGraph> {
    const g = new NeighbourGraph(n, degree);
    if (!g.complete) {
      const words = await prgUint64(seed, n);
      const order = Array.from({ length: n }, (_, i) => i + 1);
      for (let i = n - 1; i > 0; i--) {
        const j = Number(words[i] % BigInt(i + 1));
        [order[i], order[j]] = [order[j], order[i]];
      }
      const position = new Array<number>(n + 1).fill(0);
      order.forEach((p, slot) => (position[p] = slot));
      g.order = order;
      g.position = position;
    }
    return g;
  }

  /** The ring order (party at each slot); the complete graph has none. */
  ringOrder(): number[] | null {
    return this.order ? [...this.order] : null;
  }

  /** Sorted closed neighbourhood of party u. */
  closed(u: number): number[] {
    if (this.complete) return Array.from({ length: this.n }, (_, i) => i + 1);
    const order = this.order as number[];
    const pos = (this.position as number[])[u];
    const half = this.degree / 2;
    const out: number[] = [];
    for (let d = -half; d <= half; d++) out.push(order[(((pos + d) % this.n) + this.n) % this.n]);
    return out.sort((a, b) => a - b);
  }
}
