"""The analyst spec models and the device envelope helpers shared by server and SDK."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from fa_common.b64 import b64d, b64e
from queries.envelope import Assignment, device_id_for, signing_payload
from queries.spec import CohortSpec, PrivacySpec, QuerySpec


def _loc(exc: pytest.ExceptionInfo[ValidationError]) -> set[str]:
    return {".".join(str(x) for x in e["loc"]) for e in exc.value.errors()}


def test_defaults_and_round_trip() -> None:
    spec = QuerySpec.model_validate({"kind": "histogram", "source": "words", "params": {"buckets": ["a"]}})
    assert spec.privacy.mechanism == "none" and spec.cohort.min_clients == 10 and spec.cohort.max_clients == 1000
    assert QuerySpec.model_validate(spec.model_dump(mode="json")) == spec


@pytest.mark.parametrize(
    "raw, field",
    [
        ({"kind": "histogram", "source": "words", "extra": 1}, "extra"),
        ({"kind": "", "source": "words"}, "kind"),
        ({"kind": "histogram", "source": "no spaces allowed"}, "source"),
        ({"kind": "histogram", "source": "w", "cohort": {"min_clients": 1}}, "cohort.min_clients"),
        ({"kind": "histogram", "source": "w", "cohort": {"phase_timeout_s": 0}}, "cohort.phase_timeout_s"),
        ({"kind": "histogram", "source": "w", "privacy": {"delta": 1.5}}, "privacy.delta"),
    ],
)
def test_bad_specs_name_the_field(raw: dict, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        QuerySpec.model_validate(raw)
    assert field in _loc(exc)


def test_privacy_requires_budget_with_noise() -> None:
    with pytest.raises(ValidationError, match="epsilon and delta required"):
        PrivacySpec(mechanism="discrete_gaussian")
    assert PrivacySpec(epsilon=1.0, delta=1e-6, mechanism="skellam").epsilon == 1.0
    with pytest.raises(ValidationError, match="max_clients"):
        CohortSpec(min_clients=20, max_clients=10)


def test_signing_payload_binds_every_part() -> None:
    key = Ed25519PrivateKey.generate()
    base = ("POST", "/v1/device/checkin?x=1", "1700000000", "n" * 16, b"{}")
    sig = key.sign(signing_payload(*base))
    key.public_key().verify(sig, signing_payload(*base))
    payloads = {signing_payload(*base)}
    for i, alt in enumerate(["GET", "/v1/device/checkin?x=2", "1700000001", "m" * 16, b"{ }"]):
        changed = list(base)
        changed[i] = alt
        payloads.add(signing_payload(*changed))
    assert len(payloads) == 6


def test_b64_and_device_id() -> None:
    assert b64d(b64e(b"abc"), "x") == b"abc"
    with pytest.raises(ValueError, match="pk: expected 32 bytes"):
        b64d(b64e(b"short"), "pk", 32)
    with pytest.raises(ValueError, match="not valid base64"):
        b64d("!!", "pk")
    assert device_id_for(b"a" * 32) == device_id_for(b"a" * 32) != device_id_for(b"b" * 32)


def test_assignment_refuses_unknown_fields() -> None:
    base = dict(query_id="q", round=0, cohort_id="c", party_id=1, kind="histogram", source="w", task={},
                secagg={}, threat_model="semi_honest", phase_timeout_s=1.0)
    Assignment(**base)
    with pytest.raises(ValidationError):
        Assignment(**base, surprise=True)
