"""RFC 9162 (Certificate Transparency 2.0) Merkle tree hashing and proofs, §2.1.

    leaf hash  = SHA-256(0x00 ‖ leaf bytes)
    node hash  = SHA-256(0x01 ‖ left ‖ right)

A node `(level, index)` is the complete (perfect) subtree over leaves [index·2^level, (index+1)·2^level); level 0
is a leaf. The RFC's recursions only ever hash ranges made of O(log n) such nodes: `inclusion_ranges` and
`consistency_ranges` name the ranges a proof holds, `range_nodes` the nodes a range is made of, and `range_hash`
hashes it from any node lookup — so a proof can be built from nodes kept anywhere (the server reads them from its
database, analytics_server/db/translog_store.py). `CompactRange` is a tree's right edge (its peaks): appending a
leaf to it yields the nodes that leaf completes and the new root, in O(log n) memory.

`MerkleTree` holds a log's leaf hashes in memory together with every complete subtree's hash (the reference the
database-backed tree is tested against, and what an auditor rebuilding the whole log uses). `verify_inclusion` and
`verify_consistency` are the RFC's verification algorithms (§2.1.3.2, §2.1.4.2) and raise `ProofError` naming what
failed. Known-answer vectors (the transparency-dev reference vectors): tests/vectors/translog.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

HASH_SIZE = 32
MAX_PROOF_HASHES = 128
"""A proof of a tree with fewer than 2^63 leaves has at most 2·63 hashes; anything longer is refused unread."""


class ProofError(ValueError):
    """A proof that does not verify, or arguments no proof could satisfy; the message says which."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n ≥ 2)."""
    return 1 << ((n - 1).bit_length() - 1)


Node = tuple[int, int]
"""(level, index): the complete subtree over leaves [index·2^level, (index+1)·2^level)."""
Range = tuple[int, int]
"""[lo, hi): the leaves whose RFC 9162 hash MTH(D[lo:hi]) a proof holds."""


def range_nodes(lo: int, hi: int) -> list[Node]:
    """The complete subtrees MTH(D[lo:hi]) is built from, left to right (none for an empty range)."""
    n = hi - lo
    if n <= 0:
        return []
    level = n.bit_length() - 1
    if n == 1 << level and lo % n == 0:
        return [(level, lo >> level)]
    k = _split(n)
    return range_nodes(lo, lo + k) + range_nodes(lo + k, hi)


def range_hash(lo: int, hi: int, node: Callable[[int, int], bytes]) -> bytes:
    """MTH(D[lo:hi]) from `node(level, index)`, the hashes of the complete subtrees `range_nodes(lo, hi)` names."""
    n = hi - lo
    if n == 0:
        return EMPTY_ROOT
    level = n.bit_length() - 1
    if n == 1 << level and lo % n == 0:
        return node(level, lo >> level)
    k = _split(n)
    return node_hash(range_hash(lo, lo + k, node), range_hash(lo + k, hi, node))


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The ranges whose hashes are PATH(index, D[0:size]) (RFC 9162 §2.1.3.1), in the proof's order."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not below the tree size {size}")
    out: list[Range] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            out.append((lo + k, hi))
            hi = lo + k
        else:
            out.append((lo, lo + k))
            lo = lo + k
    out.reverse()
    return out


def consistency_ranges(first: int, second: int) -> list[Range]:
    """The ranges whose hashes are PROOF(first, D[0:second]) (RFC 9162 §2.1.4.1); none when first is 0 or equals
    second."""
    if not 0 <= first <= second:
        raise ProofError(f"consistency: first size {first} must be in 0..{second}")
    if first == 0 or first == second:
        return []
    out: list[Range] = []
    m, lo, hi, complete = first, 0, second, True
    tail: list[Range] = []
    while m != hi - lo:
        k = _split(hi - lo)
        if m <= k:
            tail.append((lo + k, hi))
            hi = lo + k
        else:
            tail.append((lo, lo + k))
            m, lo, complete = m - k, lo + k, False
    if not complete:
        out.append((lo, hi))
    return out + tail[::-1]


def nodes_of(ranges: Iterable[Range]) -> set[Node]:
    """Every complete subtree the hashes of `ranges` need."""
    return {n for lo, hi in ranges for n in range_nodes(lo, hi)}


class CompactRange:
    """The right edge of a tree of `size` leaves: the hashes of its peaks, `range_nodes(0, size)`, left to right.
    Enough to append leaves (learning the complete subtrees each one completes) and to compute the root."""

    def __init__(self, size: int = 0, peaks: Sequence[bytes] = ()) -> None:
        if len(peaks) != bin(size).count("1"):
            raise ValueError(f"compact range: a tree of {size} leaves has {bin(size).count('1')} peaks, got {len(peaks)}")
        self.size = size
        self.peaks = list(peaks)

    def append(self, h: bytes) -> list[tuple[int, int, bytes]]:
        """Append one leaf hash; returns the complete subtrees above level 0 it completes, as (level, index, hash)."""
        if len(h) != HASH_SIZE:
            raise ValueError(f"leaf hash: must be {HASH_SIZE} bytes, got {len(h)}")
        made: list[tuple[int, int, bytes]] = []
        index, level = self.size, 0
        self.peaks.append(h)
        while index & 1:  # a right child completes its parent, which replaces the two peaks
            right, left = self.peaks.pop(), self.peaks.pop()
            index, level = index >> 1, level + 1
            self.peaks.append(node_hash(left, right))
            made.append((level, index, self.peaks[-1]))
        self.size += 1
        return made

    def root(self) -> bytes:
        if not self.peaks:
            return EMPTY_ROOT
        acc = self.peaks[-1]
        for h in reversed(self.peaks[:-1]):
            acc = node_hash(h, acc)
        return acc


