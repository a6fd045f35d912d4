"""Neighbour graphs: the complete graph (SecAgg) and a random Harary graph (SecAgg+).

Every party recomputes the graph from public values: n, the degree, and a seed derived from the members root
(`secagg.crypto.graph_seed`: every member's party, identity and fresh advertised keys, fixed when phase 0 closed), so
the server can neither show different parties different graphs nor pick the ring order: it learns the seed only once
the honest members' fresh keys are in, and each try at another seed is another member list (docs/secagg.md, "A graph
the server cannot steer"). The Harary graph H(k, n) places the parties on a ring in a pseudorandom order and joins
each to the k/2 nearest on either side. How degree and threshold are chosen: `secagg.floor`.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from secagg.crypto import prg_uint64

class NeighbourGraph:
    """Closed neighbourhoods N[u] (u included) for parties 1..n."""

    def __init__(self, n: int, degree: int | None, seed: bytes) -> None:
        self.n = n
        self.complete = degree is None or degree >= n - 1
        self.degree = n - 1 if self.complete else int(degree)  # type: ignore[arg-type]
        self._seed = seed
        self._cache: dict[int, tuple[int, ...]] = {}
        self._sets: dict[int, frozenset[int]] = {}

    @cached_property
    def _ring(self) -> tuple[np.ndarray, np.ndarray]:
        """(order, position): order[i] is the party at ring slot i; position[u] its slot."""
        stream = prg_uint64(self._seed, self.n).tolist()  # Python ints: a loop over numpy scalars is ~10× slower
        ring = list(range(1, self.n + 1))
        for i in range(self.n - 1, 0, -1):  # Fisher–Yates; modulo bias ≤ n/2^64
            j = stream[i] % (i + 1)
            ring[i], ring[j] = ring[j], ring[i]
        order = np.array(ring, dtype=np.int64)
        position = np.empty(self.n + 1, dtype=np.int64)
        position[order] = np.arange(self.n)
        return order, position

    def closed(self, u: int) -> tuple[int, ...]:
        """Sorted closed neighbourhood of party u."""
        hit = self._cache.get(u)
        if hit is not None:
            return hit
        if self.complete:
            result = tuple(range(1, self.n + 1))
        else:
            order, position = self._ring
            half = self.degree // 2
            slots = (position[u] + np.arange(-half, half + 1)) % self.n
            result = tuple(sorted(int(x) for x in order[slots]))
        self._cache[u] = result
        return result

    def closed_set(self, u: int) -> frozenset[int]:
        """`closed(u)` as a set (cached: the server intersects it with survivor sets per party and phase)."""
        hit = self._sets.get(u)
        if hit is None:
            hit = self._sets[u] = frozenset(self.closed(u))
        return hit

    @cached_property
    def slots(self) -> list[int]:
        """slots[u]: party u's place on the ring (index 0 unused); for the complete graph, u − 1."""
        if self.complete:
            return list(range(-1, self.n))
        return [int(x) for x in self._ring[1]]

    def size(self) -> int:
        """Size of every closed neighbourhood."""
        return self.degree + 1
