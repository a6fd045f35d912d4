/** Node-only parts of the SDK: a file-backed store (an append-only log of JSON lines, compacted on open), so a Node
 * device keeps its identity, data and ledger across restarts. Import from "fa-device-sdk/node". */

import { appendFile, mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

import { Clock, SYSTEM_CLOCK } from "./clock.js";
import { LocalStore, Op, Snapshot, StoreBackend } from "./store.js";

export class FileBackend implements StoreBackend {
  constructor(readonly path: string) {}

  async load(): Promise<Snapshot | null> {
    let text: string;
    try {
      text = await readFile(this.path, "utf8");
    } catch (exc) {
      if ((exc as NodeJS.ErrnoException).code === "ENOENT") return null;
      throw exc;
    }
    const snap: Snapshot = { rows: {}, meta: {}, retention: {}, optedOut: {}, contributions: {} };
    const lines = text.split("\n");
    for (const [i, line] of lines.entries()) {
      if (!line) continue;
      let ops: Op[];
      try {
        ops = JSON.parse(line) as Op[];
      } catch {
        if (i === lines.length - 1 || lines.slice(i + 1).every((l) => !l)) break; // a batch torn by a crash: never acknowledged
        throw new Error(`${this.path}: line ${i + 1} is not a JSON batch of store changes`);
      }
      for (const op of ops) {
        if (op.value === undefined) delete snap[op.table][op.key];
        else snap[op.table][op.key] = op.value;
      }
    }
    // compact: one batch holding the live state
    const live: Op[] = Object.entries(snap).flatMap(([table, rows]) => Object.entries(rows).map(([key, value]) => ({ table, key, value }) as Op));
    await mkdir(dirname(this.path), { recursive: true });
    await writeFile(this.path + ".tmp", live.length ? JSON.stringify(live) + "\n" : "");
    await rename(this.path + ".tmp", this.path);
    return snap;
  }

  async write(ops: Op[]): Promise<void> {
    if (!ops.length) return;
    await mkdir(dirname(this.path), { recursive: true });
    await appendFile(this.path, JSON.stringify(ops) + "\n");
  }
}

/** A store kept in the file at `path` (created when missing), reading the time from `clock`. */
export function fileStore(path: string, clock: Clock = SYSTEM_CLOCK): LocalStore {
  return new LocalStore(new FileBackend(path), clock);
}

export * from "./index.js";
