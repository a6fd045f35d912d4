/** Neighbour graphs (secagg/graph.py): the complete graph, or the SecAgg+ Harary graph H(k, n) on a ring whose order
 * is a Fisher–Yates shuffle driven by AES-CTR words keyed from the graph seed — `graphSeed(binding, members root)`: the
 * session binding and the members root over every member's party, identity and fresh advertised keys as phase 0 closed
 * (crypto.ts `membersRoot`), so the server can neither show different parties different graphs nor pick the ring
 * order (docs/secagg.md, "A graph the server cannot steer"). How degree and threshold are chosen: floor.ts. */

import { concat, utf8 } from "../bytes.js";
import { aesKey, ctrKeystream, hkdf } from "../webcrypto.js";

export const DOMAIN = utf8("fa-secagg/v3/");

/** The neighbour graph's seed: HKDF(key = members root, info = DOMAIN ‖ "graph/" ‖ binding) — the session binding and
 * the members root (no value the server picks alone). */
export function graphSeed(bind: Uint8Array, root: Uint8Array): Promise<Uint8Array> {
  return hkdf(root, concat(DOMAIN, utf8("graph/"), bind));
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
