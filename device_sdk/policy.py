"""The device's own privacy policy: what the app allows, checked on the device, which the server cannot change.

`DevicePolicy` holds the app's limits; `decide(policy, assignment, …)` checks an assignment against them
before any local data is read and returns a `Refusal` (reason, detail) or a `Decision` (what to charge to
the device's ledger, the survivor floor to hold the cohort to, the bounds to hold the vector to). See
docs/device_sdk.md for every field and what the device guarantees on its own.

The safety floor: the device refuses (`unsafe_parameters`) any cohort without the consistency round (the active
model) or whose neighbourhood degree or share threshold is below the floor it computes for the cohort's n from its
own `corrupt_fraction` and `dropout_fraction` (`secagg.floor`; docs/secagg.md, "The safety floor"); no server setting
lowers it. The secagg session checks it again once the members list arrives, counting neighbours without a valid
issuer token as corrupt when issuer keys are pinned.

The noise floor: for a noisy assignment the device recomputes the smallest per-device noise any accounting
of the query's public (ε, δ, rounds, t_min) allows for the round's sensitivity (`queries.dp.floor`) —
taking the sensitivity from the kind's own `task_sensitivity(task)` when it has one, never the server's
word — and refuses a smaller noise scale; it then refuses to unmask for fewer than t_min survivors, since
its share is only t_min-th of the noise.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey

from queries.dp.errors import PrivacyError
from queries.dp.floor import per_device_floor
from queries.envelope import Assignment, RefusalReason
from queries.kind import QueryKindError
from secagg import floor as safety, identity_token
from secagg.blind_rsa import load_public_key
from secagg.errors import ConfigError

from device_sdk.ledger import DAY_S, QueryHistory

if TYPE_CHECKING:  # the parsed assignment refers back to Refusal
    from device_sdk.admission import ParsedAssignment

DEFAULT_MAX_DELTA = 1e-5
"""δ cap that applies when the policy caps ε but not δ: an ε bound means little at a large δ."""
FLOOR_TOLERANCE = 1e-9
"""Relative slack when comparing the server's noise scale with the recomputed floor (float rounding)."""


class PolicyError(ValueError):
    """A policy field the device cannot apply; the message names the field."""


