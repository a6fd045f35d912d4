"""Synthetic device populations for evaluating heavy-hitter discovery (simulation data, numpy RNG).

`zipf_population` draws a vocabulary of distinct pronounceable pseudo-words (consonant–vowel syllables,
so that many words share prefixes as real words do, which is what makes trie pruning hard) and gives
each of n devices one word, word of rank k having probability ∝ k^(−s). `english_population` gives each
device one real English word drawn with its frequency in a corpus every Python install carries (the language
reference's text in `pydoc_data.topics`, ~64,000 words, ~3,100 distinct). `file_population` reads one device's
string per line.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

_ONSETS = list("bcdfghjklmnprstvwz") + ["ch", "sh", "th", "st", "tr", "br", "pl", "gr"]
_VOWELS = list("aeiou") + ["ai", "ea", "ou", "oo"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "ng", "ck"]


def pseudo_words(count: int, rng: np.random.Generator, max_length: int = 10) -> list[str]:
    """`count` distinct lowercase pseudo-words of length 2..max_length, in random order."""
    if count < 1:
        raise ValueError(f"count: must be at least 1, got {count}")
    words: dict[str, None] = {}
    attempts = 0
    while len(words) < count:
        attempts += 1
        if attempts > 200 * count + 10_000:
            raise ValueError(f"count: cannot draw {count} distinct words of length ≤ {max_length}")
        syllables = int(rng.choice([1, 2, 3, 4], p=[0.2, 0.4, 0.3, 0.1]))
        w = "".join(
            str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) + str(rng.choice(_CODAS)) for _ in range(syllables)
        )
        if 2 <= len(w) <= max_length:
            words[w] = None
    return list(words)


def zipf_population(
    n: int, rng: np.random.Generator, vocab_size: int = 10_000, exponent: float = 1.1, max_length: int = 10
) -> list[str]:
    """n devices' strings: word of rank k (1-based) with probability ∝ k^(−exponent)."""
    if n < 1:
        raise ValueError(f"n: must be at least 1, got {n}")
    if exponent <= 0:
        raise ValueError(f"exponent: must be positive, got {exponent}")
    vocab = pseudo_words(vocab_size, rng, max_length)
    weights = np.arange(1, vocab_size + 1, dtype=np.float64) ** -exponent
    idx = rng.choice(vocab_size, size=n, p=weights / weights.sum())
    return [vocab[i] for i in idx]


def english_population(n: int, rng: np.random.Generator) -> list[str]:
    """n devices' words, each an i.i.d. draw from the word frequencies of Python's bundled documentation text
    (lower-cased runs of a–z): English as written, held out from anything the kinds were tuned on."""
    if n < 1:
        raise ValueError(f"n: must be at least 1, got {n}")
    import re

    from pydoc_data.topics import topics

    counts = Counter(re.findall(r"[a-z]+", " ".join(topics[k] for k in sorted(topics)).lower()))
    words = sorted(counts)
    weights = np.array([counts[w] for w in words], dtype=np.float64)
    return [words[i] for i in rng.choice(len(words), size=n, p=weights / weights.sum())]


def file_population(path: str | Path) -> list[str]:
    """One device's string per line (blank lines are devices with no string)."""
    text = Path(path).read_text(encoding="utf-8")
    return text.splitlines()


def group(strings: list[str]) -> Counter[str]:
    """Devices grouped by their string: string → number of devices holding it."""
    return Counter(strings)
