/** The device's local store (device_sdk/store.py): named collections of JSON rows with the time each was added,
 * retention rules (newest `maxRows`, none older than `maxAgeS`), opt-out, SDK state (identity key, registration) and
 * the contribution ledger's rows. The store keeps its state in memory and writes every change through a backend
 * before the call returns: `MemoryBackend` (nothing kept), `IndexedDBBackend` (browsers), or the Node file backend
 * (`fa-device-sdk/node`). Every method is async and all of them run one at a time, so a transaction is atomic. The
 * store holds the device's clock (clock.ts), as in Python. */

import { Clock, SYSTEM_CLOCK } from "./clock.js";

export const ALL = "*";

export class StoreError extends Error {}

export interface Retention {
  maxAgeS: number | null;
  maxRows: number | null;
}

export interface Row {
  collection: string;
  value: unknown;
  createdAt: number;
}

export type Table = "rows" | "meta" | "retention" | "optedOut" | "contributions";
/** One durable change: `value` undefined deletes the key. */
export interface Op {
  table: Table;
  key: string;
  value?: unknown;
}

export type Snapshot = Record<Table, Record<string, unknown>>;

export interface StoreBackend {
  load(): Promise<Snapshot | null>;
  write(ops: Op[]): Promise<void>;
  close?(): Promise<void>;
}

export class MemoryBackend implements StoreBackend {
  async load(): Promise<Snapshot | null> {
    return null;
  }
  async write(): Promise<void> {}
}

const TABLES: Table[] = ["rows", "meta", "retention", "optedOut", "contributions"];

/** IndexedDB (browsers, extensions): one object store per table in database `name`. */
export class IndexedDBBackend implements StoreBackend {
  private db: Promise<IDBDatabase> | null = null;
  constructor(readonly name = "fa-device-sdk") {}

  private open(): Promise<IDBDatabase> {
    this.db ??= new Promise((resolve, reject) => {
      const idb = (globalThis as { indexedDB?: IDBFactory }).indexedDB;
      if (!idb) return reject(new StoreError("IndexedDB is not available here (in Node use the file store of fa-device-sdk/node)"));
      const req = idb.open(this.name, 1);
      req.onupgradeneeded = () => {
        for (const t of TABLES) if (!req.result.objectStoreNames.contains(t)) req.result.createObjectStore(t);
      };
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error ?? new StoreError(`cannot open IndexedDB ${this.name}`));
    });
    return this.db;
  }

  async load(): Promise<Snapshot> {
    const db = await this.open();
    const tx = db.transaction(TABLES, "readonly");
    const out = {} as Snapshot;
    await Promise.all(
      TABLES.map(
        (t) =>
          new Promise<void>((resolve, reject) => {
            const store = tx.objectStore(t);
            const keys = store.getAllKeys();
            const values = store.getAll();
            values.onsuccess = () => {
              out[t] = {};
              (keys.result as IDBValidKey[]).forEach((k, i) => (out[t][String(k)] = values.result[i]));
              resolve();
            };
            values.onerror = () => reject(values.error);
          }),
      ),
    );
    return out;
  }

  async write(ops: Op[]): Promise<void> {
    if (!ops.length) return;
    const db = await this.open();
    await new Promise<void>((resolve, reject) => {
      const tx = db.transaction([...new Set(ops.map((o) => o.table))], "readwrite");
      for (const op of ops) {
        const s = tx.objectStore(op.table);
        if (op.value === undefined) s.delete(op.key);
        else s.put(op.value, op.key);
      }
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error ?? new StoreError("IndexedDB transaction aborted"));
    });
  }

  async close(): Promise<void> {
    if (this.db) (await this.db).close();
  }
}

export interface Txn {
  readonly state: Snapshot;
  put(table: Table, key: string, value: unknown): void;
  del(table: Table, key: string): void;
}

function checkName(name: unknown): asserts name is string {
  if (typeof name !== "string" || !name || name.length > 128 || name === ALL) {
    throw new StoreError(`collection: must be a non-empty string of at most 128 characters (not '*'), got ${JSON.stringify(name)}`);
  }
}

function checkRetention(maxAgeS: unknown, maxRows: unknown): Retention {
  if (maxAgeS != null && !(typeof maxAgeS === "number" && Number.isFinite(maxAgeS) && maxAgeS > 0)) {
    throw new StoreError(`maxAgeS: must be a positive number of seconds or null, got ${JSON.stringify(maxAgeS)}`);
  }
  if (maxRows != null && !(typeof maxRows === "number" && Number.isInteger(maxRows) && maxRows >= 1)) {
    throw new StoreError(`maxRows: must be a positive integer or null, got ${JSON.stringify(maxRows)}`);
  }
  return { maxAgeS: (maxAgeS as number | null | undefined) ?? null, maxRows: (maxRows as number | null | undefined) ?? null };
}

