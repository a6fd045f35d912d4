"""The reference attester (app-backend credentials) refuses every credential it should, saying why."""

from __future__ import annotations

import base64
import json

import pytest
from nacl.signing import SigningKey

from fa_common.b64 import b64url_e
from fa_issuer.attesters import (
    DOMAIN, MAX_CREDENTIAL_CHARS, Admission, AppAttestAttester, AppBackendAttester, Attester, CredentialRefused,
    PlayIntegrityAttester, mint_credential, new_app_key,
)
from secagg.randomness import SeededRandom

NOW = 1_800_000_000
KEY = new_app_key(SeededRandom(b"app backend"))
OTHER = new_app_key(SeededRandom(b"someone else"))


def attester() -> AppBackendAttester:
    return AppBackendAttester({"notes": bytes(KEY.verify_key)})


def refused(credential: str, now: float = NOW) -> str:
    with pytest.raises(CredentialRefused) as info:
        attester().admit(credential, now)
    return info.value.reason


def forged(payload: bytes, key: SigningKey = KEY, domain: bytes = DOMAIN) -> str:
    return f"{b64url_e(payload)}.{b64url_e(key.sign(domain + payload).signature)}"


def test_a_minted_credential_admits_its_install() -> None:
    cred = mint_credential(KEY, "notes", "install-1", NOW + 60)
    assert attester().admit(cred, NOW) == Admission("notes", "install-1")
    assert attester().admit(cred, NOW + 60) == Admission("notes", "install-1")  # valid up to not_after inclusive


def test_the_credential_format() -> None:
    cred = mint_credential(KEY, "notes", "i", NOW)
    payload_b64, sig_b64 = cred.split(".")
    assert "=" not in cred
    payload = base64.urlsafe_b64decode(payload_b64 + "=" * (-len(payload_b64) % 4))
    assert payload == b'{"app":"notes","install":"i","not_after":1800000000}'
    sig = base64.urlsafe_b64decode(sig_b64 + "=" * (-len(sig_b64) % 4))
    KEY.verify_key.verify(DOMAIN + payload, sig)
    padded = f"{payload_b64}{'=' * (-len(payload_b64) % 4)}.{sig_b64}=="
    assert attester().admit(padded, NOW).install == "i"


def test_bad_signature() -> None:
    cred = mint_credential(OTHER, "notes", "i", NOW + 60)
    assert refused(cred).startswith("bad signature")
    payload, sig = mint_credential(KEY, "notes", "i", NOW + 60).split(".")
    other_payload = mint_credential(KEY, "notes", "j", NOW + 60).split(".")[0]
    assert refused(f"{other_payload}.{sig}").startswith("bad signature")


def test_wrong_domain() -> None:
    payload = b'{"app":"notes","install":"i","not_after":1800000060}'
    assert refused(forged(payload, domain=b"fa-enrolment/v2")).startswith("bad signature")
    assert refused(forged(payload, domain=b"")).startswith("bad signature")
    assert attester().admit(forged(payload), NOW).install == "i"


def test_expired() -> None:
    cred = mint_credential(KEY, "notes", "i", NOW - 1)
    assert refused(cred).startswith("expired")


def test_unknown_app() -> None:
    cred = mint_credential(KEY, "calendar", "i", NOW + 60)
    assert refused(cred).startswith("unknown app 'calendar'")


def test_oversize() -> None:
    assert "longer than" in refused("a" * (MAX_CREDENTIAL_CHARS + 1) + ".b")
    with pytest.raises(ValueError, match="install"):
        mint_credential(KEY, "notes", "i" * 129, NOW)
    payload = json.dumps({"app": "notes", "install": "i" * 129, "not_after": NOW}, separators=(",", ":")).encode()
    assert "install" in refused(forged(payload))


@pytest.mark.parametrize("credential", [
    "", "no-dot", "a.b.c", "!!!!.AAAA", "eyJ9.%%%", "A.AAAA", "eyJhcHAiOiJub3RlcyJ9.",
    b64url_e(b"not json") + "." + b64url_e(bytes(64)),
    b64url_e(b"{}") + "." + b64url_e(bytes(63)),
])
def test_malformed(credential: str) -> None:
    assert refused(credential).startswith("malformed credential")


@pytest.mark.parametrize("payload", [
    b'{"app":"notes","install":"i"}',
    b'{"app":"notes","install":"i","not_after":1800000060,"x":1}',
    b'{"app":"notes","install":"i","not_after":"1800000060"}',
    b'{"app":"notes","install":"i","not_after":true}',
    b'{"app":"notes","install":"i","not_after":1.8e9}',
    b'{"app":"notes","install":"","not_after":1800000060}',
    b'{"app":"notes","install":7,"not_after":1800000060}',
    b'{"install":"i","app":"notes","not_after":1800000060}',  # not canonical: keys out of order
    b'{"app": "notes","install":"i","not_after":1800000060}',  # not canonical: whitespace
    b'{"app":"notes","app":"notes","install":"i","not_after":1800000060}',  # duplicate member
    b'[1, 2]',
])
def test_payloads_that_are_not_credentials(payload: bytes) -> None:
    assert refused(forged(payload)).startswith("malformed credential")


def test_adapter_points_are_interfaces_not_implementations() -> None:
    for adapter in (PlayIntegrityAttester, AppAttestAttester):
        assert Attester in adapter.__mro__
        assert "must" in (adapter.__doc__ or "")
        with pytest.raises(TypeError):
            adapter()  # type: ignore[misc]  # a Protocol: nothing here pretends to verify a platform's attestation
