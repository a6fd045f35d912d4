"""`crypto.verify` remembers verdicts on short payloads: the same bytes get libsodium's verdict once, anything else
(another signature, payload or key, a long payload) is checked afresh."""

from __future__ import annotations

import nacl.bindings
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg import crypto
from secagg.errors import SignatureError


def _key() -> tuple[Ed25519PrivateKey, bytes]:
    sk = Ed25519PrivateKey.generate()
    return sk, sk.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []
    real = nacl.bindings.crypto_sign_open

    def spy(signed: bytes, pk: bytes) -> bytes:
        calls.append(signed)
        return real(signed, pk)

    monkeypatch.setattr(nacl.bindings, "crypto_sign_open", spy)
    return calls


@pytest.mark.parametrize("payload, every_verify, opened", [
    (crypto.keys_payload(b"\x01" * 32, b"\x02" * 32), False, 1),  # the same bytes: libsodium once
    (b"x" * (crypto.MEMO_PAYLOAD_MAX + 1), False, 3),  # a long payload: checked every time
    (crypto.keys_payload(b"\x03" * 32, b"\x04" * 32), True, 3),  # benchmarks: every check is a device's own
], ids=["short", "long", "benchmark"])
def test_repeated_checks_of_the_same_bytes(opens: list[bytes], monkeypatch: pytest.MonkeyPatch, payload: bytes,
                                           every_verify: bool, opened: int) -> None:
    if every_verify:
        monkeypatch.setenv(crypto.BENCH_EVERY_VERIFY_ENV, "1")
    sk, pk = _key()
    sig = crypto.sign(sk, payload)
    for _ in range(3):
        crypto.verify(pk, sig, payload, "keys")
    assert len(opens) == opened


@settings(max_examples=60, deadline=None)
@given(payload=st.binary(max_size=300), flip=st.integers(0, 64 * 8 - 1), which=st.sampled_from(["sig", "payload", "key"]))
def test_a_remembered_valid_signature_never_vouches_for_other_bytes(payload: bytes, flip: int, which: str) -> None:
    sk, pk = _key()
    sig = crypto.sign(sk, payload)
    crypto.verify(pk, sig, payload, "original")  # remembered as valid
    if which == "sig":
        sig = bytes(b ^ (1 << (flip % 8)) if i == flip // 8 else b for i, b in enumerate(sig))
    elif which == "payload":
        payload = payload + b"\x00"
    else:
        pk = _key()[1]
    with pytest.raises(SignatureError):
        crypto.verify(pk, sig, payload, "tampered")
    with pytest.raises(SignatureError):  # and the refusal stays a refusal when asked again
        crypto.verify(pk, sig, payload, "tampered")
