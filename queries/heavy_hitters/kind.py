"""The `heavy_hitters` query kind: TrieHH (sample and threshold) and hardened TrieHH (noisy secure histograms).

The server grows a trie of popular prefixes one character per round. Round d hands devices the frontier
(the released prefixes of length d); each device votes, through secure aggregation, for the next
character of its string (or for "the string ends here") when the string's prefix is on the frontier,
and sends an all-zero vector otherwise, so taking part reveals nothing by itself. The kind keeps the
extensions whose (noisy) count reaches the round's threshold; a kept extension of length `max_length`
or a kept end marker is a heavy hitter. At most `max_length` rounds (= the L of the TrieHH analysis).

Modes:
- `triehh` — Zhu et al. 2020: each round a Bernoulli(q) sample of the checked-in devices votes and an
  extension needs ≥ θ votes; no noise is added. θ and q come from (ε, δ, L) by Corollary 1
  (`calibration.py`), or are set by hand (`theta`, `sample_rate`) for tests and demos.
- `secagg` — hardened TrieHH: every device votes every round, each adds its share of distributed
  discrete-Gaussian/Skellam noise (calibrated by the server from `privacy` over `rounds_upper_bound`
  rounds with the sensitivities in the RoundPlan), and an extension is released when its noisy count
  reaches the release threshold. The frontier is capped at `max_frontier` prefixes (highest counts).

See docs/heavy_hitters.md for the vector layout, the string rules and the privacy statements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, StringConstraints, field_validator, model_validator

from queries.heavy_hitters import calibration as cal
from queries.heavy_hitters.encoding import DEFAULT_ALPHABET, choose_words, vote_layout, vote_vector
from queries.kind import (
    KindExample,
    KindTemplate,
    AggregateNoise,
    ExpectedValue,
    QueryKind,
    QueryKindError,
    Release,
    ReleaseWarning,
    RoundPlan,
    RoundPreview,
    value_path,
)
from queries.release import release_threshold
from queries.spec import MIN_DELTA, MIN_EPSILON, PrivacySpec
from queries.table import Cell, Chart, Column, ResultTable, num_cell
from queries.selective import released_interval
from queries.uncertainty import value_at
from secagg.validity.statement import Bits, Statement

# Limits of a heavy_hitters spec (docs/heavy_hitters.md, "Limits"): a round's vector has at most
# MAX_FRONTIER·(MAX_ALPHABET + 1) = 528,384 entries, and at most MAX_LENGTH rounds run.
MAX_LENGTH = 64
MAX_ALPHABET = 128
MAX_WORDS_PER_DEVICE = 16
MAX_FRONTIER = 4096
MAX_POPULATION = 10**10
MAX_THETA = 10_000
"""Largest hand-set θ (Theorem 1 also needs θ ≤ √n, and √MAX_POPULATION = 100,000)."""
MAX_COUNT = 10**12
"""Largest `release_threshold` / `min_release_count`."""

END = "$"
"""How the end marker is shown in docs and tests; never part of a string (the vector has its own slot)."""


class HeavyHittersParams(BaseModel):
    """`params` of a heavy_hitters query. Fields of the other mode are refused, not ignored."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, strict=True,
        json_schema_extra={"examples": [{"mode": "secagg", "max_length": 8}]},
    )
    CONTRIBUTION_BOUND: ClassVar[tuple[str, ...]] = ("max_words_per_device",)
    """Params that bound one device's vector (named when a noise plan does not fit the devices)."""

    mode: Literal["triehh", "secagg"]
    max_length: int = Field(default=10, ge=1, le=MAX_LENGTH)
    """L: longest string that can be found; also the number of rounds."""
    alphabet: str = Field(default=DEFAULT_ALPHABET, min_length=1, max_length=MAX_ALPHABET)
    casefold: bool = True
    max_words_per_device: int = Field(default=1, ge=1, le=MAX_WORDS_PER_DEVICE)
    max_frontier: int = Field(default=256, ge=1, le=MAX_FRONTIER)
    """Most prefixes carried into the next round (highest counts first); bounds the vector length."""

    # mode "triehh": either (epsilon, delta[, population_size]) or (theta, sample_rate).
    epsilon: float | None = Field(default=None, ge=MIN_EPSILON, le=100)
    """In [1e-6, 100] (`queries.spec.MIN_EPSILON`)."""
    delta: float | None = Field(default=None, ge=MIN_DELTA, lt=1)
    """In [1e-30, 1) (`queries.spec.MIN_DELTA`)."""
    population_size: int | None = Field(default=None, ge=1, le=MAX_POPULATION)
    theta: int | None = Field(default=None, ge=1, le=MAX_THETA)
    sample_rate: float | None = Field(default=None, gt=0, le=1)

    # mode "secagg"
    release_threshold: float | None = Field(default=None, gt=0, le=MAX_COUNT)
    """Fixed threshold on a noisy count; default: derived from the noise (see `false_release_rate`)."""
    false_release_rate: float = Field(default=0.05, gt=0, lt=1)
    """Default threshold: a slot with true count 0 is released in a round with at most this probability
    summed over all the round's slots (Gaussian tail bound on the aggregate's noise)."""
    min_release_count: int = Field(default=1, ge=1, le=MAX_COUNT)
    """Floor of the default threshold (the whole threshold when the query carries no noise)."""

    _triehh: tuple[int, float] | None = PrivateAttr(default=None)

    @field_validator("alphabet")
    @classmethod
    def _alphabet_ok(cls, v: str) -> str:
        seen: set[str] = set()
        dupes = sorted({c for c in v if c in seen or seen.add(c)})  # type: ignore[func-returns-value]
        if dupes:
            raise ValueError(f"duplicate characters {''.join(dupes)!r}")
        bad = sorted({c for c in v if not c.isprintable() or c.isspace()})
        if bad:
            raise ValueError(f"whitespace or non-printable characters {''.join(bad)!r} are not allowed")
        return v

    @model_validator(mode="after")
    def _mode_fields(self) -> HeavyHittersParams:
        triehh_only = ("epsilon", "delta", "population_size", "theta", "sample_rate")
        secagg_only = ("release_threshold",)
        if self.mode == "secagg":
            for name in triehh_only:
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"{name}: only for mode 'triehh' (in mode 'secagg' the noise is calibrated from the"
                        " query's privacy block)"
                    )
            return self
        for name in secagg_only:
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only for mode 'secagg'")
        by_privacy = self.epsilon is not None or self.delta is not None
        by_hand = self.theta is not None or self.sample_rate is not None
        if by_privacy and by_hand:
            raise ValueError("theta: give either epsilon and delta, or theta and sample_rate, not both")
        if by_privacy:
            if self.epsilon is None:
                raise ValueError("epsilon: required with delta in mode 'triehh'")
            if self.delta is None:
                raise ValueError("delta: required with epsilon in mode 'triehh'")
            try:
                c = cal.calibrate_triehh(
                    self.epsilon, self.delta, self.max_length, self.population_size, self.max_words_per_device
                )
            except cal.CalibrationError as exc:
                raise ValueError(str(exc)) from None
            self._triehh = (c.theta, c.sample_rate)
        elif by_hand:
            if self.theta is None:
                raise ValueError("theta: required with sample_rate in mode 'triehh'")
            if self.sample_rate is None:
                raise ValueError("sample_rate: required with theta in mode 'triehh'")
            self._triehh = (self.theta, self.sample_rate)
        else:
            raise ValueError("epsilon: mode 'triehh' needs epsilon and delta (or theta and sample_rate)")
        return self

    @property
    def triehh(self) -> tuple[int, float]:
        """(θ, per-device sampling rate q) of mode triehh."""
        if self._triehh is None:
            raise QueryKindError("mode: θ and the sampling rate exist only in mode 'triehh'")
        return self._triehh

    @property
    def width(self) -> int:
        return len(self.alphabet) + 1


