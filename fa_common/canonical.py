"""RFC 8785 (JCS) canonical JSON: the bytes the task digest, the log's entries and the issuer's credentials hash or
sign, the same in every implementation."""

from __future__ import annotations

from typing import Any

import rfc8785


class NotCanonical(ValueError):
    """A value with no canonical JSON (an integer beyond ±(2^53 − 1), NaN, a type JSON does not have); the message
    names it."""


def canonical_json(value: Any, what: str = "value") -> bytes:
    """The canonical UTF-8 bytes of a JSON value; NotCanonical naming `what` when it has none."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.IntegerDomainError as exc:
        raise NotCanonical(f"{what}: an integer is beyond ±(2^53 − 1) ({exc})") from None
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise NotCanonical(f"{what}: not canonical JSON: {exc}") from None


__all__ = ["NotCanonical", "canonical_json"]
