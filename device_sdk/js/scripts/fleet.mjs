// A fleet of JavaScript devices in one Node process, for the end-to-end tests and the benchmark:
//   node scripts/fleet.mjs --server URL --data devices.json [--truth truth.json] [--dropout P] [--seed S]
//                          [--checkin-wait S] [--policy JSON] [--issuer URL --credentials credentials.json]
// `devices.json` is a list of per-device local data ({collection: [rows]}); the truth file maps each device's id to
// its data (as fa-sim's --truth-file does) and is written once every device has its identity. Runs until SIGTERM or
// SIGINT, then prints {"outcomes": {status: count}, "phase_seconds": {...}, "devices": [...]} on stdout. With
// `--issuer`, device i enrols (docs/identities.md) with the i-th enrolment credential of `credentials.json` (a list of
// strings); the policy must then pin `issuerKeys`.
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";

import { DeviceClient, DevicePolicy, LocalStore } from "../dist/src/node.js";
import { FleetDevice, dropSchedule, mulberry32, summarize } from "./fleet_loop.mjs";

const { values: args } = parseArgs({
  options: {
    server: { type: "string" }, data: { type: "string" }, truth: { type: "string" }, dropout: { type: "string", default: "0" },
    seed: { type: "string", default: "0" }, "checkin-wait": { type: "string", default: "3" }, policy: { type: "string" },
    issuer: { type: "string" }, credentials: { type: "string" },
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
if (args.issuer && !args.credentials) {
  console.error("fleet.mjs: --issuer needs --credentials (a JSON list, one enrolment credential per device)");
  process.exit(2);
}
const credentials = args.issuer ? JSON.parse(readFileSync(args.credentials, "utf8")) : null;
if (credentials && !(Array.isArray(credentials) && credentials.length >= data.length)) {
  console.error(`fleet.mjs: --credentials must list one enrolment credential per device (${data.length})`);
  process.exit(2);
}
const devices = [];
const truth = {};
for (const [i, local] of data.entries()) {
  const store = new LocalStore();
  for (const [collection, rows] of Object.entries(local)) await store.addMany(collection, rows);
  const device = new FleetDevice(i);
  const client = new DeviceClient(args.server, store, {
    policy, network: { checkinWaitS: Number(args["checkin-wait"]) }, hooks: { dropout: dropAt, onPhaseTiming: device.onTiming }, log: () => {},
    ...(credentials ? { enrolment: { issuerUrl: args.issuer, credential: credentials[i] } } : {}),
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
