/** Enrolment (docs/identities.md): a DeviceClient with `enrolment` asks the issuer for an identity token under the
 * first pinned issuer key before its first registration, keeps it across restarts and registers with it; the
 * issuer's errors surface with their message and Retry-After; a device without enrolment at a server that requires a
 * token is told it needs one. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { b64decode, b64encode } from "../src/bytes.js";
import { DeviceClient, EnrolmentRequiredError, IssuerError } from "../src/client.js";
import { trustedKeys, verifyToken } from "../src/identityToken.js";
import { DevicePolicy, PolicyError } from "../src/policy.js";
import { LocalStore } from "../src/store.js";
import { FakeIssuer, withIssuer } from "./fakeIssuer.js";
import { bodyJson, fakeServer, idle } from "./fakeServer.js";

const ISSUER = "http://issuer.test";

async function setup(credentials: Record<string, number> = { "install-1": 1 }) {
  const issuer = await FakeIssuer.create(credentials);
  const server = fakeServer(() => idle(), { trusted: await trustedKeys([issuer.key.spki]) });
  return { issuer, server, fetch: withIssuer(server.fetch, issuer) };
}

test("registration carries an identity token from the issuer, for this identity, kept across restarts", async () => {
  const { issuer, server, fetch } = await setup();
  const other = await FakeIssuer.create();
  const store = new LocalStore();
  // the app pins the issuer's key (a second, later key too): the token is asked for under the first
  const policy = new DevicePolicy({ issuerKeys: [issuer.spkiB64, other.spkiB64] });
  const client = new DeviceClient("http://fa.test", store, { policy, enrolment: { issuerUrl: `${ISSUER}/`, credential: "install-1" }, log: () => {}, network: { fetch } });
  assert.equal((await client.runOnce()).status, "idle");

  assert.equal(issuer.requests.length, 1);
  const ask = issuer.requests[0];
  assert.equal(ask.url, `${ISSUER}/v1/issuer/token`);
  assert.deepEqual(Object.keys(ask.body).sort(), ["blinded_msg", "credential", "token_key_id"]);
  assert.equal(ask.body.credential, "install-1");
  assert.equal(ask.body.token_key_id, b64encode(issuer.key.keyId));
  assert.equal(b64decode(ask.body.blinded_msg, "blinded_msg").length, 256);
  const { key } = await client.identity();
  const names: string[] = [];
  ask.headers.forEach((_, name) => names.push(name));
  assert.deepEqual(names, ["content-type"], "the issuer request carries nothing of the device's identity");
  assert.ok(!JSON.stringify(ask.body).includes(b64encode(key.publicBytes)));

  const reg = server.seen.filter((r) => r.path === "/v1/device/register");
  assert.equal(reg.length, 1);
  const token = b64decode(bodyJson(reg[0]).identity_token, "identity_token", 354);
  await verifyToken(token, key.publicBytes, await trustedKeys([issuer.key.spki]));
  assert.equal(await store.getMeta("identity_token"), b64encode(token));

  // a restart (a new client on the same store) registering with another server reuses the kept token
  const second = fakeServer(() => idle(), { trusted: await trustedKeys([issuer.key.spki]) });
  const again = new DeviceClient("http://fa2.test", store, { policy, enrolment: { issuerUrl: ISSUER, credential: "install-1" }, log: () => {}, network: { fetch: withIssuer(second.fetch, issuer) } });
  assert.equal((await again.runOnce()).status, "idle");
  assert.equal(issuer.requests.length, 1, "no second token asked for");
  assert.equal(bodyJson(second.seen.find((r) => r.path === "/v1/device/register")!).identity_token, b64encode(token));
});

test("a kept token that no longer verifies under the pinned keys (the issuer rotated) is replaced", async () => {
  const { issuer, fetch } = await setup({ "install-1": 1 });
  const retired = await FakeIssuer.create();
  const store = new LocalStore();
  const client = new DeviceClient("http://fa.test", store, { policy: new DevicePolicy({ issuerKeys: [issuer.spkiB64] }), enrolment: { issuerUrl: ISSUER, credential: "install-1" }, log: () => {}, network: { fetch } });
  const { key } = await client.identity();
  await store.setMeta("identity_token", b64encode(await retired.minted(key.publicBytes)));
  assert.equal((await client.runOnce()).status, "idle");
  assert.equal(issuer.requests.length, 1);
  await verifyToken(b64decode((await store.getMeta("identity_token")) as string, "t"), key.publicBytes, await trustedKeys([issuer.key.spki]));
});

test("the issuer's refusals surface as IssuerError with its message and Retry-After; nothing is registered", async () => {
  const { issuer, server, fetch } = await setup({ "install-1": 0 });
  const policy = new DevicePolicy({ issuerKeys: [issuer.spkiB64] });
  const spent = new DeviceClient("http://fa.test", new LocalStore(), { policy, enrolment: { issuerUrl: ISSUER, credential: "install-1" }, log: () => {}, network: { fetch } });
  await assert.rejects(spent.runOnce(), (exc: unknown) => {
    assert.ok(exc instanceof IssuerError, String(exc));
    assert.equal(exc.status, 429);
    assert.equal(exc.serverMessage, "quota spent: 1 token per install per day");
    assert.equal(exc.retryAfter, 86400);
    assert.match(exc.message, /^identity token issuer: HTTP 429: quota spent/);
    return true;
  });
  const unknown = new DeviceClient("http://fa.test", new LocalStore(), { policy, enrolment: { issuerUrl: ISSUER, credential: "forged" }, log: () => {}, network: { fetch } });
  await assert.rejects(unknown.runOnce(), (exc: unknown) => exc instanceof IssuerError && exc.status === 403 && exc.serverMessage === "credential refused: unknown app" && exc.retryAfter === null);
  assert.equal(server.seen.filter((r) => r.path === "/v1/device/register").length, 0);
  // runForever backs off at least for the issuer's Retry-After
  const warnings: string[] = [];
  const looping = new DeviceClient("http://fa.test", new LocalStore(), { policy, enrolment: { issuerUrl: ISSUER, credential: "install-1" }, log: (level, m) => level === "warn" && warnings.push(m), network: { fetch } });
  looping.start();
  for (let i = 0; i < 2000 && !warnings.length; i++) await new Promise((r) => setTimeout(r, 5));
  await looping.stop();
  assert.match(warnings[0] ?? "", /quota spent.*; retrying in 86400\.0s$/);
});

test("without an enrolment a server that requires a token answers 403: the error says an enrolment is needed", async () => {
  const { server } = await setup();
  const client = new DeviceClient("http://fa.test", new LocalStore(), { log: () => {}, network: { fetch: server.fetch } });
  await assert.rejects(client.runOnce(), (exc: unknown) => {
    assert.ok(exc instanceof EnrolmentRequiredError, String(exc));
    assert.equal(exc.status, 403);
    assert.match(exc.message, /registers only devices with an identity token: give the DeviceClient an enrolment/);
    return true;
  });
  // a server that does not require one registers the device as before, without a token
  const open = fakeServer(() => idle());
  const plain = new DeviceClient("http://fa.test", new LocalStore(), { log: () => {}, network: { fetch: open.fetch } });
  assert.equal((await plain.runOnce()).status, "idle");
  assert.deepEqual(Object.keys(bodyJson(open.seen[0])), ["public_key"]);
});

test("enrolment and issuerKeys are checked when the client is made", async () => {
  const { issuer } = await setup();
  const store = new LocalStore();
  assert.throws(() => new DeviceClient("http://fa.test", store, { enrolment: { issuerUrl: ISSUER, credential: "c" } }), /enrolment: needs policy.issuerKeys/);
  const policy = new DevicePolicy({ issuerKeys: [issuer.spkiB64] });
  assert.throws(() => new DeviceClient("http://fa.test", store, { policy, enrolment: { issuerUrl: "ftp://x", credential: "c" } }), /enrolment.issuerUrl/);
  assert.throws(() => new DeviceClient("http://fa.test", store, { policy, enrolment: { issuerUrl: ISSUER, credential: "" } }), /enrolment.credential/);
  assert.throws(() => new DevicePolicy({ issuerKeys: [] }), PolicyError);
  assert.throws(() => new DevicePolicy({ issuerKeys: ["not base64!"] }), /issuerKeys\[0\]: not valid base64/);
  await assert.rejects(new DevicePolicy({ issuerKeys: [issuer.spkiB64, b64encode(new Uint8Array(40))] }).trustedIssuerKeys(), (e: unknown) => e instanceof PolicyError && /^issuerKeys\[1\]: not an RSA/.test((e as Error).message));
  assert.equal(await new DevicePolicy().trustedIssuerKeys(), null);
});
