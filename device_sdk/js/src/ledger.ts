/** The device's own privacy ledger and transparency log (device_sdk/ledger.py): one row per contribution, in the store.
 * Reserved (pending) when the device accepts an assignment, before it reads any data; `sent` when the masked vector
 * leaves; `finished`/`abandoned` when the cohort ends; deleted when nothing was sent. A query's ε is charged once for
 * the device's first contribution, and once more each time it would contribute to a round more often than to any
 * round before.
 *
 * The log also keeps the cohorts the device refused because the server could not be checked (`refused`: status
 * `refused`, nothing sent, nothing charged, "REASON: message" in `detail`): rows that never count toward spending,
 * participation or a query's history.
 *
 * A row whose task the device checked against the public transparency log (docs/transparency.md) keeps the signed
 * head it checked under (`log_size`, `log_root` in base64) and the task entry's `log_index`; null for rows without a
 * log proof and for rows stored before these fields existed. */

import { ALL, LocalStore, Txn } from "./store.js";

export const DAY_S = 86_400;
export const LOG_KEEP_S = 400 * DAY_S;
export const LOG_KEEP_ROWS = 20_000;

export type Status = "pending" | "sent" | "finished" | "abandoned" | "refused";

/** One contribution as the device's user may see it (the transparency log). */
export interface ContributionRecord {
  id: number;
  query_id: string;
  round: number;
  cohort_id: string;
  kind: string;
  source: string;
  accepted_at: number;
  sent_at: number | null;
  ended_at: number | null;
  status: Status;
  contributed: boolean | null;
  mechanism: string;
  epsilon: number | null;
  delta: number | null;
  query_epsilon: number | null;
  query_delta: number | null;
  query_privacy: Record<string, unknown>;
  noise_scale: number | null;
  noise_std: number | null;
  encoding_scale: number;
  proofs: boolean;
  cohort_size: number;
  min_survivors: number | null;
  detail: string;
  /** The size of the log head the task was checked under (null: no log proof). */
  log_size: number | null;
  /** That head's root, base64. */
  log_root: string | null;
  /** The index of the task's entry in the log. */
  log_index: number | null;
}

/** Where the task of a contribution is in the public transparency log. */
export interface LogPosition {
  log_size: number;
  log_root: string;
  log_index: number;
}

const NO_LOG = { log_size: null, log_root: null, log_index: null };

/** What the device knows of a contribution when it accepts the assignment. */
export type NewRecord = Omit<ContributionRecord, "id" | "status" | "sent_at" | "ended_at" | "contributed" | "detail" | keyof LogPosition>;

export interface QueryHistory {
  privacy: Record<string, unknown> | null;
  perRound: Map<number, number>;
  layersCharged: number;
  weights: Map<number, number>;
}

export class ContributionLedger {
  constructor(readonly store: LocalStore) {}

  private all(): Promise<ContributionRecord[]> {
    return this.store.transaction((t) => rowsOf(t));
  }

  async history(queryId: string): Promise<QueryHistory> {
    return historyOf(await this.all(), queryId);
  }

  /** (ε, δ, contributions) charged by rows accepted at or after `since`. */
  async spentSince(since: number): Promise<[number, number, number]> {
    return spentOf(await this.all(), since);
  }

  /** Decide on an assignment and reserve its row in one store transaction, so two cohorts started at once cannot
   * both pass a daily limit: `decide` gets the query's history, the (ε, contributions) charged since `since` and
   * whether `source` is opted out; a Decision's row (`fields` of it) is reserved and its id returned with it. A
   * refusal for which `kept` gives a row (its fields, the reason and the detail) leaves that row in the transparency
   * log as `refused`, charging nothing (evidence of a server below the device's floor), in the same transaction. */
  admit<D extends object, R>(
    queryId: string, source: string, since: number,
    decide: (history: QueryHistory, spentEpsilon: number, contributions: number, optedOut: boolean) => D | R,
    isDecision: (v: D | R) => v is D,
    fields: (d: D) => NewRecord,
    kept: (r: R) => { fields: NewRecord; reason: string; detail: string } | null = () => null,
  ): Promise<[D, number] | R> {
    return this.store.transaction((t) => {
      const rows = rowsOf(t);
      const [spent, , count] = spentOf(rows, since);
      const optedOut = source in t.state.optedOut || ALL in t.state.optedOut;
      const verdict = decide(historyOf(rows, queryId), spent, count, optedOut);
      if (!isDecision(verdict)) {
        const row = kept(verdict);
        if (row !== null) {
          const id = this.put(t, row.fields);
          const r = t.state.contributions[String(id)] as ContributionRecord;
          t.put("contributions", String(id), refusedRow(r, row.reason, row.detail, this.store.clock.now()));
        }
        return verdict;
      }
      return [verdict, this.put(t, fields(verdict))] as [D, number];
    });
  }

