"""Pseudo-words for the `heavy_hitters` kind (simulation data only).

Registers the scenarios
- `zipf_words` — collection `words`: one pseudo-word per device from a fixed vocabulary (lowercase ASCII,
  ≤ 6 letters) with Zipf(1.1) ranks.
- `planted` — collection `words`: with probability `PLANTED` the device holds one of the planted strings
  (known top strings of the population), otherwise a `zipf_words` tail word.
"""

from __future__ import annotations

import functools

import numpy as np

from fleet_sim.scenarios.registry import Rows, scenario

VOCABULARY_SEED = 0
WORD_MAX_LENGTH = 6
WORD_ALPHABET = "abcdefghijklmnopqrstuvwxyz"
PLANTED = {"hello": 0.14, "world": 0.11, "fed": 0.08, "query": 0.06}
"""Planted strings and the probability that a device holds each (the rest: Zipf tail words)."""


@functools.lru_cache(maxsize=1)
def _vocabulary() -> tuple[list[str], np.ndarray]:
    from fleet_sim.populations import pseudo_words

    vocab = [w for w in pseudo_words(600, np.random.default_rng(VOCABULARY_SEED), WORD_MAX_LENGTH) if w not in PLANTED]
    weights = np.arange(1, len(vocab) + 1, dtype=np.float64) ** -1.1
    return vocab, weights / weights.sum()


def _zipf_word(rng: np.random.Generator) -> str:
    vocab, p = _vocabulary()
    return vocab[int(rng.choice(len(vocab), p=p))]


@scenario("zipf_words", f"collection words: one pseudo-word (≤ {WORD_MAX_LENGTH} lowercase letters) per device, "
          "Zipf(1.1) over a fixed vocabulary")
def _zipf_words(rng: np.random.Generator, i: int) -> Rows:
    return {"words": [_zipf_word(rng)]}


@scenario("planted", f"collection words: planted top strings {', '.join(PLANTED)} "
          f"(p = {', '.join(map(str, PLANTED.values()))}), otherwise a zipf_words word")
def _planted(rng: np.random.Generator, i: int) -> Rows:
    u, acc = rng.random(), 0.0
    for word, p in PLANTED.items():
        acc += p
        if u < acc:
            return {"words": [word]}
    return {"words": [_zipf_word(rng)]}