class HeavyHittersTask(BaseModel):
    """A heavy_hitters round's task: the frontier of prefixes of length `depth` that devices vote to extend."""

    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Literal["triehh", "secagg"]
    depth: int = Field(ge=0, lt=MAX_LENGTH)
    frontier: list[Annotated[str, StringConstraints(max_length=MAX_LENGTH)]] = Field(max_length=MAX_FRONTIER)
    alphabet: str = Field(min_length=1, max_length=MAX_ALPHABET)
    max_length: int = Field(ge=1, le=MAX_LENGTH)
    max_words: int = Field(ge=1, le=MAX_WORDS_PER_DEVICE)
    casefold: bool = True

    @model_validator(mode="after")
    def _consistent(self) -> HeavyHittersTask:
        if len(set(self.alphabet)) != len(self.alphabet):
            raise ValueError("alphabet: characters must be distinct")
        if self.depth >= self.max_length:
            raise ValueError(f"depth: must be in [0, max_length), got {self.depth}")
        if any(len(p) != self.depth for p in self.frontier) or len(set(self.frontier)) != len(self.frontier):
            raise ValueError(f"frontier: prefixes must be distinct and of length depth={self.depth}")
        return self


@dataclass(frozen=True)
class HeavyHittersState:
    """The trie so far. Round d (depth d) extends the frontier's prefixes of length d by one character."""

    depth: int = 0
    frontier: list[str] = field(default_factory=lambda: [""])
    trie: dict[str, int] = field(default_factory=dict)
    """Every kept prefix → its (noisy) count in the round that kept it."""
    found: dict[str, int] = field(default_factory=dict)
    """Heavy hitters so far → count."""
    rounds: int = 0
    thresholds: list[float] = field(default_factory=list)
    contributors: list[int] = field(default_factory=list)
    frontier_truncated: int = 0
    noise_std: list[float] = field(default_factory=list)
    """Per round, the standard deviation of each count's noise (0 without noise)."""


