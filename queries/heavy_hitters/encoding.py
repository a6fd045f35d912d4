"""Device-side string handling and the vote-vector layout (`vote_layout`) shared by contribute and decode.

Layout of one round's vector: for each prefix on the frontier (in the task's order) one block of
|alphabet| + 1 slots — one per next character, then the end marker ("the string ends here"). A device
sets a slot to 1 when one of its chosen strings has that prefix and continues with that character (or
ends); every other slot is 0. Several strings of one device that vote for the same slot count once, so
every entry is 0 or 1 and the vector has at most `max_words` ones: L1 sensitivity w, L2 sensitivity √w.

Normalisation (on the device, before anything is counted): Unicode NFKC, surrounding whitespace
stripped, and — when `casefold` is on (the default) — case-folded ("Moon" and "moon" are one string).
A string that is then empty, longer than `max_length`, or contains a character outside the alphabet is
*not eligible*: the device ignores it, as if it were absent (no mapping of foreign characters, so no two
different strings are silently merged). The device's chosen strings are its `max_words` most frequent
eligible strings, ties broken by the string itself (lexicographically smallest first), so the choice is
deterministic.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from queries.layout import Layout

DEFAULT_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-_.'"
"""Lowercase ASCII letters, digits and four punctuation marks common in words, handles and URLs."""


def normalize(value: str, casefold: bool = True) -> str:
    """The canonical form a device counts: NFKC, stripped, optionally case-folded."""
    s = unicodedata.normalize("NFKC", value).strip()
    return s.casefold() if casefold else s


def is_eligible(s: str, alphabet: frozenset[str] | str, max_length: int) -> bool:
    return 0 < len(s) <= max_length and all(ch in alphabet for ch in s)


def choose_words(
    rows: Iterable[object], alphabet: str, max_length: int, max_words: int, casefold: bool = True
) -> list[str]:
    """The device's `max_words` most frequent eligible strings (non-strings and ineligible ones ignored)."""
    allowed = frozenset(alphabet)
    counts: Counter[str] = Counter()
    for row in rows:
        if isinstance(row, str):
            s = normalize(row, casefold)
            if is_eligible(s, allowed, max_length):
                counts[s] += 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [s for s, _ in ranked[:max_words]]


def vote_layout(frontier_size: int, alphabet_size: int) -> Layout:
    """One block per frontier prefix, one slot per next character then the end marker."""
    return Layout.of(votes=(frontier_size, alphabet_size + 1))


def vote_slots(words: Sequence[str], frontier_index: dict[str, int], depth: int, alphabet_index: dict[str, int]) -> set[tuple[int, int]]:
    """(block, slot) pairs the words vote for at this depth (prefixes of length `depth` on the frontier)."""
    slots: set[tuple[int, int]] = set()
    for word in words:
        if len(word) < depth:
            continue
        block = frontier_index.get(word[:depth])
        if block is None:
            continue
        offset = len(alphabet_index) if len(word) == depth else alphabet_index[word[depth]]
        slots.add((block, offset))
    return slots


def vote_vector(words: Sequence[str], frontier: Sequence[str], depth: int, alphabet: str) -> np.ndarray:
    """The 0/1 int64 vote vector of `vote_layout(len(frontier), len(alphabet))`."""
    layout = vote_layout(len(frontier), len(alphabet))
    votes = np.zeros(layout["votes"].shape, dtype=np.int64)
    for block, offset in vote_slots(words, {p: i for i, p in enumerate(frontier)}, depth, {c: i for i, c in enumerate(alphabet)}):
        votes[block, offset] = 1
    return layout.pack(votes=votes)
