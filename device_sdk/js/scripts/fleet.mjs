// A fleet of JavaScript devices in one Node process, for the end-to-end tests and the benchmark:
//   node scripts/fleet.mjs --server URL --data devices.json [--truth truth.json] [--dropout P] [--seed S]
//                          [--checkin-wait S] [--policy JSON]
// `devices.json` is a list of per-device local data ({collection: [rows]}); the truth file maps each device's id to
// its data (as fa-sim's --truth-file does) and is written once every device has its identity. Runs until SIGTERM or
// SIGINT, then prints {"outcomes": {status: count}, "phase_seconds": {...}, "devices": [...]} on stdout.
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { DeviceClient, DevicePolicy, LocalStore } from "../dist/src/node.js";
import { FleetDevice, dropSchedule, mulberry32, summarize } from "./fleet_loop.mjs";

const { values: args } = parseArgs({
  options: {
    server: { type: "string" }, data: { type: "string" }, truth: { type: "string" }, dropout: { type: "string", default: "0" },
    seed: { type: "string", default: "0" }, "checkin-wait": { type: "string", default: "3" }, policy: { type: "string" },
  },
});
if (!args.server || !args.data) {
  console.error("usage: fleet.mjs --server URL --data devices.json [--truth F] [--dropout P] [--seed S] [--checkin-wait S] [--policy JSON]");
  process.exit(2);
}
const data = JSON.parse(readFileSync(args.data, "utf8"));
const rand = mulberry32(Number(args.seed));
const dropAt = dropSchedule(Number(args.dropout), rand);
const policy = args.policy ? new DevicePolicy(JSON.parse(args.policy)) : undefined;
const devices = [];
const truth = {};
for (const [i, local] of data.entries()) {
  const store = new LocalStore();
  for (const [collection, rows] of Object.entries(local)) await store.addMany(collection, rows);
  const device = new FleetDevice(i);
  const client = new DeviceClient(args.server, store, {
    policy, checkinWaitS: Number(args["checkin-wait"]), dropout: dropAt, onPhaseTiming: device.onTiming, log: () => {},
  });
  device.deviceId = (await client.identity()).deviceId;
  truth[device.deviceId] = local;
  devices.push([device, client]);
}
if (args.truth) {
  writeFileSync(args.truth + ".tmp", JSON.stringify({ devices: truth }));
  renameSync(args.truth + ".tmp", args.truth); // whole or absent: the test waits for it to appear
}
console.error(`fleet.mjs: ${devices.length} devices against ${args.server}`);
const controller = new AbortController();
const loops = devices.map(([device, client], i) => device.run(client, controller.signal, ((i * 20) % 1000) / 1000));
const stop = () => controller.abort();
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
await Promise.allSettled(loops);
const reports = devices.map(([device]) => device.report());
console.log(JSON.stringify({ ...summarize(reports), devices: reports }));
