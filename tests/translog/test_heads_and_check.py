"""Signed heads, cosignatures and the device's check (translog.heads, translog.check): every task-proof case of
the vectors gives its verdict, and signatures bind every field of the head."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support import translog_cases
from translog.heads import HeadError, Signer, TreeHead, key_table, verify_cosignature, verify_head


@pytest.mark.parametrize("case", translog_cases.task_proof_cases(), ids=lambda c: c["name"])
def test_task_proof_verdicts(case: dict) -> None:
    assert translog_cases.run_case(case).startswith(case["verdict"])


def test_a_head_signature_binds_every_field() -> None:
    signer = Signer(bytes(32))
    head = TreeHead("example/log", 5, bytes(range(32)), 1_700_000_000_000)
    signed = signer.sign_head(head)
    keys = key_table([signer.public_key])
    verify_head(signed, keys)
    for change in ({"origin": "other/log"}, {"size": 6}, {"root": bytes(32)}, {"timestamp_ms": 1}):
        with pytest.raises(HeadError, match="does not verify"):
            verify_head(dataclasses.replace(signed, head=dataclasses.replace(head, **change)), keys)
    with pytest.raises(HeadError, match="not one of"):
        verify_head(signed, key_table([Signer(bytes([1]) * 32).public_key]))


def test_a_cosignature_binds_its_time_and_head() -> None:
    witness = Signer(bytes([7]) * 32)
    head = TreeHead("example/log", 5, bytes(range(32)), 1)
    cos = witness.cosign("w", head, 100)
    keys = key_table([witness.public_key])
    verify_cosignature(cos, head, keys)
    with pytest.raises(HeadError):
        verify_cosignature(dataclasses.replace(cos, time=101), head, keys)
    with pytest.raises(HeadError):
        verify_cosignature(cos, dataclasses.replace(head, size=6), keys)


def test_malformed_heads_are_refused() -> None:
    for bad in ({"origin": ""}, {"origin": "a\nb"}, {"size": -1}, {"root": b"x"}, {"timestamp_ms": -5}):
        with pytest.raises(HeadError):
            TreeHead(**{"origin": "o", "size": 1, "root": bytes(32), "timestamp_ms": 0, **bad})
