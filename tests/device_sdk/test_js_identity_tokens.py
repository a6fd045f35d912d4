"""Identity tokens made by the JS device SDK (device_sdk/js/src/identityToken.ts) verify under the Python reference
(secagg/identity_token.py), and the JS refusals read as Python's: the other direction of the JS SDK's test against
tests/vectors/identity_tokens.json.

Node issues with a fresh RSA-2048 key of its own (WebCrypto), blinds a token request through the SDK
(@cloudflare/blindrsa-ts), signs it blind as the issuer would, finalizes, and prints the issuer key, the identity and
the token. Runs when Node and the built SDK are here (`make js`); under CI their absence is a failure.
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from devstack.js_fleet import JS, js_missing
from secagg import blind_rsa
from secagg import identity_token as it

_SCRIPT = r"""
const t = await import(process.argv[1]);
const pair = await crypto.subtle.generateKey(
  { name: "RSA-PSS", hash: "SHA-384", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]) }, true, ["sign", "verify"]);
const spki = new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey));
const identity = crypto.getRandomValues(new Uint8Array(32));
const pending = await t.requestToken(spki, identity);
const token = await pending.finalize(await t.suite.blindSign(pair.privateKey, pending.blindedMsg));
const b64 = (b) => Buffer.from(b).toString("base64");
const refusals = {};
for (const [name, raw, id] of [["other", token, new Uint8Array(32)], ["short", token.subarray(1), identity]]) {
  try { await t.verifyToken(raw, id, await t.trustedKeys([spki])); refusals[name] = null; } catch (e) { refusals[name] = e.message; }
}
console.log(JSON.stringify({ spki: b64(spki), identity: b64(identity), token: b64(token), refusals }));
"""


def test_a_js_made_token_verifies_in_python_and_refusals_read_the_same() -> None:
    missing = js_missing()
    assert not missing, f"the JS SDK must be built (make js; make test builds it first): {missing}"
    module = JS / "dist" / "src" / "identityToken.js"
    out = subprocess.run(["node", "--input-type=module", "-e", _SCRIPT, str(module)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    key = blind_rsa.load_public_key(base64.b64decode(got["spki"]))
    identity, token = base64.b64decode(got["identity"]), base64.b64decode(got["token"])
    trusted = it.trusted_keys([key])
    decoded = it.verify(token, identity, trusted)
    assert decoded.token_key_id == it.key_id(key) and decoded.encode() == token
    for name, raw, ident in (("other", token, bytes(32)), ("short", token[1:], identity)):
        with pytest.raises(it.TokenError) as caught:
            it.verify(raw, ident, trusted)
        assert got["refusals"][name] == str(caught.value)