class MerkleTree:
    """An append-only list of leaf hashes with its complete subtrees' hashes (`levels[k][i]` covers leaves
    [i·2^k, (i+1)·2^k))."""

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        for h in leaf_hashes:
            self.append(h)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def append(self, h: bytes) -> int:
        """Append one leaf hash; returns its index."""
        if len(h) != HASH_SIZE:
            raise ValueError(f"leaf hash: must be {HASH_SIZE} bytes, got {len(h)}")
        index = self.size
        self.levels[0].append(h)
        level, i = 0, index
        while i % 2 == 1:  # a right child completes its parent
            parent = node_hash(self.levels[level][i - 1], self.levels[level][i])
            level, i = level + 1, i // 2
            if len(self.levels) == level:
                self.levels.append([])
            self.levels[level].append(parent)
        return index

    def leaf(self, index: int) -> bytes:
        return self.levels[0][index]

    def node(self, level: int, index: int) -> bytes:
        """The hash of the complete subtree (level, index)."""
        return self.levels[level][index]

    def _hash(self, lo: int, hi: int) -> bytes:
        return range_hash(lo, hi, self.node)

    def root(self, size: int | None = None) -> bytes:
        """The tree head hash of the first `size` leaves (all of them by default)."""
        size = self.size if size is None else size
        self._check_size(size)
        return self._hash(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1)."""
        size = self.size if size is None else size
        self._check_size(size)
        return [self._hash(lo, hi) for lo, hi in inclusion_ranges(index, size)]

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """PROOF(first, D[0:second]) (RFC 9162 §2.1.4.1); empty when first is 0 or equals second."""
        second = self.size if second is None else second
        self._check_size(second)
        return [self._hash(lo, hi) for lo, hi in consistency_ranges(first, second)]

    def compact_range(self) -> CompactRange:
        """The tree's right edge (its peaks)."""
        return CompactRange(self.size, [self.node(*n) for n in range_nodes(0, self.size)])

    def root_with(self, extra: Sequence[bytes]) -> bytes:
        """The root after appending `extra` leaf hashes, without appending them."""
        edge = self.compact_range()
        for h in extra:
            edge.append(h)
        return edge.root()

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise ProofError(f"tree size {size} is beyond the {self.size} leaves held")


def _check_hashes(proof: Sequence[bytes], what: str) -> None:
    if len(proof) > MAX_PROOF_HASHES:
        raise ProofError(f"{what}: {len(proof)} hashes, at most {MAX_PROOF_HASHES}")
    for h in proof:
        if len(h) != HASH_SIZE:
            raise ProofError(f"{what}: a hash of {len(h)} bytes (must be {HASH_SIZE})")


def root_from_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes:
    """The root an inclusion proof leads to (RFC 9162 §2.1.3.2, steps 1–5); ProofError if malformed."""
    _check_hashes(proof, "inclusion proof")
    if not 0 <= index < size:
        raise ProofError(f"inclusion proof: index {index} is not below the tree size {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof: longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof: shorter than the tree is deep")
    return r


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    """Raise ProofError unless `proof` shows leaf hash `leaf` at `index` in the tree of `size` with `root`."""
    if root_from_inclusion(leaf, index, size, proof) != root:
        raise ProofError(f"inclusion proof: leaf {index} does not lead to the root of the tree of size {size}")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]) -> None:
    """Raise ProofError unless `proof` shows that the tree of size `first` with `first_root` is a prefix of the
    tree of size `second` with `second_root` (RFC 9162 §2.1.4.2)."""
    _check_hashes(proof, "consistency proof")
    if not 0 <= first <= second:
        raise ProofError(f"consistency proof: the first size {first} is larger than the second {second}")
    if first == second:
        if proof:
            raise ProofError("consistency proof: must be empty between equal sizes")
        if first_root != second_root:
            raise ProofError(f"consistency: two different roots for the tree of size {first}")
        return
    if first == 0:
        if proof:
            raise ProofError("consistency proof: must be empty from the empty tree")
        return
    if not proof:
        raise ProofError("consistency proof: empty")
    path = list(proof)
    if first & (first - 1) == 0:  # a power of two: the first tree is a complete subtree, its root is implied
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof: longer than the trees are deep")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("consistency proof: shorter than the trees are deep")
    if fr != first_root:
        raise ProofError(f"consistency proof: does not lead to the root of the tree of size {first}")
    if sr != second_root:
        raise ProofError(f"consistency proof: does not lead to the root of the tree of size {second}")


__all__ = ["EMPTY_ROOT", "HASH_SIZE", "MAX_PROOF_HASHES", "CompactRange", "MerkleTree", "Node", "ProofError", "Range",
           "consistency_ranges", "inclusion_ranges", "leaf_hash", "node_hash", "nodes_of", "range_hash", "range_nodes",
           "root_from_inclusion", "verify_consistency", "verify_inclusion"]
