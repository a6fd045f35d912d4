"""Per-client-address token buckets: the server's limit on device registrations, the issuer's on token requests.

Each address may make `burst` requests at once and then `rate_per_min` a minute. An IPv4 address (also an IPv4-mapped
IPv6 one) is one client; IPv6 clients are grouped by their /64 (one host usually holds a whole /64). The table is
bounded: the least recently seen prefixes are forgotten first (a forgotten one starts again with a full bucket). In
memory only: it guards a process's CPU, not identities.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict

MAX_PREFIXES = 100_000


def address_prefix(remote: str | None) -> str:
    """The prefix a request is counted under: the IPv4 address, the IPv6 /64, or "unknown"."""
    try:
        ip = ipaddress.ip_address(remote or "")
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


def retry_after_header(wait_s: float) -> str:
    """A `Retry-After` value for a wait: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))


class AddressRateLimiter:
    def __init__(self, rate_per_min: float, burst: int, max_prefixes: int = MAX_PREFIXES) -> None:
        if rate_per_min <= 0 or burst < 1:
            raise ValueError("rate_per_min must be > 0 and burst ≥ 1")
        self.rate_per_s = rate_per_min / 60.0
        self.burst = float(burst)
        self.max_prefixes = max_prefixes
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, remote: str | None, now: float | None = None) -> float:
        """Spend one token of `remote`'s bucket: 0.0 when allowed, else the seconds until one is available."""
        now = time.monotonic() if now is None else now
        prefix = address_prefix(remote)
        tokens, last = self._buckets.pop(prefix, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.rate_per_s)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate_per_s
        self._buckets[prefix] = (tokens, now)
        while len(self._buckets) > self.max_prefixes:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


__all__ = ["MAX_PREFIXES", "AddressRateLimiter", "address_prefix", "retry_after_header"]
