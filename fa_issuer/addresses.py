"""The second line behind the quota: token requests per client address, IPv4 by /32 and IPv6 by /64.

A token bucket per address prefix: `burst` requests at once, then `rate_per_min` a minute; the table is bounded
(the least recently seen prefixes are forgotten first). In memory only: it guards this process's CPU, not
identities (the quota does that, durably).

The same idea as the server's registration limiter (analytics_server/ratelimit.py), which fa-issuer may not
import; the two belong in one shared module (docs/issuer.md).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict

MAX_PREFIXES = 100_000


def address_prefix(remote: str | None) -> str:
    """The prefix a request is counted under: the IPv4 address (also IPv4-mapped IPv6), the IPv6 /64, or "unknown"."""
    try:
        ip = ipaddress.ip_address(remote or "")
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class AddressLimiter:
    def __init__(self, rate_per_min: float, burst: int, max_prefixes: int = MAX_PREFIXES) -> None:
        if rate_per_min <= 0 or burst < 1:
            raise ValueError("rate_per_min must be > 0 and burst ≥ 1")
        self.per_s = rate_per_min / 60.0
        self.burst = float(burst)
        self.max_prefixes = max_prefixes
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, remote: str | None, now: float | None = None) -> float:
        """0.0 when `remote` may make a request now (and it is counted), else the seconds until it may."""
        now = time.monotonic() if now is None else now
        prefix = address_prefix(remote)
        level, last = self._buckets.pop(prefix, (self.burst, now))
        level = min(self.burst, level + max(0.0, now - last) * self.per_s)
        wait = 0.0 if level >= 1.0 else (1.0 - level) / self.per_s
        self._buckets[prefix] = (level - 1.0 if wait == 0.0 else level, now)
        while len(self._buckets) > self.max_prefixes:
            self._buckets.popitem(last=False)
        return wait

    @staticmethod
    def retry_after_header(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))
