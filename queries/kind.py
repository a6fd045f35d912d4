"""The interface every query kind implements (`QueryKind[P, S]`) and the typed values it exchanges with
the server: `RoundPlan` (what a round needs), `AggregateNoise` (the noise in a decoded aggregate) and
`Release` (what a finished query releases). The kinds the service knows are listed in
`queries.registry`; this module knows none of them.

A query is planned as rounds. In each round the server hands devices a task payload; every device turns
its local data into a bounded integer vector (`contribute`); the vectors are summed under secure
aggregation (with distributed noise when the query asks for it); the kind decodes the round's aggregate
into its state and plans the next round or finishes. In VDAF terms: `contribute` is the client shard,
the secure sum is the aggregate, `decode_round`/`finalize` is the unshard.

Types. A kind is generic over its params `P` (a pydantic model: the analyst's JSON, validated at the API
boundary) and its state `S` (a frozen dataclass: what the kind carries between rounds). The server
stores the state as JSON between rounds (a restarted server resumes from it), so the JSON boundary is
part of the contract: `state_to_json`/`state_from_json` convert with a pydantic `TypeAdapter` of the
state dataclass — state fields must be JSON types (str, int, float, bool, None, lists, str-keyed dicts)
or nested dataclasses of them. Old stored states load as long as new fields have defaults.

What crosses the boundary, and nothing else: the server passes the round's noise to `decode_round` as
an `AggregateNoise` (None without noise) and the reason it stopped a query early to `finalize`
(`stop_reason`); `finalize` returns a `Release` (the released result, the release thresholds the kind
applied, the noise std and intervals of released values, the kind's warnings, and a failure the analyst must
not mistake for success). Before a query is submitted, `preview` maps its planned rounds' noise to the
expected noise of each value it will release. The server never reads a kind's state or result keys.

The contract has two halves (like a VDAF's client and aggregator roles). The DEVICE half (`DeviceKind`): the
kind's typed round task (`Task`, a strict pydantic model), `parse_task` (the one function that turns the task JSON a
device receives into a `Task`, refusing `True`, `3.7` or `"3"` for an integer, unknown keys and oversized lists,
with a QueryKindError naming the field), `contribute`, `validity` and `task_sensitivity`, which take the parsed
task only (callers parse once; on the server `RoundPlan.typed_task(kind)` parses a round's task once per plan). The SERVER half (`QueryKind`, which extends the device half): params, planning, decoding, release,
preview. `plan_round` builds the `Task` and puts its JSON (`task_json`) in `RoundPlan.task`, so the wire stays a
plain JSON object. The JSON Schema of each `Task` (`task_schema`) is written to tests/vectors/task_schemas.json,
from which the TypeScript SDK applies the same rules.

Adding a kind touches its own module (with its `examples` and starter `template`), one line of `queries.registry`,
its TypeScript module and one line of the TS registry, and the regenerated vectors; nothing in the server.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, RootModel, TypeAdapter, ValidationError

from queries.spec import PrivacySpec
from secagg.randomness import ByteSource
from secagg.validity.statement import Statement

if TYPE_CHECKING:  # the device imports kinds; it must not load the accountant behind queries.dp
    from queries.dp import RoundNoise
    from queries.table import ResultTable


class QueryKindError(ValueError):
    """A query spec, task payload, vector or stored state that a kind cannot accept; the message names
    the field."""


@dataclass(frozen=True)
class RoundPlan:
    """What the server needs to run one round and what devices need to contribute to it."""

    round: int
    task: dict[str, Any]
    """JSON payload sent to every device of the round (buckets, trie frontier, model weights…)."""
    dim: int
    """Length of the integer vector each device contributes."""
    max_abs: int
    """Bound on |entry| of one device's encoded vector before noise (sizes the secagg modulus)."""
    l1_sensitivity: float
    """Largest L1 norm of one device's encoded vector (what DP calibration protects)."""
    l2_sensitivity: float
    """Largest L2 norm of one device's encoded vector."""
    sample_rate: float = 1.0
    """Fraction of checked-in devices that take part (Bernoulli sampling, e.g. TrieHH's γ)."""
    min_clients: int | None = None
    """Overrides the query's cohort.min_clients for this round when set."""
    privacy_weight: float = 1.0
    """Unit rounds of the query's privacy budget this round spends (`queries.dp.calibrate`, "Round weights"):
    its noise is that of the Gaussian with multiplier z/√weight. A kind that uses weights other than 1 must keep
    the weights of all its rounds summing to at most `rounds_upper_bound` (the server refuses a round that
    would exceed it)."""
    purpose: str | None = None
    """What the round measures, in a few words (shown per round in the result's privacy block)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Kind-private information kept with the round (stored with the plan; the kind reads it back in
    decode_round). The server neither reads nor writes it."""

    def typed_task(self, kind: DeviceKind[T]) -> T:
        """`task` parsed by `kind` (`parse_task`) — once: the typed task is kept on this plan object (not a field,
        so neither `asdict` nor the stored JSON sees it), and every later call returns it."""
        cached = self.__dict__.get("_typed_task")
        if cached is None or cached[0] != kind.name:
            cached = (kind.name, kind.parse_task(self.task))
            object.__setattr__(self, "_typed_task", cached)
        out: T = cached[1]
        return out


