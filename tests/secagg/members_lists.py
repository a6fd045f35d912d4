"""Helpers for tests that play a server lying about the members list (protocol 3, `secagg.crypto.members_root`).

PeerKeys carries one 16-byte leaf per party (`crypto.member_leaf(party, identity, c_pk, s_pk)`); a client checks its
own leaf and every entry it is shown against the list, draws its neighbour graph from the list's root and binds every
later key and signature to it. A server that alters an entry alone is caught by the leaf check; one that also rewrites
the leaf (`relisted`) shows the victim a members list of its own, whose root — hence graph and binding — differs from
everyone else's (`view_binding`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from secagg import crypto
from secagg.messages import PeerEntry, PeerKeys

LEAF = crypto.MEMBER_LEAF_BYTES


def leaf_of(leaves: bytes, party: int) -> bytes:
    return leaves[(party - 1) * LEAF: party * LEAF]


def with_leaf(leaves: bytes, party: int, leaf: bytes) -> bytes:
    """`leaves` with party's leaf replaced."""
    return leaves[: (party - 1) * LEAF] + leaf + leaves[party * LEAF:]


def entry_leaf(e: PeerEntry) -> bytes:
    return crypto.member_leaf(e.party, e.identity, e.c_pk, e.s_pk)


def relisted(msg: PeerKeys, peers: Iterable[PeerEntry]) -> PeerKeys:
    """`msg` showing `peers`, with the members list rewritten to match them: the leaf of every entry shown becomes the
    leaf of what is shown (the server's consistent lie; the other leaves stay as they were)."""
    peers = tuple(peers)
    leaves = msg.leaves
    for e in peers:
        leaves = with_leaf(leaves, e.party, entry_leaf(e))
    return dataclasses.replace(msg, peers=peers, leaves=leaves)


def view_binding(bind: bytes, msg: PeerKeys) -> bytes:
    """The binding (session ‖ task digest ‖ members root) of a party shown `msg`: what its channel keys, masks and
    signatures are bound to from its share keys on."""
    return crypto.round_binding(bind, crypto.members_root(msg.leaves))


def replace_keys(msg: PeerKeys, party: int, **fields: bytes) -> tuple[PeerEntry, ...]:
    """`msg`'s entries with party's fields replaced."""
    return tuple(dataclasses.replace(e, **fields) if e.party == party else e for e in msg.peers)
