/** Public parameters of one secure-aggregation session (secagg/config.py), with the same checks.
 *
 * Thresholds are per closed neighbourhood of size m (m = n for the complete graph, k + 1 for SecAgg+). The degree
 * defaults to `floor.plan(n)`: the least degree at or above the safety floor a device computes (corrupt fraction ⅓,
 * 2^-40 with 40 bits of grinding) whose safe threshold survives the default dropout (the complete graph when no sparse
 * degree does). The threshold defaults to the floor's least safe threshold at that degree in the active model, and to
 * ⌊m/2⌋ + 1 in the semi-honest model (a benchmark-only variant: devices refuse it). */

import { unhex } from "../bytes.js";
import { ConfigError } from "./errors.js";
import * as floor from "./floor.js";
import { NeighbourGraph } from "./graph.js";

export const SESSION_ID_BYTES = 16;
export const MAX_BITS = 62;
export const MAX_PARTIES = 1 << 20;
export const MAX_DIM = 1 << 26;

export type ThreatModel = "semi_honest" | "active";
export type GraphKind = "auto" | "complete" | "sparse";
/** How the neighbour graph is seeded: `graphSeed(binding, members root)` (secagg/config.py GRAPH_SEED_RULE). */
export const GRAPH_SEED_RULE = "members_root/v1";

/** What the transparency log's task entry records of a cohort (secagg/config.py `public_summary`). */
export interface PublicSummary {
  n: number;
  degree: number;
  threshold: number;
  threat_model: ThreatModel;
  graph_seed: string;
}

export interface SecAggConfigDict {
  session_id: string;
  n: number;
  dim: number;
  bits: number;
  graph?: GraphKind;
  threat_model?: ThreatModel;
  threshold?: number | null;
  min_survivors?: number | null;
  degree?: number | null;
  max_input?: number | null;
}

const isInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v);
const FIELDS = new Set(["session_id", "n", "dim", "bits", "graph", "threat_model", "threshold", "min_survivors", "degree", "max_input"]);

export class SecAggConfig {
  readonly sessionId: Uint8Array;
  readonly n: number;
  readonly dim: number;
  readonly bits: number;
  readonly graph: GraphKind;
  readonly threatModel: ThreatModel;
  readonly threshold: number | null;
  readonly minSurvivors: number | null;
  readonly degree: number | null;
  readonly maxInput: number | null;
  private degreeCache: number | null = null;

  constructor(d: SecAggConfigDict) {
    for (const k of Object.keys(d)) if (!FIELDS.has(k)) throw new ConfigError(`invalid secagg config: unexpected field ${k}`);
    let sid: Uint8Array;
    try {
      sid = unhex(String(d.session_id));
    } catch {
      throw new ConfigError("invalid secagg config: session_id is not hex");
    }
    if (sid.length !== SESSION_ID_BYTES) throw new ConfigError(`session_id: must be ${SESSION_ID_BYTES} bytes`);
    if (!isInt(d.n) || d.n < 2 || d.n > MAX_PARTIES) throw new ConfigError(`n: must be an integer between 2 and ${MAX_PARTIES}, got ${d.n}`);
    if (!isInt(d.dim) || d.dim < 1 || d.dim > MAX_DIM) throw new ConfigError(`dim: must be an integer between 1 and ${MAX_DIM}, got ${d.dim}`);
    if (!isInt(d.bits) || d.bits < 1 || d.bits > MAX_BITS) throw new ConfigError(`bits: must be an integer between 1 and ${MAX_BITS}, got ${d.bits}`);
    const graph = d.graph ?? "auto";
    if (!["auto", "complete", "sparse"].includes(graph)) throw new ConfigError(`graph: must be auto, complete or sparse, got ${graph}`);
    const tm = d.threat_model ?? "semi_honest";
    if (!["semi_honest", "active"].includes(tm)) throw new ConfigError(`threat_model: must be semi_honest or active, got ${tm}`);
    for (const name of ["threshold", "min_survivors", "degree", "max_input"] as const) {
      const v = d[name];
      if (v !== undefined && v !== null && !isInt(v)) throw new ConfigError(`${name}: must be an integer or null, got ${v}`);
    }
    if (d.degree != null && (d.degree < 2 || d.degree % 2)) throw new ConfigError(`degree: must be an even number ≥ 2, got ${d.degree}`);
    this.sessionId = sid;
    this.n = d.n;
    this.dim = d.dim;
    this.bits = d.bits;
    this.graph = graph;
    this.threatModel = tm;
    this.threshold = d.threshold ?? null;
    this.minSurvivors = d.min_survivors ?? null;
    this.degree = d.degree ?? null;
    this.maxInput = d.max_input ?? null;
    const m = this.neighbourhoodSize;
    const t = this.shareThreshold;
    if (!(Math.floor(m / 2) < t && t <= m)) {
      throw new ConfigError(`threshold: must be above half the neighbourhood size (${m}) and at most ${m}, got ${t}`);
    }
    if (!(this.survivorThreshold >= 1 && this.survivorThreshold <= this.n)) {
      throw new ConfigError(`min_survivors: must be between 1 and n=${this.n}, got ${this.minSurvivors}`);
    }
    if (this.maxInput !== null && BigInt(this.n) * BigInt(this.maxInput) >= 1n << BigInt(this.bits)) {
      throw new ConfigError(`bits: ${this.n} parties × max_input ${this.maxInput} can wrap modulo 2^${this.bits}`);
    }
  }

  static fromDict(d: unknown): SecAggConfig {
    if (typeof d !== "object" || d === null || Array.isArray(d)) throw new ConfigError("invalid secagg config: not an object");
    return new SecAggConfig(d as SecAggConfigDict);
  }

  get usesCompleteGraph(): boolean {
    return this.resolvedDegree >= this.n - 1;
  }

  get resolvedDegree(): number {
    if (this.degreeCache === null) {
      if (this.graph === "complete") this.degreeCache = this.n - 1;
      else if (this.degree !== null) this.degreeCache = Math.min(this.n - 1, this.degree);
      else this.degreeCache = floor.plan(this.n).degree;
    }
    return this.degreeCache;
  }

  get neighbourhoodSize(): number {
    return this.resolvedDegree + 1;
  }

  get shareThreshold(): number {
    if (this.threshold !== null) return this.threshold;
    const m = this.neighbourhoodSize;
    if (this.threatModel === "active") return floor.thresholdFloor(this.n, this.resolvedDegree) ?? m;
    return Math.floor(m / 2) + 1;
  }

  get survivorThreshold(): number {
    return this.minSurvivors ?? this.shareThreshold;
  }

  get active(): boolean {
    return this.threatModel === "active";
  }

  /** The graph drawn from `seed` (`graphSeed(binding, members root)`: known once phase 0 closed). */
  neighbourGraph(seed: Uint8Array): Promise<NeighbourGraph> {
    return NeighbourGraph.create(this.n, this.usesCompleteGraph ? null : this.resolvedDegree, seed);
  }

  /** What the transparency log's task entry records of the cohort: n, the resolved degree and threshold, the threat
   * model and how the graph is seeded; a device checks it against its own config. */
  publicSummary(): PublicSummary {
    return { n: this.n, degree: this.resolvedDegree, threshold: this.shareThreshold, threat_model: this.threatModel, graph_seed: GRAPH_SEED_RULE };
  }
}
