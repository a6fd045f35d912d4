"""The shared base64 helpers: strict decoders that name what they decode; canonical JSON naming what has none."""

from __future__ import annotations

import pytest

from fa_common.b64 import b64d, b64e, b64url_d, b64url_e
from fa_common.canonical import NotCanonical, canonical_json


def test_standard_base64_round_trips_and_checks_length() -> None:
    assert b64d(b64e(b"\x00\xff" * 8), "x", 16) == b"\x00\xff" * 8
    with pytest.raises(ValueError, match="key: expected 32 bytes, got 16"):
        b64d(b64e(bytes(16)), "key", 32)


@pytest.mark.parametrize("text", ["%%%", "AAA", "AA==AA==", "é"])
def test_standard_base64_is_strict(text: str) -> None:
    with pytest.raises(ValueError, match="field: not valid base64"):
        b64d(text, "field")


def test_url_safe_base64_is_unpadded_and_accepts_padding() -> None:
    data = b"\xfb\xff\xfe"
    assert b64url_e(data) == "-__-" and b64url_e(b"\xff") == "_w"
    assert b64url_d("_w", "x") == b64url_d("_w==", "x") == b"\xff"
    for bad in ("", "A", "a b", "%%%%"):
        with pytest.raises(ValueError, match="sig: not base64url"):
            b64url_d(bad, "sig")


def test_canonical_json_names_what_has_none() -> None:
    assert canonical_json({"b": 1, "a": [1.0, "é"]}) == '{"a":[1,"é"],"b":1}'.encode()
    with pytest.raises(NotCanonical, match=r"spec: an integer is beyond"):
        canonical_json({"n": 2**53}, "spec")
    with pytest.raises(NotCanonical, match="spec: not canonical JSON"):
        canonical_json({"n": float("nan")}, "spec")