@dataclass(frozen=True)
class AggregateNoise:
    """The distributed DP noise in one round's aggregate, as the kind receives it in `decode_round`."""

    std: float
    """Standard deviation of the summed noise in each entry of the aggregate, in the kind's units."""
    round_noise: RoundNoise | None = None
    """The server's calibrated noise of the round (for the scaled encoding s·Δ), from which
    `queries.release` derives rigorous tail bounds; None when only `std` is known (in-process tools)."""
    encoding_scale: int = 1
    """s: devices multiplied their vectors by s and the server divided the aggregate by s (round half
    up) before decoding."""

    @classmethod
    def of_round(cls, noise: RoundNoise, contributors: int, encoding_scale: int = 1) -> AggregateNoise:
        """The noise of a round's aggregate over `contributors` devices, after division by the scale."""
        return cls(noise.std(contributors) / encoding_scale, noise, encoding_scale)


@dataclass(frozen=True)
class ReleaseWarning:
    """Something the analyst must know about a released value (`path`, a JSON Pointer into the result, or
    None for the whole result): what is wrong and what to change."""

    path: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "message": self.message} if self.path is not None else {"message": self.message}


@dataclass(frozen=True)
class Release:
    """What a finished query releases (`finalize`)."""

    result: dict[str, Any]
    """The released `result` object (JSON)."""
    thresholds: dict[str, Any] = field(default_factory=dict)
    """Release thresholds the kind applied, under the names the result's `privacy.thresholds` shows them
    (e.g. `{"release_threshold": τ}`); the server adds its own (`min_contributors`)."""
    noise_std: dict[str, float] = field(default_factory=dict)
    """Standard deviation of the noise in released values, in released units, keyed by the value's JSON
    Pointer into `result` (RFC 6901, `value_path`) — for confidence intervals. Noisy sums are listed, and the
    values derived from them (means, variances, ratios) with their first-order (delta-method) std; absent
    values are exact."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95 % intervals of values listed in `noise_std` whose interval is not value ± 1.96·std (values clamped to
    their possible range, e.g. a count at 0 or a mean at a bound); `queries.uncertainty` fills in the rest."""
    warnings: list[ReleaseWarning] = field(default_factory=list)
    """The kind's own warnings (a floored variance, a bound chosen without evidence, divergence…)."""
    advice: str = "raise privacy.epsilon or include more devices (cohort.min_clients)"
    """What to change when a released value is too noisy (ends the warning of a value whose interval is wider
    than the value itself)."""
    auxiliary: tuple[str, ...] = ()
    """Paths (and everything below them) of values that repeat or explain others (a scaler block, the data that
    chose a bound): described in the uncertainty like every noisy value, but a wide interval there is not
    warned about."""
    failure: str | None = None
    """Set when the outcome is a failure the analyst must not mistake for success (e.g. training diverged):
    the server marks the query failed with this message and keeps the result readable."""


@dataclass(frozen=True)
class RoundPreview:
    """One round as `preview` sees it: the plan, and the noise std of each entry of its aggregate in the kind's
    units at `contributors` devices (0 without noise)."""

    plan: RoundPlan
    std: float
    contributors: int


@dataclass(frozen=True)
class ExpectedValue:
    """The expected noise of one value a query will release (`preview`)."""

    path: str
    """JSON Pointer into the result; representative where the paths depend on the data (say so in `note`)."""
    std: float
    note: str | None = None
    std_range: tuple[float, float] | None = None
    """Where the std depends on the data (rows per device, a bound chosen from the data): its least and largest
    value over what the data may be; None when `std` does not depend on the data."""


def task_error(exc: ValidationError, tagged: bool = False) -> QueryKindError:
    """The QueryKindError of a task that its `Task` model refused, naming the first bad field (`task.buckets.3`).
    `tagged`: the model is a union tagged by one field (a `RootModel` with a discriminator, e.g. feature_stats'
    `stage`): a missing or unknown tag names that field, and the tag pydantic puts first in a location is dropped."""
    first = exc.errors()[0]
    if tagged and first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return QueryKindError(f"task.{str(first['ctx']['discriminator']).strip(chr(39))}: {first['msg']}")
    if tagged:
        first = {**first, "loc": first["loc"][1:]}
    if not first["loc"]:  # a check across fields: its message starts with the field ("depth: …")
        return QueryKindError("task." + str(first["msg"]).removeprefix("Value error, "))
    where = ".".join(str(p) for p in ("task", *first["loc"]))
    return QueryKindError(f"{where}: {first['msg']}")