function jsonSafe(v: unknown, depth = 0): boolean {
  if (depth > 64) return false;
  if (v === null || typeof v === "string" || typeof v === "boolean") return true;
  if (typeof v === "number") return Number.isFinite(v);
  if (Array.isArray(v)) return v.every((x) => jsonSafe(x, depth + 1));
  if (typeof v === "object") return Object.values(v as object).every((x) => jsonSafe(x, depth + 1));
  return false;
}

export class LocalStore {
  private state: Snapshot = { rows: {}, meta: {}, retention: {}, optedOut: {}, contributions: {} };
  private nextId = 1;
  private queue: Promise<unknown>;

  /** `clock`: where the store, its ledger and the DeviceClient built on it read the time and wait (default the system
   * clock; tests pass a `ManualClock` and advance it instead of sleeping). */
  constructor(readonly backend: StoreBackend = new MemoryBackend(), readonly clock: Clock = SYSTEM_CLOCK) {
    this.queue = backend.load().then((snap) => {
      if (snap) for (const t of TABLES) this.state[t] = snap[t] ?? {};
      for (const t of ["rows", "contributions"] as const) for (const k of Object.keys(this.state[t])) this.nextId = Math.max(this.nextId, Number(k) + 1);
    });
  }

  /** A store in IndexedDB database `name` (browsers and extensions). */
  static indexedDB(name = "fa-device-sdk", clock: Clock = SYSTEM_CLOCK): LocalStore {
    return new LocalStore(new IndexedDBBackend(name), clock);
  }

  /** Resolves once the backend's data is loaded (every method waits for it anyway). */
  ready(): Promise<void> {
    return this.queue.then(() => undefined);
  }

