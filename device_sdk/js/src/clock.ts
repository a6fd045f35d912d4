/** The one injectable clock of the device SDK (fa_common/clock.py's `Clock` in Python): wall time for what is stored or
 * sent, a monotonic clock for durations, and a sleep that a stop cuts short. Everything in the SDK that reads the time
 * or waits goes through the store's clock (`LocalStore`'s, the system's by default): the client's timestamps,
 * back-off, pauses and request timeouts, the store's retention and the ledger's rows. `ManualClock` is the fake for
 * tests: its time moves only on `advance`, which wakes the sleepers it reaches. */

export interface Clock {
  /** Wall-clock seconds since the epoch (timestamps that are stored or sent). */
  now(): number;
  /** Seconds on a clock that never goes back (durations). */
  monotonic(): number;
  /** Resolves after `seconds` of this clock's time, or at once when `signal` aborts (never rejects). */
  sleep(seconds: number, signal?: AbortSignal): Promise<void>;
}

/** The real clocks: `Date.now`, `performance.now` and `setTimeout`. */
export const SYSTEM_CLOCK: Clock = {
  now: () => Date.now() / 1000,
  monotonic: () => performance.now() / 1000,
  sleep: (seconds, signal) =>
    new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const timer = setTimeout(done, Math.max(0, seconds) * 1000);
      function done() {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        resolve();
      }
      signal?.addEventListener("abort", done, { once: true });
    }),
};

/** A signal that aborts after `seconds` of `clock`'s time or when `signal` aborts; `clear()` ends the wait (call it when
 * the guarded work is done). */
export function deadline(clock: Clock, seconds: number, signal?: AbortSignal): { signal: AbortSignal; clear(): void } {
  const out = new AbortController();
  const done = new AbortController();
  const stop = () => out.abort();
  signal?.addEventListener("abort", stop, { once: true });
  if (signal?.aborted) out.abort();
  void clock.sleep(seconds, done.signal).then(() => {
    if (!done.signal.aborted) out.abort();
  });
  return {
    signal: out.signal,
    clear() {
      done.abort();
      signal?.removeEventListener("abort", stop);
    },
  };
}

interface Sleeper {
  at: number;
  seconds: number;
  wake: () => void;
}

/** A fake clock for tests: starts at `start` (wall) and 0 (monotonic) and moves only on `advance`. A sleep waits until
 * the clock has been advanced to its deadline; `sleeping()` resolves once some sleep is waiting (so a test advances the
 * clock when the code under test waits, instead of sleeping itself). */
export class ManualClock implements Clock {
  private wall: number;
  private mono = 0;
  private sleepers: Sleeper[] = [];
  private watchers: (() => void)[] = [];

  constructor(start = 1_700_000_000) {
    this.wall = start;
  }

  now(): number {
    return this.wall;
  }

  monotonic(): number {
    return this.mono;
  }

  sleep(seconds: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const sleeper: Sleeper = { at: this.mono + Math.max(0, seconds), seconds, wake: () => undefined };
      const aborted = () => {
        this.sleepers = this.sleepers.filter((s) => s !== sleeper);
        resolve();
      };
      sleeper.wake = () => {
        signal?.removeEventListener("abort", aborted);
        resolve();
      };
      signal?.addEventListener("abort", aborted, { once: true });
      this.sleepers.push(sleeper);
      const watchers = this.watchers;
      this.watchers = [];
      for (const w of watchers) w();
    });
  }

  /** The durations of the sleeps now waiting, in the order they began. */
  get waiting(): number[] {
    return this.sleepers.map((s) => s.seconds);
  }

  /** Resolves once at least `count` sleeps are waiting. */
  async sleeping(count = 1): Promise<void> {
    while (this.sleepers.length < count) await new Promise<void>((r) => this.watchers.push(r));
  }

  /** Move both clocks forward and wake every sleeper whose deadline is reached. */
  advance(seconds: number): void {
    if (!(seconds >= 0)) throw new RangeError("a clock cannot go back: seconds must be >= 0");
    this.wall += seconds;
    this.mono += seconds;
    const due = this.sleepers.filter((s) => s.at <= this.mono);
    this.sleepers = this.sleepers.filter((s) => s.at > this.mono);
    for (const s of due) s.wake();
  }
}
