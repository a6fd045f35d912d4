"""RFC 9162 tree hashing and proofs (translog.merkle): the transparency-dev reference vectors, and properties —
every honest proof verifies, and any changed hash, index, size or root makes it fail."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from translog.merkle import (
    EMPTY_ROOT,
    CompactRange,
    MerkleTree,
    ProofError,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    nodes_of,
    range_hash,
    range_nodes,
    verify_consistency,
    verify_inclusion,
)

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "vectors" / "translog.json").read_text())
TREE = next(c["output"] for c in VECTORS["cases"] if c["input"]["name"] == "tree")

# the transparency-dev reference vectors (testonly/reference_test.go), as published: roots and proofs
REFERENCE_ROOTS = {
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}
REFERENCE_INCLUSION = [
    (0, 1, []),
    (0, 2, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"]),
    (1, 2, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]
REFERENCE_CONSISTENCY = [
    (1, 1, []),
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]


def reference_tree() -> MerkleTree:
    return MerkleTree(leaf_hash(bytes.fromhex(x)) for x in TREE["leaves"])


def test_reference_roots_and_proofs() -> None:
    t = reference_tree()
    assert t.root(0) == EMPTY_ROOT
    assert {s: t.root(s).hex() for s in REFERENCE_ROOTS} == REFERENCE_ROOTS
    for index, size, proof in REFERENCE_INCLUSION:
        assert [h.hex() for h in t.inclusion_proof(index, size)] == proof
        verify_inclusion(t.leaf(index), index, size, [bytes.fromhex(h) for h in proof], t.root(size))
    for first, second, proof in REFERENCE_CONSISTENCY:
        assert [h.hex() for h in t.consistency_proof(first, second)] == proof
        verify_consistency(first, second, t.root(first), t.root(second), [bytes.fromhex(h) for h in proof])


def test_the_vectors_file_holds_the_reference_values() -> None:
    assert {int(k): v for k, v in TREE["roots"].items() if k != "0"} == REFERENCE_ROOTS
    got = {(c["index"], c["size"]): c["proof"] for c in TREE["inclusion"]}
    assert all(got[(i, s)] == p for i, s, p in REFERENCE_INCLUSION)


trees = st.integers(min_value=1, max_value=70).map(lambda n: MerkleTree(leaf_hash(bytes([i % 256, i // 256])) for i in range(n)))


@settings(max_examples=150, deadline=None)
@given(trees, st.data())
def test_every_inclusion_proof_verifies_and_any_change_fails(t: MerkleTree, data: st.DataObject) -> None:
    size = data.draw(st.integers(1, t.size))
    index = data.draw(st.integers(0, size - 1))
    proof, root = t.inclusion_proof(index, size), t.root(size)
    verify_inclusion(t.leaf(index), index, size, proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(leaf_hash(b"another"), index, size, proof, root)
    if size > 1:
        with pytest.raises(ProofError):
            verify_inclusion(t.leaf(index), (index + 1) % size, size, proof, root)
        k = data.draw(st.integers(0, len(proof) - 1))
        bent = list(proof)
        bent[k] = bytes([bent[k][0] ^ 1]) + bent[k][1:]
        with pytest.raises(ProofError):
            verify_inclusion(t.leaf(index), index, size, bent, root)
        with pytest.raises(ProofError):
            verify_inclusion(t.leaf(index), index, size, proof[:-1], root)


@settings(max_examples=150, deadline=None)
@given(trees, st.data())
def test_every_consistency_proof_verifies_and_a_fork_fails(t: MerkleTree, data: st.DataObject) -> None:
    second = data.draw(st.integers(1, t.size))
    first = data.draw(st.integers(1, second))
    proof = t.consistency_proof(first, second)
    verify_consistency(first, second, t.root(first), t.root(second), proof)
    fork = MerkleTree(t.leaf(i) for i in range(first - 1))
    fork.append(leaf_hash(b"rewritten"))
    with pytest.raises(ProofError):
        verify_consistency(first, second, fork.root(), t.root(second), proof)
    if first < second:
        with pytest.raises(ProofError):
            verify_consistency(first, second, t.root(first), leaf_hash(b"x"), proof)


@settings(max_examples=60, deadline=None)
@given(trees, st.lists(st.binary(max_size=8), max_size=20))
def test_root_with_equals_appending(t: MerkleTree, extra: list[bytes]) -> None:
    hashes = [leaf_hash(x) for x in extra]
    expected = MerkleTree([t.leaf(i) for i in range(t.size)] + hashes).root()
    assert t.root_with(hashes) == expected


def test_malformed_proofs_are_refused_unread() -> None:
    t = reference_tree()
    with pytest.raises(ProofError, match="at most"):
        verify_inclusion(t.leaf(0), 0, 8, [bytes(32)] * 200, t.root())
    with pytest.raises(ProofError, match="bytes"):
        verify_inclusion(t.leaf(0), 0, 8, [b"short"], t.root())
    with pytest.raises(ProofError, match="not below"):
        verify_inclusion(t.leaf(0), 8, 8, [], t.root())
    with pytest.raises(ProofError):
        verify_consistency(5, 3, t.root(5), t.root(3), [])


@settings(max_examples=80, deadline=None)
@given(trees, st.data())
def test_proofs_from_nodes_alone_are_the_trees(t: MerkleTree, data: st.DataObject) -> None:
    """What a server keeping only nodes does (analytics_server/db/translog_store.py): the ranges' hashes from the
    nodes `nodes_of` names — O(log n) of them — are the proofs, and a compact range grows the same nodes and roots."""
    size = data.draw(st.integers(1, t.size))
    a = data.draw(st.integers(0, size))
    for ranges, proof in ([(consistency_ranges(a, size), t.consistency_proof(a, size))]
                          + ([(inclusion_ranges(a, size), t.inclusion_proof(a, size))] if a < size else [])):
        needed = nodes_of(ranges)
        assert len(needed) <= 2 * size.bit_length() ** 2
        held = {n: t.node(*n) for n in needed}
        assert [range_hash(lo, hi, lambda level, i: held[level, i]) for lo, hi in ranges] == proof
    edge = CompactRange()
    made = [n for i in range(t.size) for n in edge.append(t.leaf(i))]
    assert sorted(made) == sorted((level, i, h) for level in range(1, len(t.levels)) for i, h in enumerate(t.levels[level]))
    assert edge.root() == t.root() and edge.peaks == [t.node(*n) for n in range_nodes(0, t.size)]
    with pytest.raises(ValueError, match="peaks"):
        CompactRange(3, [t.leaf(0)])
