"""RFC 9162 (Certificate Transparency 2.0) Merkle tree hashing and proofs, §2.1.

    leaf hash  = SHA-256(0x00 ‖ leaf bytes)
    node hash  = SHA-256(0x01 ‖ left ‖ right)

`MerkleTree` holds a log's leaf hashes in memory together with every complete (perfect) subtree's hash, so
a root, an inclusion proof or a consistency proof costs O(log n) hashes once the leaves are in; appending a
leaf completes at most log2(n) subtrees. `verify_inclusion` and `verify_consistency` are the RFC's
verification algorithms (§2.1.3.2, §2.1.4.2) and raise `ProofError` naming what failed. Known-answer
vectors (the transparency-dev reference vectors): tests/vectors/translog.json.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

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

    def _hash(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for ranges the RFC's recursions produce (lo a multiple of the left part's size)."""
        n = hi - lo
        if n == 0:
            return EMPTY_ROOT
        level = n.bit_length() - 1
        if n == 1 << level and lo % n == 0:
            return self.levels[level][lo >> level]
        k = _split(n)
        return node_hash(self._hash(lo, lo + k), self._hash(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        """The tree head hash of the first `size` leaves (all of them by default)."""
        size = self.size if size is None else size
        self._check_size(size)
        return self._hash(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1)."""
        size = self.size if size is None else size
        self._check_size(size)
        if not 0 <= index < size:
            raise ProofError(f"index {index} is not below the tree size {size}")
        proof: list[bytes] = []
        lo, hi, m = 0, size, index
        while hi - lo > 1:
            k = _split(hi - lo)
            if m - lo < k:
                proof.append(self._hash(lo + k, hi))
                hi = lo + k
            else:
                proof.append(self._hash(lo, lo + k))
                lo = lo + k
        proof.reverse()
        return proof

    def consistency_proof(self, first: int, second: int | None = None) -> list[bytes]:
        """PROOF(first, D[0:second]) (RFC 9162 §2.1.4.1); empty when first is 0 or equals second."""
        second = self.size if second is None else second
        self._check_size(second)
        if not 0 <= first <= second:
            raise ProofError(f"consistency: first size {first} must be in 0..{second}")
        if first == 0 or first == second:
            return []
        return self._subproof(first, 0, second, True)

    def _subproof(self, m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if complete else [self._hash(lo, hi)]
        k = _split(n)
        if m <= k:
            return self._subproof(m, lo, lo + k, complete) + [self._hash(lo + k, hi)]
        return self._subproof(m - k, lo + k, hi, False) + [self._hash(lo, lo + k)]

    def root_with(self, extra: Sequence[bytes]) -> bytes:
        """The root after appending `extra` leaf hashes, without appending them."""
        peaks = self._peaks()
        for h in extra:
            peaks.append((0, h))
            while len(peaks) >= 2 and peaks[-1][0] == peaks[-2][0]:
                (lvl, right), (_, left) = peaks.pop(), peaks.pop()
                peaks.append((lvl + 1, node_hash(left, right)))
        if not peaks:
            return EMPTY_ROOT
        acc = peaks[-1][1]
        for _, h in reversed(peaks[:-1]):
            acc = node_hash(h, acc)
        return acc

    def _peaks(self) -> list[tuple[int, bytes]]:
        """The perfect subtrees covering the leaves, left to right, as (level, hash)."""
        out, lo, n = [], 0, self.size
        for level in range(n.bit_length() - 1, -1, -1):
            if n >> level & 1:
                out.append((level, self.levels[level][lo >> level]))
                lo += 1 << level
        return out

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


__all__ = ["EMPTY_ROOT", "HASH_SIZE", "MAX_PROOF_HASHES", "MerkleTree", "ProofError", "leaf_hash", "node_hash",
           "root_from_inclusion", "verify_consistency", "verify_inclusion"]
