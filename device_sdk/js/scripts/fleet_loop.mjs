// The device loop shared by the Node fleet (fleet.mjs) and the browser fleet's pages (browser_fleet.mjs): each device
// checks in until stopped, counting its outcomes and the seconds each secagg phase's computation took. Simulated drops
// come from a small seeded PRNG (mulberry32): they decide only which simulated device stops answering, never a key,
// mask or noise draw (those come from the SDK's OS entropy). Plain JavaScript without imports, so a page loads it
// as it is.

/** A seeded PRNG in [0, 1) for the simulation's choices only. */
export function mulberry32(seed) {
  let state = seed >>> 0 || 1;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The DeviceClient `hooks.dropout`: with probability `p` per cohort, the phase before which the device goes silent. */
export function dropSchedule(p, rand) {
  return (a) => {
    if (p <= 0 || rand() >= p) return null;
    const phases = a.threat_model === "active" ? [0, 1, 2, 3, 4] : [0, 1, 2, 4];
    return phases[Math.floor(rand() * phases.length)];
  };
}

const pause = (s, signal) =>
  new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, s * 1000);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });

/** One simulated device: `timings` collects onPhaseTiming's figures (pass `device.onTiming` as the client's
 * `hooks.onPhaseTiming`). */
export class FleetDevice {
  constructor(index) {
    this.index = index;
    this.deviceId = null;
    this.outcomes = {};
    this.phases = {};
    this.errors = [];
    this.onTiming = (phase, seconds) => (this.phases[phase] ??= []).push(seconds);
  }

  count(status) {
    this.outcomes[status] = (this.outcomes[status] ?? 0) + 1;
  }

  /** Check in until `signal` aborts; errors back off with full jitter (as DeviceClient.runForever does). */
  async run(client, signal, startDelayS = 0) {
    await pause(startDelayS, signal);
    let failures = 0;
    while (!signal.aborted) {
      try {
        const out = await client.runOnce(signal);
        failures = 0;
        this.count(out.status);
        if (out.status === "idle" || out.status === "paused") await pause(out.retryAfter * (1 + 0.1 * Math.random()), signal);
        else if (out.status === "dropped") await pause(2, signal);
      } catch (exc) {
        if (signal.aborted) break;
        this.count("error");
        if (this.errors.length < 5) this.errors.push(String(exc?.message ?? exc).slice(0, 300));
        failures++;
        await pause(Math.random() * Math.min(30, 0.5 * 2 ** failures), signal);
      }
    }
  }

  report() {
    return { device_id: this.deviceId, outcomes: this.outcomes, phase_seconds: this.phases, errors: this.errors };
  }
}

/** The fleet's JSON summary: outcome counts over every device, and per phase the count, mean, median and max seconds. */
export function summarize(reports) {
  const outcomes = {};
  const per = {};
  for (const r of reports) {
    for (const [k, v] of Object.entries(r.outcomes)) outcomes[k] = (outcomes[k] ?? 0) + v;
    for (const [phase, xs] of Object.entries(r.phase_seconds)) (per[phase] ??= []).push(...xs);
  }
  const phase_seconds = {};
  for (const [phase, xs] of Object.entries(per)) {
    const s = [...xs].sort((a, b) => a - b);
    const round = (x) => Math.round(x * 1e4) / 1e4;
    phase_seconds[phase] = { n: s.length, mean: round(s.reduce((a, b) => a + b, 0) / s.length), median: round(s[Math.floor(s.length / 2)]), max: round(s[s.length - 1]) };
  }
  return { outcomes, phase_seconds };
}
