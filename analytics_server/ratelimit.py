"""Per-client-address token buckets (used to limit device registrations).

Each address may make `burst` requests at once and then `rate_per_min` per minute. IPv6 clients are
grouped by their /64 prefix (one host usually holds a whole /64). The table of addresses is bounded: the
least recently seen are forgotten first (a forgotten address starts again with a full bucket).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict

MAX_ADDRESSES = 100_000


def client_key(remote: str | None) -> str:
    """The bucket key of a peer address: the address itself (IPv4), its /64 (IPv6), or "unknown"."""
    if not remote:
        return "unknown"
    try:
        ip = ipaddress.ip_address(remote)
    except ValueError:
        return "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        if mapped is not None:
            return str(mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


class AddressRateLimiter:
    def __init__(self, rate_per_min: float, burst: int, max_addresses: int = MAX_ADDRESSES) -> None:
        if rate_per_min <= 0 or burst < 1:
            raise ValueError("rate_per_min must be > 0 and burst ≥ 1")
        self.rate_per_s = rate_per_min / 60.0
        self.burst = float(burst)
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, remote: str | None, now: float | None = None) -> float:
        """Spend one token of `remote`'s bucket: 0.0 when allowed, else the seconds until one is available."""
        now = time.monotonic() if now is None else now
        key = client_key(remote)
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate_per_s)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate_per_s
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        return wait

    @staticmethod
    def retry_after_header(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))

    def __len__(self) -> int:
        return len(self._buckets)