  async oldestSince(since: number, charging = false): Promise<number | null> {
    const times = counted(await this.all()).filter((r) => r.accepted_at >= since && (!charging || (r.epsilon ?? 0) > 0)).map((r) => r.accepted_at);
    return times.length ? Math.min(...times) : null;
  }

  /** The transparency log, newest first. */
  async records(since: number | null = null, limit = 1000): Promise<ContributionRecord[]> {
    return (await this.all()).filter((r) => since === null || r.accepted_at >= since).reverse().slice(0, limit);
  }

  async record(id: number): Promise<ContributionRecord | null> {
    return (await this.all()).find((r) => r.id === id) ?? null;
  }

  reserve(fields: NewRecord): Promise<number> {
    return this.store.transaction((t) => this.put(t, fields));
  }

  private put(t: Txn, fields: NewRecord): number {
    const id = Number(this.store.newId());
    const row: ContributionRecord = { ...fields, id, status: "pending", sent_at: null, ended_at: null, contributed: null, detail: "", ...NO_LOG };
    t.put("contributions", String(id), row);
    return id;
  }

  private update(id: number, change: (r: ContributionRecord) => ContributionRecord | null): Promise<void> {
    return this.store.transaction((t) => {
      const r = t.state.contributions[String(id)] as ContributionRecord | undefined;
      if (!r) return;
      const next = change({ ...r });
      if (next === null) t.del("contributions", String(id));
      else t.put("contributions", String(id), next);
    });
  }

  /** The task was found in the log: keep where (the head's size and root, the entry's index) with the row. */
  setLog(id: number, at: LogPosition): Promise<void> {
    return this.update(id, (r) => ({ ...r, log_size: at.log_size, log_root: at.log_root, log_index: at.log_index }));
  }

  markSent(id: number, at = this.store.clock.now()): Promise<void> {
    return this.update(id, (r) => (r.status === "pending" ? { ...r, status: "sent", sent_at: at } : r));
  }

  finish(id: number, status: Status, contributed: boolean | null, detail = ""): Promise<void> {
    return this.update(id, (r) => ({ ...r, status, contributed, ended_at: this.store.clock.now(), detail: detail.slice(0, 500) }));
  }

  /** Nothing was sent because the device refused the cohort after checking it: the row stays in the transparency log
   * with status `refused`, charging nothing. */
  refused(id: number, reason: string, detail: string, at = this.store.clock.now()): Promise<void> {
    return this.update(id, (r) => (r.status === "pending" ? refusedRow(r, reason, detail, at) : r));
  }

  release(id: number): Promise<void> {
    return this.update(id, (r) => (r.status === "pending" ? null : r));
  }

  /** Delete log rows older than `keepS` and beyond the newest `keepRows` (never within the last day). */
  prune(at = this.store.clock.now(), keepS = LOG_KEEP_S, keepRows = LOG_KEEP_ROWS): Promise<number> {
    return this.store.transaction((t) => {
      const rows = Object.values(t.state.contributions as Record<string, ContributionRecord>).sort((a, b) => b.id - a.id);
      const cutoff = Math.min(at - keepS, at - DAY_S);
      let n = 0;
      rows.forEach((r, i) => {
        if (r.accepted_at < cutoff || (i >= keepRows && r.accepted_at < at - DAY_S)) {
          t.del("contributions", String(r.id));
          n++;
        }
      });
      return n;
    });
  }
}

function refusedRow(r: ContributionRecord, reason: string, detail: string, at: number): ContributionRecord {
  return { ...r, status: "refused", epsilon: null, delta: null, ended_at: at, detail: `${reason}: ${detail}`.slice(0, 500) };
}

function rowsOf(t: Txn): ContributionRecord[] {
  // rows stored before the log fields existed read as rows without a log proof
  return Object.values(t.state.contributions as Record<string, ContributionRecord>).sort((a, b) => a.id - b.id).map((r) => ({ ...NO_LOG, ...r }));
}

/** The rows that count toward spending, participation and query history: all but the refused cohorts. */
const counted = (all: ContributionRecord[]): ContributionRecord[] => all.filter((r) => r.status !== "refused");

function historyOf(all: ContributionRecord[], queryId: string): QueryHistory {
  const rows = counted(all).filter((r) => r.query_id === queryId);
  const perRound = new Map<number, number>();
  const weights = new Map<number, number>();
  for (const r of rows) {
    perRound.set(r.round, (perRound.get(r.round) ?? 0) + 1);
    const w = r.query_privacy.weight;
    weights.set(r.round, Math.max(weights.get(r.round) ?? 0, typeof w === "number" ? w : 1));
  }
  return { privacy: rows.length ? rows[0].query_privacy : null, perRound, layersCharged: rows.filter((r) => r.epsilon).length, weights };
}

function spentOf(all: ContributionRecord[], since: number): [number, number, number] {
  const rows = counted(all).filter((r) => r.accepted_at >= since);
  return [rows.reduce((a, r) => a + (r.epsilon ?? 0), 0), rows.reduce((a, r) => a + (r.delta ?? 0), 0), rows.length];
}