FIRST_LEVEL_WEIGHT = 0.25
"""Unit rounds of the budget the first round (single characters) spends in mode secagg; the other L − 1 rounds
share the rest equally. A first character is held by every string that starts with it, so the prefixes the top
strings need are counted in thousands there and tolerate twice the noise; the budget it frees lowers every later
round's noise (docs/heavy_hitters.md, "Budget across levels")."""


def level_weight(params: HeavyHittersParams, depth: int) -> float:
    """The privacy weight of the round that extends prefixes of length `depth` (the weights add up to max_length)."""
    if params.mode != "secagg" or params.max_length < 2:
        return 1.0
    if depth == 0:
        return FIRST_LEVEL_WEIGHT
    return (params.max_length - FIRST_LEVEL_WEIGHT) / (params.max_length - 1)


def _count_at(result: dict[str, Any], path: str) -> float:
    value = value_at(result, path)
    return float(value) if isinstance(value, (int, float)) else 0.0

HEAVY_HITTERS_TEMPLATE = KindTemplate(
    "heavy_hitters: the most common strings, found without a dictionary (TrieHH hardened with secure "
    "aggregation: every device votes every round)",
    {
        "kind": "heavy_hitters",
        "name": "popular words",
        "source": "words",
        "params": {"mode": "secagg", "max_length": 8, "alphabet": "abcdefghijklmnopqrstuvwxyz",
                   "max_frontier": 16},
        "privacy": {"mechanism": "skellam", "epsilon": 2.0, "delta": 1e-6},
        "cohort": {"min_clients": 100, "max_clients": 1000, "phase_timeout_s": 60},
    },
    {
        "params.mode": "secagg (noisy secure votes, one round per character) or triehh (sampling and "
                       "a threshold, Zhu et al.; no noise)",
        "params.max_length": "longest string found: at most this many rounds",
        "params.alphabet": "characters a string may hold; others end it",
        "params.max_frontier": "most prefixes extended per round (the most voted are kept)",
        "privacy.epsilon": "the query's total epsilon, split over its rounds",
    },
)
"""Starter spec of `fa init heavy_hitters` (queries.templates)."""