  /** Run `fn` alone, then write its changes durably; the changes are undone in memory when it throws. */
  transaction<T>(fn: (t: Txn) => T | Promise<T>): Promise<T> {
    const run = this.queue.then(async () => {
      const ops: Op[] = [];
      const undo: [Table, string, unknown][] = [];
      const t: Txn = {
        state: this.state,
        put: (table, key, value) => {
          undo.push([table, key, this.state[table][key]]);
          this.state[table][key] = value;
          ops.push({ table, key, value });
        },
        del: (table, key) => {
          if (!(key in this.state[table])) return;
          undo.push([table, key, this.state[table][key]]);
          delete this.state[table][key];
          ops.push({ table, key });
        },
      };
      try {
        const out = await fn(t);
        await this.backend.write(ops);
        return out;
      } catch (exc) {
        for (const [table, key, value] of undo.reverse()) {
          if (value === undefined) delete this.state[table][key];
          else this.state[table][key] = value;
        }
        throw exc;
      }
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  newId(): string {
    return String(this.nextId++);
  }

  // -- rows ---------------------------------------------------------------------------------------

  add(collection: string, value: unknown, opts: { at?: number } = {}): Promise<void> {
    return this.addMany(collection, [value], opts);
  }

  /** Add rows (dropped when the collection is opted out); `at`: when they happened, unix seconds (default now). */
  addMany(collection: string, values: Iterable<unknown>, opts: { at?: number } = {}): Promise<void> {
    checkName(collection);
    const stamp = opts.at ?? this.clock.now();
    if (!Number.isFinite(stamp)) throw new StoreError(`at: must be a finite unix time, got ${opts.at}`);
    const encoded = [...values].map((v) => {
      if (!jsonSafe(v)) throw new StoreError(`${collection}: row is not JSON-serialisable (non-finite numbers, functions or cycles)`);
      return JSON.parse(JSON.stringify(v)) as unknown;
    });
    return this.transaction((t) => {
      if (this.isOptedOutNow(collection)) return;
      for (const value of encoded) t.put("rows", this.newId(), { collection, value, createdAt: stamp } satisfies Row);
      this.prune(t, collection, this.clock.now());
    });
  }

  /** The collection's rows in insertion order, after its retention is applied. */
  rows(collection: string): Promise<unknown[]> {
    checkName(collection);
    return this.transaction((t) => {
      this.prune(t, collection, this.clock.now());
      return this.rowsOf(collection).map(([, r]) => r.value);
    });
  }

  private rowsOf(collection: string): [string, Row][] {
    return Object.entries(this.state.rows as Record<string, Row>)
      .filter(([, r]) => r.collection === collection)
      .sort((a, b) => Number(a[0]) - Number(b[0]));
  }

  count(collection: string): Promise<number> {
    checkName(collection);
    return this.transaction(() => this.rowsOf(collection).length);
  }

  collections(): Promise<string[]> {
    return this.transaction(() => [...new Set(Object.values(this.state.rows as Record<string, Row>).map((r) => r.collection))].sort());
  }

  clear(collection: string): Promise<void> {
    checkName(collection);
    return this.transaction((t) => {
      for (const [id] of this.rowsOf(collection)) t.del("rows", id);
    });
  }

  // -- retention ----------------------------------------------------------------------------------

  setRetention(collection: string, rule: { maxAgeS?: number | null; maxRows?: number | null }): Promise<void> {
    checkName(collection);
    return this.setRule(collection, checkRetention(rule.maxAgeS, rule.maxRows));
  }

  setDefaultRetention(rule: { maxAgeS?: number | null; maxRows?: number | null }): Promise<void> {
    return this.setRule(ALL, checkRetention(rule.maxAgeS, rule.maxRows));
  }

  private setRule(key: string, rule: Retention): Promise<void> {
    return this.transaction((t) => {
      if (rule.maxAgeS === null && rule.maxRows === null) t.del("retention", key);
      else t.put("retention", key, rule);
      for (const c of key === ALL ? this.allCollections() : [key]) this.prune(t, c, this.clock.now());
    });
  }

  retention(collection: string): Promise<Retention> {
    checkName(collection);
    return this.transaction(() => this.rule(collection));
  }

  private rule(collection: string): Retention {
    const r = (this.state.retention[collection] ?? this.state.retention[ALL]) as Retention | undefined;
    return r ?? { maxAgeS: null, maxRows: null };
  }

  private allCollections(): string[] {
    return [...new Set(Object.values(this.state.rows as Record<string, Row>).map((r) => r.collection))];
  }

  /** Delete every row past its collection's retention; the number deleted. */
  applyRetention(at?: number): Promise<number> {
    return this.transaction((t) => this.allCollections().reduce((n, c) => n + this.prune(t, c, at ?? this.clock.now()), 0));
  }

  private prune(t: Txn, collection: string, at: number): number {
    const rule = this.rule(collection);
    let rows = this.rowsOf(collection);
    let deleted = 0;
    if (rule.maxAgeS !== null) {
      for (const [id, r] of rows) if (r.createdAt < at - rule.maxAgeS) (t.del("rows", id), deleted++);
      rows = this.rowsOf(collection);
    }
    if (rule.maxRows !== null && rows.length > rule.maxRows) {
      for (const [id] of rows.slice(0, rows.length - rule.maxRows)) (t.del("rows", id), deleted++);
    }
    return deleted;
  }

  // -- opt-out ------------------------------------------------------------------------------------

  /** Delete the collection's rows and drop whatever is added to it later; the number of rows deleted. */
  optOut(collection: string): Promise<number> {
    checkName(collection);
    return this.transaction((t) => {
      t.put("optedOut", collection, this.clock.now());
      const rows = this.rowsOf(collection);
      for (const [id] of rows) t.del("rows", id);
      return rows.length;
    });
  }

  /** Delete every collection and drop everything added later; with `deleteHistory` the contribution log and the
   * device's identity go too. */
  optOutAll(opts: { deleteHistory?: boolean } = {}): Promise<number> {
    return this.transaction((t) => {
      t.put("optedOut", ALL, this.clock.now());
      const ids = Object.keys(this.state.rows);
      for (const id of ids) t.del("rows", id);
      if (opts.deleteHistory) {
        for (const k of Object.keys(this.state.meta)) t.del("meta", k);
        for (const k of Object.keys(this.state.contributions)) t.del("contributions", k);
      }
      return ids.length;
    });
  }

  optIn(collection: string | null = null): Promise<void> {
    if (collection !== null) checkName(collection);
    return this.transaction((t) => t.del("optedOut", collection ?? ALL));
  }

  isOptedOut(collection: string | null = null): Promise<boolean> {
    return this.transaction(() => (collection === null ? ALL in this.state.optedOut : this.isOptedOutNow(collection)));
  }

  private isOptedOutNow(collection: string): boolean {
    return collection in this.state.optedOut || ALL in this.state.optedOut;
  }

  optedOut(): Promise<string[]> {
    return this.transaction(() => Object.keys(this.state.optedOut).sort());
  }

  // -- SDK state ----------------------------------------------------------------------------------

  getMeta(key: string): Promise<string | null> {
    return this.transaction(() => (this.state.meta[key] as string | undefined) ?? null);
  }

  setMeta(key: string, value: string): Promise<void> {
    return this.transaction((t) => t.put("meta", key, value));
  }

  deleteMeta(key: string): Promise<void> {
    return this.transaction((t) => t.del("meta", key));
  }

  async close(): Promise<void> {
    await this.queue;
    await this.backend.close?.();
  }
}