def contribution_generator(source: ByteSource) -> np.random.Generator:
    """The numpy Generator a kind's `contribute` draws from (row subsampling, shuffles, stochastic rounding —
    never keys, masks or noise): PCG64 seeded from 32 bytes of `source`, so a seeded source reproduces it."""
    return np.random.Generator(np.random.PCG64(int.from_bytes(source.bytes(32), "big")))


def value_path(*parts: str | int) -> str:
    """The JSON Pointer (RFC 6901) of a value inside a result: `value_path("counts", "a/b")` → "/counts/a~1b"."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class KindExample:
    """Params a kind accepts and one device's rows for them: what the import-set probe, the conformance tests' default
    strategy and the kind's encoding vectors run when nothing richer is written for the kind."""

    params: dict[str, Any]
    rows: list[Any]


@dataclass(frozen=True)
class KindTemplate:
    """The kind's starter spec for `fa init KIND` and the console (`queries.templates`): a title, the spec, and a
    note per field of `params` (the common fields' notes are `queries.templates`')."""

    title: str
    spec: dict[str, Any]
    notes: dict[str, str] = field(default_factory=dict)


P = TypeVar("P", bound=BaseModel)
S = TypeVar("S")
T = TypeVar("T", bound=BaseModel)


class DeviceKind(ABC, Generic[T]):
    """The device half of a kind: what a device needs to take part in a round, and nothing of the server's.

    `Task` is the kind's round task (a strict pydantic model: `extra="forbid"`, strict types, bounded sizes). Every
    method below takes the typed task as `parse_task` returns it, never the JSON: a caller parses once (the device
    when it admits an assignment, `device_sdk.admission`; the server through `RoundPlan.typed_task`) and passes the
    task on."""

    name: ClassVar[str]
    Task: type[T]
    supports_proofs: ClassVar[bool] = False
    """Whether devices can prove their contributions to this kind valid (`privacy.validation = "proofs"`);
    a device whose policy has `require_proofs` refuses such a kind's assignments without proofs."""

    def parse_task(self, raw: Any) -> T:
        """The round's task JSON → the typed task; QueryKindError naming the field when the model refuses it."""
        if self.Task is UntypedTask:  # a kind without its own model: the JSON object as given
            if not isinstance(raw, Mapping):
                raise QueryKindError("task: must be a JSON object")
            return raw  # type: ignore[return-value]
        try:
            return self.Task.model_validate(raw)
        except ValidationError as exc:
            raise task_error(exc, tagged=issubclass(self.Task, RootModel)) from None

    def task_json(self, task: T) -> dict[str, Any]:
        """The task as it goes on the wire in `RoundPlan.task` (every field, in declaration order)."""
        out: dict[str, Any] = task.model_dump(mode="json")
        return out

    @classmethod
    def task_schema(cls) -> dict[str, Any]:
        """The JSON Schema of `Task` (what the TypeScript SDK validates tasks against)."""
        out: dict[str, Any] = cls.Task.model_json_schema()
        return out

    @abstractmethod
    def contribute(self, task: T, rows: list[Any], rng: np.random.Generator) -> np.ndarray:
        """The local rows of the query's `source` → an int64 vector of length plan.dim.

        `rng` is the only randomness a kind may use (row sampling, SGD order, stochastic rounding); the
        device draws it from its randomness source, so a seeded source reproduces the vector exactly."""

    def validity(self, task: T) -> Statement | None:
        """Optional hook: what every honest contribution to a round with this `task` satisfies (per segment of
        the vector: votes, signs or ranges), for the devices' validity proofs (`privacy.validation:
        "proofs"`). Both sides derive it from the task, the device to prove and the server to verify.
        Default None: the round's contributions cannot be proved (the server still refuses aggregates that no
        honest cohort could produce)."""
        return None

    def task_sensitivity(self, task: T) -> tuple[float, float] | None:
        """Optional hook: (L1, L2) bounds on the norms of any vector `contribute` returns for this task, computed
        from the task alone — never from the data (raise QueryKindError on a malformed task). The device
        recomputes its noise floor from these bounds instead of the server's declared sensitivities
        (docs/device_sdk.md); `plan_round` should derive its `l1_sensitivity`/`l2_sensitivity` from the same
        function (the conformance suite checks they agree). Default None: the device then uses the declared
        sensitivities and refuses to send a vector that exceeds them."""
        return None