@dataclass(frozen=True)
class DevicePolicy:
    """Limits the app sets on what its device contributes. Every field's default allows everything.

    - `allowed_sources`: collections the server may query (None: any). A mapping from collection to the
      query kinds allowed on it (None: any kind) also limits the kinds.
    - `require_noise`: refuse assignments without distributed DP noise (mechanism "none").
    - `max_epsilon_per_query` / `max_epsilon_per_day`: the most ε one query may have / the device may spend
      in 24 hours (its own ledger). Either one also refuses queries without noise (their ε is unbounded)
      and caps δ at `max_delta_per_query` (default `DEFAULT_MAX_DELTA` when unset).
    - `min_cohort`: the smallest cohort the device joins, and the fewest survivors it unmasks for.
    - `min_survivors`: the fewest survivors it unmasks for, when it should differ from `min_cohort`.
    - `max_delta_per_query`: the largest δ of one query.
    - `require_proofs`: refuse assignments without validity proofs for kinds that support them.
    - `max_contributions_per_day`: participation cap; the device stops checking in once it is reached.
    - `verify_cohort`: check the cohort, not the server's word (on by default): before its masked input leaves,
      the device verifies that every peer it exchanges shares with signed its keys and agreed to this session and to
      the task digest the device computed itself — its share opens under the channel key bound to them (a peer shown
      another task, cohort size or model makes it refuse with `task_mismatch`) — and counts toward `min_cohort` only
      distinct members it verified
      (`cohort_unverified` below it). Off: the device signs but verifies nothing, and `min_cohort` compares with
      the cohort size the server announces (docs/secagg.md, "Devices that check the server").
    - `issuer_keys`: the identity issuer's public keys the app pins (base64 SubjectPublicKeyInfo DER, as
      `GET /v1/issuer/keys` lists them). With `verify_cohort`, a member then counts toward `min_cohort` only when
      the server also relayed an identity token for it that one of these keys signed (docs/identities.md): members
      the server made up count for nothing. Set `min_cohort` too: it is the floor they are counted against.
    - `require_log` (on by default): refuse (`not_logged`) a task that the server's transparency log does not
      show under a signed head consistent with the last head this device saw (docs/transparency.md).
    - `log_keys`: the log's Ed25519 public keys the app pins (base64, as `GET /v1/log/key` shows them). None: the
      device pins the key the server shows on first use (TOFU) and never accepts another.
    - `witness_keys`, `witness_quorum`, `witness_max_age_s`: witnesses the app pins (base64 Ed25519); the head must
      extend one that `witness_quorum` of them cosigned within `witness_max_age_s` seconds.
    - `corrupt_fraction` (γ, default ⅓) and `dropout_fraction` (default 0.15): what the device assumes of any cohort
      — at most γ·n members collude with the server (its own invented identities count), up to that share drops out —
      when it computes its safety floor (`secagg.floor`, 2^-40 with 40 bits of grinding): it refuses
      (`unsafe_parameters`) a cohort without the consistency round, or whose degree or threshold is below the floor.
      Raising γ raises the floor; no server setting lowers it.
    """

    allowed_sources: Collection[str] | Mapping[str, Collection[str] | None] | None = None
    require_noise: bool = False
    max_epsilon_per_query: float | None = None
    max_epsilon_per_day: float | None = None
    min_cohort: int | None = None
    min_survivors: int | None = None
    max_delta_per_query: float | None = None
    require_proofs: bool = False
    max_contributions_per_day: int | None = None
    verify_cohort: bool = True
    issuer_keys: Sequence[str] | None = None
    require_log: bool = True
    log_keys: Sequence[str] | None = None
    witness_keys: Sequence[str] | None = None
    witness_quorum: int = 1
    witness_max_age_s: float = 3600.0
    corrupt_fraction: float = safety.DEFAULT_CORRUPT_FRACTION
    dropout_fraction: float = safety.DEFAULT_DROPOUT_FRACTION
    _sources: dict[str, frozenset[str] | None] | None = field(default=None, init=False, repr=False, compare=False)
    _issuers: dict[bytes, RSAPublicKey] = field(default_factory=dict, init=False, repr=False, compare=False)
    _assumptions: safety.Assumptions = field(default_factory=safety.Assumptions, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            assumptions = safety.Assumptions(self.corrupt_fraction, self.dropout_fraction)
        except ConfigError as exc:
            raise PolicyError(str(exc)) from None
        object.__setattr__(self, "_assumptions", assumptions)
        object.__setattr__(self, "_sources", _normalise_sources(self.allowed_sources))
        object.__setattr__(self, "_issuers", _issuer_keys(self.issuer_keys))
        for name in ("log_keys", "witness_keys"):
            _ed25519_keys(name, getattr(self, name))
        if isinstance(self.witness_quorum, bool) or not isinstance(self.witness_quorum, int) or not (
                1 <= self.witness_quorum <= max(1, len(self.witness_keys or ()))):
            raise PolicyError(f"witness_quorum: an integer from 1 to the number of witness_keys, got {self.witness_quorum!r}")
        _positive("witness_max_age_s", self.witness_max_age_s)
        for name in ("require_noise", "require_proofs", "verify_cohort", "require_log"):
            if not isinstance(getattr(self, name), bool):
                raise PolicyError(f"{name}: must be True or False, got {getattr(self, name)!r}")
        for name in ("max_epsilon_per_query", "max_epsilon_per_day"):
            _positive(name, getattr(self, name))
        if self.max_delta_per_query is not None:
            _positive("max_delta_per_query", self.max_delta_per_query)
            if self.max_delta_per_query >= 1:
                raise PolicyError(f"max_delta_per_query: must be below 1, got {self.max_delta_per_query!r}")
        for name in ("min_cohort", "min_survivors", "max_contributions_per_day"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise PolicyError(f"{name}: must be a positive integer or None, got {value!r}")

    @property
    def caps_epsilon(self) -> bool:
        return self.max_epsilon_per_query is not None or self.max_epsilon_per_day is not None

    @property
    def delta_cap(self) -> float | None:
        """The δ cap in force: `max_delta_per_query`, else `DEFAULT_MAX_DELTA` when ε is capped."""
        if self.max_delta_per_query is not None:
            return self.max_delta_per_query
        return DEFAULT_MAX_DELTA if self.caps_epsilon else None

    @property
    def min_verified(self) -> int | None:
        """Distinct members (this device included) whose signatures for the session and task the device must verify
        before it sends its masked input: `min_cohort` when `verify_cohort` is on."""
        return self.min_cohort if self.verify_cohort else None

    @property
    def floor_assumptions(self) -> safety.Assumptions:
        """What the device assumes when it computes its safety floor (`secagg.floor`)."""
        return self._assumptions

    @property
    def trusted_issuers(self) -> dict[bytes, RSAPublicKey]:
        """token_key_id → pinned issuer key (empty: none pinned)."""
        return self._issuers

    def credentialed(self, identity: bytes, token: bytes) -> bool:
        """Whether `token` is a pinned issuer's token for `identity` (docs/identities.md)."""
        try:
            identity_token.verify(token, identity, self._issuers)
        except identity_token.TokenError:
            return False
        return True

    @property
    def survivor_floor(self) -> int | None:
        return self.min_survivors if self.min_survivors is not None else self.min_cohort

    def allows_source(self, source: str) -> bool:
        return self._sources is None or source in self._sources

    def allows_kind(self, source: str, kind: str) -> bool:
        if self._sources is None:
            return True
        kinds = self._sources.get(source)
        return kinds is None or kind in kinds


def _issuer_keys(raw: Any) -> dict[bytes, RSAPublicKey]:
    if raw is None:
        return {}
    if isinstance(raw, str) or not all(isinstance(k, str) for k in raw):
        raise PolicyError("issuer_keys: a list of base64 SubjectPublicKeyInfo strings")
    keys = []
    for i, text in enumerate(raw):
        try:
            keys.append(load_public_key(base64.b64decode(text, validate=True)))
        except (binascii.Error, ValueError) as exc:
            raise PolicyError(f"issuer_keys[{i}]: not an issuer public key ({exc})") from None
    return identity_token.trusted_keys(keys)


def _ed25519_keys(name: str, raw: Any) -> list[bytes]:
    """A pinned list of base64 Ed25519 public keys (None: none pinned)."""
    if raw is None:
        return []
    if isinstance(raw, str) or not all(isinstance(k, str) for k in raw):
        raise PolicyError(f"{name}: a list of base64 Ed25519 public keys")
    out = []
    for i, text in enumerate(raw):
        try:
            key = base64.b64decode(text, validate=True)
        except binascii.Error:
            key = b""
        if len(key) != 32:
            raise PolicyError(f"{name}[{i}]: not a base64 Ed25519 public key (32 bytes)")
        out.append(key)
    return out


def pinned_keys(raw: Sequence[str] | None) -> list[bytes]:
    return _ed25519_keys("keys", raw)


def _positive(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise PolicyError(f"{name}: must be a positive finite number or None, got {value!r}")


def _normalise_sources(raw: Any) -> dict[str, frozenset[str] | None] | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        raise PolicyError(f"allowed_sources: a collection of names or a mapping, not the string {raw!r} (use [{raw!r}])")
    if isinstance(raw, Mapping):
        out: dict[str, frozenset[str] | None] = {}
        for source, kinds in raw.items():
            if not isinstance(source, str) or not source:
                raise PolicyError(f"allowed_sources: collection names must be non-empty strings, got {source!r}")
            if kinds is not None and (isinstance(kinds, str) or not all(isinstance(k, str) for k in kinds)):
                raise PolicyError(f"allowed_sources[{source!r}]: a collection of kind names or None, got {kinds!r}")
            out[source] = None if kinds is None else frozenset(kinds)
        return out
    try:
        names = list(raw)
    except TypeError:
        raise PolicyError(f"allowed_sources: a collection of names or a mapping, got {raw!r}") from None
    if not all(isinstance(n, str) and n for n in names):
        raise PolicyError(f"allowed_sources: collection names must be non-empty strings, got {names!r}")
    return {n: None for n in names}


@dataclass(frozen=True)
class Refusal:
    """Why the device will not take part; `reason` is one of `queries.envelope.REFUSAL_REASONS`."""

    reason: RefusalReason
    detail: str
    query_id: str = ""
    cohort_id: str = ""
    kind: str = ""
    source: str = ""


@dataclass(frozen=True)
class Decision:
    """An accepted assignment: what the device charges and what it holds the rest of the cohort to."""

    epsilon_charge: float | None
    """ε charged to the device's ledger (0: already covered by an earlier round of the query; None: no noise)."""
    delta_charge: float | None
    min_survivors: int | None
    """Fewest survivors the device unmasks for: max(policy floor, the noise's t_min)."""
    declared_bounds: tuple[float, float] | None
    """(L1, L2) the vector must stay within when the kind cannot bound it from the task alone."""
    noise_floor: float | None
    proofs: bool


def refuse(a: Assignment, reason: RefusalReason, detail: str) -> Refusal:
    return Refusal(reason, detail, a.query_id, a.cohort_id, a.kind, a.source)


def checkin_pause(policy: DevicePolicy, spent_epsilon: float, contributions: int,
                  oldest_contribution: float | None, oldest_charge: float | None, now: float) -> float | None:
    """Seconds to wait before checking in again when a daily limit is reached (None: go ahead)."""
    wait = None
    if policy.max_contributions_per_day is not None and contributions >= policy.max_contributions_per_day:
        wait = (oldest_contribution or now) + DAY_S - now
    if policy.max_epsilon_per_day is not None and spent_epsilon >= policy.max_epsilon_per_day * (1 - 1e-12):
        until = (oldest_charge or now) + DAY_S - now
        wait = until if wait is None else max(wait, until)
    return None if wait is None else max(wait, 1.0)


def screen(policy: DevicePolicy, a: Assignment, opted_out: bool) -> Refusal | None:
    """The policy's checks on what the assignment names alone (collection and kind), before it is parsed."""
    if opted_out:
        return refuse(a, "opted_out", f"the user opted out of collection {a.source!r}")
    if not policy.allows_source(a.source):
        return refuse(a, "source_not_allowed", f"collection {a.source!r} is not in this device's allowed_sources")
    if not policy.allows_kind(a.source, a.kind):
        return refuse(a, "kind_not_allowed", f"kind {a.kind!r} is not allowed on collection {a.source!r}")
    return None


def decide(
    policy: DevicePolicy, parsed: ParsedAssignment, history: QueryHistory,
    spent_today: float, contributions_today: int, opted_out: bool,
) -> Refusal | Decision:
    """Check a parsed assignment (`device_sdk.admission`) against the policy, the kind's own bounds and the device's
    ledger, before any data is read."""
    a, kind, cfg = parsed.assignment, parsed.kind, parsed.secagg
    early = screen(policy, a, opted_out)
    if early is not None:
        return early
    if a.threat_model != "active" or cfg.threat_model != "active":
        model = cfg.threat_model if cfg.threat_model != "active" else a.threat_model
        return refuse(a, "unsafe_parameters", f"threat model {model}: no consistency round, so the server could show "
                      "parts of the cohort different survivor sets; this device requires the active model")
    try:
        safety.check(cfg.n, cfg.resolved_degree, cfg.share_threshold, policy.floor_assumptions)
    except safety.UnsafeParametersError as exc:
        return refuse(a, "unsafe_parameters", str(exc))
    p = a.privacy
    mechanism = a.noise.mechanism if a.noise is not None else "none"
    if p is not None and p.mechanism != mechanism:
        return refuse(a, "privacy_unverifiable", f"the noise block says {mechanism!r} but the query's privacy says {p.mechanism!r}")
    if policy.require_noise and mechanism == "none":
        return refuse(a, "noise_required", "the assignment adds no noise (mechanism none) and this device requires it")
    proofs = p is not None and p.validation == "proofs"
    if policy.require_proofs and kind.supports_proofs and not proofs:
        return refuse(a, "proofs_required", f"kind {a.kind!r} supports validity proofs and this device requires them")
    if policy.min_cohort is not None and cfg.n < policy.min_cohort:
        return refuse(a, "cohort_too_small", f"cohort of {cfg.n} devices, below this device's minimum of {policy.min_cohort}")
    if policy.max_contributions_per_day is not None and contributions_today >= policy.max_contributions_per_day:
        return refuse(a, "participation_cap", f"{contributions_today} contributions in the last 24 h "
                      f"(max_contributions_per_day {policy.max_contributions_per_day})")

    floor = None
    bounds = None
    survivors = policy.survivor_floor
    if mechanism == "none":
        if policy.max_epsilon_per_query is not None:
            return refuse(a, "epsilon_per_query", "no noise: the query's ε is unbounded (max_epsilon_per_query is set)")
        if policy.max_epsilon_per_day is not None:
            return refuse(a, "epsilon_per_day", "no noise: the query's ε is unbounded (max_epsilon_per_day is set)")
        return Decision(None, None, survivors, None, None, proofs)

    assert a.noise is not None
    if p is None or p.epsilon is None or p.delta is None or p.t_min is None:
        return refuse(a, "privacy_unverifiable", "noise without the query's (ε, δ, t_min): the noise cannot be checked")
    if cfg.n < p.t_min:
        return refuse(a, "cohort_too_small", f"cohort of {cfg.n} devices, below the t_min {p.t_min} the noise is calibrated for")
    if a.round >= p.rounds:
        return refuse(a, "privacy_unverifiable", f"round {a.round} is beyond the {p.rounds} rounds the query's ε covers")
    spent = sum(history.weights.values()) + (0.0 if a.round in history.weights else p.weight)
    if spent > p.rounds * (1 + 1e-9):
        return refuse(a, "privacy_unverifiable", f"round {a.round} (weight {p.weight:g}) would bring the rounds this device "
                      f"contributed to to {spent:g} unit rounds, beyond the {p.rounds} the query's ε covers")
    # the query's, not the round's or the cohort's: t_min is the cohort's t_c (its shares' size, checked below)
    public = p.model_dump(exclude={"l1_sensitivity", "l2_sensitivity", "weight", "t_min"})
    first = None if history.privacy is None else {k: v for k, v in history.privacy.items() if k not in ("weight", "t_min")}
    if first is not None and first != public:
        return refuse(a, "privacy_unverifiable", f"the query's privacy parameters changed since this device's first "
                      f"contribution ({first} → {public})")
    try:
        own = kind.task_sensitivity(parsed.task)
    except QueryKindError as exc:
        return refuse(a, "invalid_assignment", str(exc))
    if own is None:
        bounds = (p.l1_sensitivity, p.l2_sensitivity)
        l2 = p.l2_sensitivity
    else:
        l2 = own[1]
    try:
        floor = per_device_floor(mechanism, p.epsilon, p.delta, p.rounds, p.t_min, l2, a.noise.encoding_scale, p.weight)
    except PrivacyError as exc:
        return refuse(a, "privacy_unverifiable", f"noise floor: {exc}")
    if a.noise.scale < floor * (1 - FLOOR_TOLERANCE):
        what = "σ" if mechanism == "discrete_gaussian" else "μ"
        return refuse(a, "noise_below_floor", f"per-device noise {what} {a.noise.scale:.6g} is below {floor:.6g}, the least "
                      f"that (ε={p.epsilon:g}, δ={p.delta:g}) over {p.rounds} rounds at t_min={p.t_min} allows for "
                      f"sensitivity {l2:g}")
    if policy.delta_cap is not None and p.delta > policy.delta_cap * (1 + 1e-12):
        return refuse(a, "delta_per_query", f"δ={p.delta:g} exceeds this device's {policy.delta_cap:g}")
    if policy.max_epsilon_per_query is not None and p.epsilon > policy.max_epsilon_per_query * (1 + 1e-12):
        return refuse(a, "epsilon_per_query", f"ε={p.epsilon:g} exceeds this device's max_epsilon_per_query "
                      f"{policy.max_epsilon_per_query:g}")
    layers_needed = history.per_round[a.round] + 1
    new_layers = max(0, layers_needed - history.layers_charged)
    charge = p.epsilon * new_layers
    if policy.max_epsilon_per_day is not None and spent_today + charge > policy.max_epsilon_per_day * (1 + 1e-12):
        return refuse(a, "epsilon_per_day", f"ε={charge:g} more would bring the last 24 h to {spent_today + charge:g}, "
                      f"above max_epsilon_per_day {policy.max_epsilon_per_day:g}")
    survivors = max(survivors or 0, p.t_min)
    return Decision(charge, p.delta * new_layers, survivors, bounds, floor, proofs)


__all__ = ["DEFAULT_MAX_DELTA", "Decision", "DevicePolicy", "PolicyError", "Refusal", "checkin_pause", "decide", "screen"]