class HeavyHittersKind(QueryKind[HeavyHittersParams, HeavyHittersState]):
    name = "heavy_hitters"
    supports_proofs = True
    Params = HeavyHittersParams
    State = HeavyHittersState
    examples = (KindExample({"mode": "secagg", "max_length": 4, "alphabet": "abcdefghijklmnopqrstuvwxyz"}, ["hello"]),)
    template = HEAVY_HITTERS_TEMPLATE
    Task = HeavyHittersTask

    def rounds_upper_bound(self, params: HeavyHittersParams) -> int:
        return params.max_length

    def initial_state(self, params: HeavyHittersParams) -> HeavyHittersState:
        return HeavyHittersState()

    def plan_round(self, params: HeavyHittersParams, state: HeavyHittersState, round_index: int) -> RoundPlan | None:
        depth, frontier = state.depth, state.frontier
        if not frontier or depth >= params.max_length:
            return None
        task = HeavyHittersTask(mode=params.mode, depth=depth, frontier=list(frontier), alphabet=params.alphabet,
                                max_length=params.max_length, max_words=params.max_words_per_device,
                                casefold=params.casefold)
        rate = params.triehh[1] if params.mode == "triehh" else 1.0
        l1, l2 = self.task_sensitivity(task)
        weight = level_weight(params, depth)
        return RoundPlan(
            round=round_index,
            task=self.task_json(task),
            dim=vote_layout(len(frontier), len(params.alphabet)).dim,
            max_abs=1,
            l1_sensitivity=l1,
            l2_sensitivity=l2,
            sample_rate=rate,
            privacy_weight=weight,
            meta={"depth": depth},
        )

    def task_sensitivity(self, task: HeavyHittersTask) -> tuple[float, float]:
        """At most `max_words` 0/1 votes: L1 w, L2 √w."""
        w = task.max_words
        return float(w), math.sqrt(w)

    def contribute(self, task: HeavyHittersTask, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        t = task
        words = choose_words(rows, t.alphabet, t.max_length, t.max_words, t.casefold)
        return vote_vector(words, t.frontier, t.depth, t.alphabet)

    def validity(self, task: HeavyHittersTask) -> Statement:
        """Every slot 0 or 1, at most `max_words` of them 1 (one vote per chosen string)."""
        t = task
        return Statement((Bits(len(t.frontier) * (len(t.alphabet) + 1), t.max_words),))

    def largest_validity(self, params: HeavyHittersParams) -> Statement:
        """A full frontier: `max_frontier` prefixes."""
        return Statement((Bits(params.max_frontier * params.width, params.max_words_per_device),))

    def threshold(
        self, params: HeavyHittersParams, plan: RoundPlan, contributors: int, noise: AggregateNoise | None = None
    ) -> float:
        """The count an extension needs in this round to be kept."""
        if params.mode == "triehh":
            return float(params.triehh[0])
        if params.release_threshold is not None:
            return params.release_threshold
        return release_threshold(noise, contributors, plan.dim, params.false_release_rate, params.min_release_count)

    def decode_round(
        self,
        params: HeavyHittersParams,
        state: HeavyHittersState,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> HeavyHittersState:
        frontier = state.frontier
        width = params.width
        counts = vote_layout(len(frontier), len(params.alphabet)).view(np.asarray(aggregate, dtype=np.int64), "aggregate")["votes"]
        tau = self.threshold(params, plan, contributors, noise)
        trie = dict(state.trie)
        found = dict(state.found)
        extended: list[tuple[int, str]] = []
        for i, j in zip(*np.nonzero(counts >= tau)):
            prefix, count = frontier[i], int(counts[i, j])
            if j == width - 1:
                if prefix:  # the empty string is never eligible; a released root end marker is noise
                    found[prefix] = count
                continue
            grown = prefix + params.alphabet[j]
            trie[grown] = count
            if len(grown) == params.max_length:
                found[grown] = count  # no longer string exists, so this prefix is a whole string
            else:
                extended.append((count, grown))
        extended.sort(key=lambda cp: (-cp[0], cp[1]))
        earlier_std = state.noise_std + [0.0] * (state.rounds - len(state.noise_std))  # states stored without it
        return HeavyHittersState(
            depth=state.depth + 1,
            frontier=[p for _, p in extended[: params.max_frontier]],
            trie=trie,
            found=found,
            rounds=state.rounds + 1,
            thresholds=state.thresholds + [tau],
            contributors=state.contributors + [int(contributors)],
            frontier_truncated=state.frontier_truncated + max(0, len(extended) - params.max_frontier),
            noise_std=earlier_std + [0.0 if noise is None else float(noise.std)],
        )

    def preview(self, params: HeavyHittersParams, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """Every released count (heavy hitters and trie prefixes) carries its round's noise std; which strings
        appear depends on the data, so the paths are representative."""
        if not rounds:
            return [], []
        std = max(r.std for r in rounds)
        note = "every released count (the strings, hence the paths, depend on the data)"
        values = [ExpectedValue(value_path("heavy_hitters", 0, "count"), std, note),
                  ExpectedValue(value_path("trie", params.alphabet[0]), std, note)]
        warnings = []
        if params.mode == "secagg" and std > 0:
            plan = rounds[0].plan
            tau = params.release_threshold or release_threshold(
                AggregateNoise(std), rounds[0].contributors, plan.dim, params.false_release_rate, params.min_release_count)
            warnings.append(ReleaseWarning(None, f"a prefix needs a noisy count of about {tau:.4g} devices in its round "
                                                 f"to be kept (noise std {std:.4g} per count); rarer strings are not found"))
        return values, warnings

    def finalize(self, params: HeavyHittersParams, state: HeavyHittersState, stop_reason: str | None = None) -> Release:
        hitters = sorted(state.found.items(), key=lambda kv: (-kv[1], kv[0]))
        trie = dict(sorted(state.trie.items()))
        result = {
            "heavy_hitters": [{"value": v, "count": c} for v, c in hitters],
            "trie": trie,
            "rounds": state.rounds,
            "mode": params.mode,
            "thresholds": state.thresholds,
            "contributors": state.contributors,
            "frontier_truncated": state.frontier_truncated,
        }

        def round_std(depth: int) -> float:
            return state.noise_std[depth] if depth < len(state.noise_std) else 0.0

        def round_tau(depth: int) -> float | None:
            return state.thresholds[depth] if depth < len(state.thresholds) else None

        selected: dict[str, tuple[float, float | None]] = {}
        for i, (value, _) in enumerate(hitters):  # a whole string of length L was counted as an extension
            depth = len(value) - 1 if len(value) == params.max_length else len(value)
            if round_std(depth) > 0:
                selected[value_path("heavy_hitters", i, "count")] = (round_std(depth), round_tau(depth))
        for prefix in trie:  # a prefix of length d + 1 was counted in round d
            if round_std(len(prefix) - 1) > 0:
                selected[value_path("trie", prefix)] = (round_std(len(prefix) - 1), round_tau(len(prefix) - 1))
        noise_std = {p: std for p, (std, _) in selected.items()}
        advice = "raise privacy.epsilon or include more devices (cohort.min_clients)"
        # every count was kept because it reached its round's threshold: intervals conditional on that
        intervals = {p: released_interval(float(_count_at(result, p)), std, tau) for p, (std, tau) in selected.items()}
        return Release(result, {"release_thresholds": state.thresholds}, noise_std, intervals=intervals, advice=advice,
                       auxiliary=("/trie",))

    def bind_privacy(self, raw_params: dict[str, Any], privacy: PrivacySpec) -> dict[str, Any]:
        """Mode triehh: its guarantee comes from sampling and θ, not from noise, so the spec's privacy
        mechanism must be "none"; the spec's privacy epsilon/delta (when given) are copied into the params
        that calibrate θ and the sampling rate. Mode secagg: unchanged (the server's noise applies)."""
        if not isinstance(raw_params, dict) or raw_params.get("mode") != "triehh":
            return raw_params
        if privacy.mechanism != "none":
            raise QueryKindError(
                f"privacy.mechanism: mode 'triehh' adds no noise (its privacy comes from sampling and the"
                f" threshold theta), so {privacy.mechanism!r} cannot apply; use 'none' (with epsilon and delta"
                " to calibrate theta and sample_rate) or mode 'secagg'"
            )
        if privacy.epsilon is None and privacy.delta is None:
            return raw_params
        out = dict(raw_params)
        for name in ("epsilon", "delta"):
            given, wanted = out.get(name), getattr(privacy, name)
            if wanted is None:
                continue
            if given is not None and given != wanted:
                raise QueryKindError(f"params.{name}: {given} disagrees with privacy.{name} = {wanted}")
            out[name] = wanted
        if out.get("theta") is not None or out.get("sample_rate") is not None:
            raise QueryKindError(
                "params.theta: give either privacy epsilon/delta (theta and sample_rate are then calibrated)"
                " or theta and sample_rate by hand, not both"
            )
        return out

    def privacy(self, params: HeavyHittersParams) -> dict[str, Any] | None:
        """Mode triehh's privacy block (sampling + threshold, no noise); None in mode secagg (server's)."""
        if params.mode != "triehh":
            return None
        theta, rate = params.triehh
        block: dict[str, Any] = {
            "mechanism": "triehh_sample_threshold",
            "theta": theta,
            "sample_rate": rate,
            "rounds_calibrated": params.max_length,
            "max_words_per_device": params.max_words_per_device,
        }
        if params.epsilon is not None:
            assert params.delta is not None
            c = cal.calibrate_triehh(params.epsilon, params.delta, params.max_length, None, params.max_words_per_device)
            block |= {"epsilon": c.epsilon, "delta": c.delta}
            if params.population_size is not None:
                block |= {"population_size": params.population_size,
                          "expected_sample": rate * params.population_size}
            return block
        explicit = cal.privacy_of_explicit(theta, rate, params.max_length, params.max_words_per_device)
        if explicit is None:
            block |= {"epsilon": None, "delta": None,
                      "note": "theta/sample_rate set by hand outside Theorem 1's conditions (or with more words per "
                              "device than its guarantee survives, δ ≥ 1 by group privacy): no DP guarantee"}
        else:
            block |= {"epsilon": explicit[0], "delta": explicit[1]}
        return block

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """One row per heavy hitter, most frequent first, with bars of the counts (the trie stays in the JSON)."""
        hitters = list(enumerate(result.get("heavy_hitters") or []))
        hitters.sort(key=lambda ih: -(ih[1].get("count") or 0))
        rows = tuple({"rank": Cell(rank), "value": Cell(hh.get("value")), "count": num_cell(hh.get("count"), "heavy_hitters", i, "count")}
                     for rank, (i, hh) in enumerate(hitters, 1))
        trie = result.get("trie") or {}
        prefixes = tuple({"prefix": Cell(p), "length": Cell(len(p)), "count": num_cell(c, "trie", p)} for p, c in sorted(trie.items()))
        return [ResultTable("heavy_hitters", None, (Column("rank", "rank", "key"), Column("value", "value", "key"),
                                                    Column("count", "count", "value")),
                            rows, Chart("bar", "value", ("count",)),
                            f"{result.get('rounds')} rounds, mode {result.get('mode')}; the trie of prefixes: --format json",
                            empty=f"no string reached the release threshold ({result.get('rounds')} rounds)"),
                ResultTable("trie", "trie of popular prefixes (devices that voted for each; \"$\" ends a string)",
                            (Column("prefix", "prefix", "key"), Column("length", "length", "text"),
                             Column("count", "count", "value")), prefixes)]