class UntypedTask(BaseModel):
    """The task of a kind that has not declared its own model yet: any JSON object, kept as given."""

    model_config = ConfigDict(extra="allow")


class QueryKind(DeviceKind[Any], Generic[P, S]):
    """One kind of query, with params `P` and state `S`: the server half over the device half (`DeviceKind`).
    Instances are stateless; all state lives in `S`."""

    Params: type[P]
    State: type[S]
    Task: type[Any] = UntypedTask
    examples: ClassVar[tuple[KindExample, ...]] = ()
    """At least one: params and rows the kind runs on (tests derive their default cases from them)."""
    template: ClassVar[KindTemplate | None] = None
    """The starter spec `fa init` writes for this kind (None: the kind offers none)."""

    def parse_params(self, raw: dict[str, Any]) -> P:
        """Validate `params`; raises pydantic.ValidationError naming the bad field."""
        return self.Params.model_validate(raw)

    def rounds_upper_bound(self, params: P) -> int:
        """How many rounds the query can run at most; DP composes its cost over these."""
        return 1

    def bind_privacy(self, raw_params: dict[str, Any], privacy: PrivacySpec) -> dict[str, Any]:
        """Optional hook, called at submit before `parse_params`: copy what the kind needs from the spec's
        `privacy` block into its raw params, or refuse a combination it cannot honour (raise
        QueryKindError naming the field). The returned params are what is stored.
        Default: params unchanged (the server's distributed noise is the kind's only privacy)."""
        return raw_params

    def privacy(self, params: P) -> dict[str, Any] | None:
        """Optional hook: the kind's own privacy block (e.g. TrieHH's sample-and-threshold guarantee), merged
        over the server's block in the released result; the server also accepts mechanism "none" in the
        production profile when this block carries a finite epsilon. Default None (server's block only)."""
        return None

    def preview(self, params: P, rounds: list[RoundPreview]) -> tuple[list[ExpectedValue], list[ReleaseWarning]]:
        """Before anything runs: the expected noise std of the values the query will release, from the noise of
        its first planned rounds (`rounds`, each decoded from an all-zero aggregate), and warnings (e.g. a value
        whose expected interval is wider than its plausible size). Values whose size depends on the data (a
        mean's std depends on the count) are given under a stated assumption (`note`). Default: nothing."""
        return [], []

    def state_to_json(self, state: S) -> dict[str, Any]:
        """The state as the server stores it between rounds."""
        out: dict[str, Any] = TypeAdapter(self.State).dump_python(state, mode="json")
        return out

    def state_from_json(self, raw: Mapping[str, Any]) -> S:
        """A stored state back; QueryKindError when it is not a state of this kind."""
        try:
            state = TypeAdapter(self.State).validate_python(raw)
        except ValidationError as exc:
            raise QueryKindError(f"state: not a stored {self.name} state ({exc.error_count()} errors)") from None
        return state

    def largest_validity(self, params: P) -> Statement | None:
        """Optional hook: the largest statement any round of the query can have (what a device may have to prove when
        later rounds grow, e.g. a heavy-hitters frontier; devstack/proving.py sizes a simulated fleet's proving
        time with it). Default None: the rounds planned at submit are representative."""
        return None

    @abstractmethod
    def initial_state(self, params: P) -> S:
        """The state before the first round."""

    @abstractmethod
    def plan_round(self, params: P, state: S, round_index: int) -> RoundPlan | None:
        """The next round, or None when the query is finished."""

    @abstractmethod
    def decode_round(
        self,
        params: P,
        state: S,
        plan: RoundPlan,
        aggregate: np.ndarray,
        contributors: int,
        noise: AggregateNoise | None = None,
    ) -> S:
        """Server side: the round's int64 sum over `contributors` devices → the new state. `noise` is the
        distributed noise in `aggregate` (None: the sum is exact)."""

    @abstractmethod
    def finalize(self, params: P, state: S, stop_reason: str | None = None) -> Release:
        """The release of a finished query, from any state a query can reach (including the initial one).
        `stop_reason` is set when the server ended the query before the kind finished (e.g. "privacy
        budget exhausted")."""

    def tabulate(self, result: dict[str, Any]) -> list[ResultTable]:
        """The released `result` as tables for every client to render (`queries.table`: the console, `fa`, the
        Python client's rows/frame), each numeric cell carrying its value's JSON Pointer so that its noise comes
        from the result's uncertainty. Called by the server on a stored result, so it must accept any result
        `finalize` ever returned. Default: one key/value table of the result's leaves (`queries.table.flatten`)."""
        from queries.table import flatten

        return [flatten(result)]
