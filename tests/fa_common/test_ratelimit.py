"""The per-address limiter the server (registrations) and the issuer (token requests) share: address prefixes, the
token buckets, the bounded table, the Retry-After value."""

from __future__ import annotations

import pytest

from fa_common.ratelimit import AddressRateLimiter, address_prefix, retry_after_header


@pytest.mark.parametrize("remote, prefix", [
    ("192.0.2.7", "192.0.2.7"),
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
    ("2001:db8:1:2:ffff:ffff:ffff:ffff", "2001:db8:1:2::/64"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
    (None, "unknown"),
    ("", "unknown"),
    ("not an address", "unknown"),
])
def test_address_prefix(remote: str | None, prefix: str) -> None:
    assert address_prefix(remote) == prefix


def test_the_limiter_counts_a_v6_64_as_one_client_and_refills() -> None:
    lim = AddressRateLimiter(rate_per_min=60, burst=2)
    assert lim.take("2001:db8::1", now=0) == 0
    assert lim.take("2001:db8::2", now=0) == 0
    assert lim.take("2001:db8::3", now=0) == pytest.approx(1.0)  # same /64, bucket empty: one a second
    assert lim.take("2001:db8:0:1::1", now=0) == 0  # another /64
    assert lim.take("2001:db8::3", now=1.0) == 0  # refilled one token after a second
    assert lim.take("10.0.0.1", now=5) == 0 and lim.take("10.0.0.1", now=5) == 0
    assert lim.take("10.0.0.1", now=5) == pytest.approx(1.0)


def test_a_clock_going_back_refills_nothing() -> None:
    lim = AddressRateLimiter(rate_per_min=60, burst=1)
    assert lim.take("10.0.0.1", now=10.0) == 0
    assert lim.take("10.0.0.1", now=5.0) == pytest.approx(1.0)


def test_the_limiter_table_is_bounded() -> None:
    lim = AddressRateLimiter(rate_per_min=1, burst=1, max_prefixes=3)
    for n in range(10):
        lim.take(f"192.0.2.{n}", now=0)
    assert len(lim) == 3


def test_bad_limits_are_refused() -> None:
    for rate, burst in ((0, 1), (-1, 1), (1, 0)):
        with pytest.raises(ValueError):
            AddressRateLimiter(rate_per_min=rate, burst=burst)


@pytest.mark.parametrize("wait, header", [(0.0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2"), (59.5, "60")])
def test_retry_after_is_whole_seconds_at_least_one(wait: float, header: str) -> None:
    assert retry_after_header(wait) == header
