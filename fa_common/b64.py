"""Base64 of the wire formats: standard base64 with padding (the device protocol, the log, key files) and unpadded
URL-safe base64 (the issuer's credentials). The decoders are strict and name what they decode."""

from __future__ import annotations

import base64
import binascii


def b64e(data: bytes) -> str:
    """Standard base64 with padding."""
    return base64.b64encode(data).decode("ascii")


def b64d(text: str, what: str, length: int | None = None) -> bytes:
    """Strict standard base64 → bytes; ValueError naming `what` on bad input or, given `length`, a wrong length."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):  # binascii.Error is a ValueError
        raise ValueError(f"{what}: not valid base64") from None
    if length is not None and len(raw) != length:
        raise ValueError(f"{what}: expected {length} bytes, got {len(raw)}")
    return raw


def b64url_e(data: bytes) -> str:
    """URL-safe base64 without padding (RFC 4648 §5)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_d(text: str, what: str) -> bytes:
    """Strict URL-safe base64, padding optional → bytes; ValueError naming `what` otherwise."""
    if not text or len(text) % 4 == 1:
        raise ValueError(f"{what}: not base64url")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise ValueError(f"{what}: not base64url") from None


__all__ = ["b64d", "b64e", "b64url_d", "b64url_e"]
