"""The device ↔ server envelope: check-in, assignment, phase-message headers and request signing.

Both `analytics_server` and `device_sdk` import this module (and `secagg` for the protocol bytes); it
imports neither. Device requests are signed with the device's Ed25519 key over
`signing_payload(method, path_qs, timestamp, nonce, body)`; see docs/protocol.md.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from translog.wire import TaskProof

PROTOCOL_VERSION = 3
"""Version of this device wire protocol; sent by devices in `HDR_PROTOCOL`, the server refuses any other."""
SIGNING_DOMAIN = b"fa-device-request/v1"
MAX_LONG_POLL_S = 60.0
"""Longest wait a device may ask for: check-in `wait_s` and the `wait` of `…/phases/{p}/next`."""

HDR_PROTOCOL = "X-FA-Protocol"
"""On every device request: `PROTOCOL_VERSION`. On a refusal for a mismatch: the version the server speaks."""
HDR_DEVICE = "X-FA-Device"
HDR_TIMESTAMP = "X-FA-Timestamp"
HDR_NONCE = "X-FA-Nonce"
HDR_SIGNATURE = "X-FA-Signature"
HDR_PHASE = "X-FA-Phase"
"""On a server phase message: the phase the device's reply belongs to."""

Validation = Literal["proofs", "none"]
"""`privacy.validation` of a query: whether devices prove their contributions valid (docs/validation.md)."""

RefusalReason = Literal[
    "source_not_allowed",
    "kind_not_allowed",
    "opted_out",
    "noise_required",
    "proofs_required",
    "epsilon_per_query",
    "delta_per_query",
    "epsilon_per_day",
    "participation_cap",
    "cohort_too_small",
    "survivors_below_minimum",
    "noise_below_floor",
    "privacy_unverifiable",
    "contribution_exceeds_bound",
    "not_eligible",
    "invalid_assignment",
    "task_mismatch",
    "cohort_unverified",
    "not_logged",
    "unsafe_parameters",
    "inconsistent_survivors",
]
"""Why a device refused an assignment (its own policy, docs/device_sdk.md); the server counts refusals by
reason in `/metrics` (`fa_device_refusals_total{reason=…}`)."""
REFUSAL_REASONS: tuple[str, ...] = RefusalReason.__args__  # type: ignore[attr-defined]
MAX_REFUSAL_DETAIL = 500


def signing_payload(method: str, path_qs: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """The exact bytes a device signs: domain, method, path with query string, timestamp, nonce, sha256(body)."""
    return b"\n".join(
        [
            SIGNING_DOMAIN,
            method.upper().encode("ascii"),
            path_qs.encode("utf-8"),
            timestamp.encode("ascii"),
            nonce.encode("ascii"),
            hashlib.sha256(body).hexdigest().encode("ascii"),
        ]
    )


def device_id_for(public_key: bytes) -> str:
    """Device ids are derived from the identity key, so registration is idempotent."""
    return hashlib.sha256(b"fa-device-id/v1" + public_key).hexdigest()[:32]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegisterRequest(_Model):
    public_key: str = Field(description="base64 of the device's 32-byte Ed25519 public key")
    identity_token: str | None = Field(
        default=None, max_length=1024,
        description="base64 of the identity issuer's 354-byte token for public_key (docs/identities.md); required by "
        "a server that trusts an issuer",
    )


class RegisterResponse(_Model):
    device_id: str


_B64_KEY = r"^[A-Za-z0-9+/]{43}=$"  # 32 bytes


class SecAggKeys(_Model):
    """A device's two X25519 public keys for the advertise-keys phase of the cohort it may be seated in, sent
    ahead with its check-in (docs/protocol.md, "Keys with the check-in"): fresh for every check-in."""

    c_pk: str = Field(pattern=_B64_KEY, description="base64 of the 32-byte channel public key")
    s_pk: str = Field(pattern=_B64_KEY, description="base64 of the 32-byte mask public key")
    signature: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9+/]{86}==$",
        description="base64 of the device's Ed25519 signature over the keys (`secagg.crypto.keys_payload`): without it "
        "the server cannot take them as the advertise-keys message (peers check it before encrypting shares to them)",
    )


class CheckinRequest(_Model):
    wait_s: float = Field(default=0.0, ge=0, le=MAX_LONG_POLL_S, description="long-poll up to this many seconds")
    sources: list[str] | None = Field(default=None, max_length=1000, description="collections the device holds")
    log_size: int | None = Field(
        default=None, ge=0, lt=1 << 53, description="the size of the last transparency-log head the device stored: "
        "an answer with an assignment carries the consistency proof from it (docs/transparency.md)"
    )
    secagg_keys: SecAggKeys | None = Field(
        default=None, description="the device's advertise-keys phase, sent ahead: used when the check-in is answered "
        "with a semi-honest secagg assignment by the process running its cohort"
    )


class PhaseMessage(_Model):
    """A server phase message carried in a JSON answer: what `GET …/phases/{p}/next` would answer."""

    phase: int = Field(ge=0, le=15, description="the phase the message belongs to (the X-FA-Phase header's value)")
    body: str = Field(max_length=1 << 24, description="base64 of the binary message")


class NoiseBlock(_Model):
    """Distributed DP noise each device adds to its encoded vector before masking."""

    mechanism: Literal["discrete_gaussian", "skellam", "none"]
    scale: float = Field(ge=0, description="per-device scale passed to queries.dp.sample_noise")
    std: float | None = Field(default=None, ge=0, description="standard deviation of one device's share")
    encoding_scale: int = Field(
        default=1, ge=1, le=1 << 16, description="integer factor the device multiplies its vector by before adding noise"
    )


class ValidationBlock(_Model):
    """How the device proves its contribution valid (`privacy.validation: "proofs"`, docs/validation.md)."""

    mode: Literal["proofs"]
    noise_bound: int = Field(ge=0, le=1 << 60, description="B: every noise entry must lie in [−B, B] (0: no noise)")
    limbs: int = Field(ge=1, le=64, description="blinding limbs appended to the masked vector")
    limb_bits: int = Field(ge=1, le=32, description="bits per blinding limb")


class AssignmentPrivacy(_Model):
    """The public privacy parameters of the query a round belongs to, from which the device recomputes the
    noise floor it accepts (`queries.dp.floor`) and charges its own ledger; see docs/device_sdk.md."""

    mechanism: Literal["discrete_gaussian", "skellam", "none"]
    epsilon: float | None = Field(default=None, gt=0, description="the query's total ε over all its rounds (null: no noise)")
    delta: float | None = Field(default=None, gt=0, lt=1, description="the query's total δ (null: no noise)")
    rounds: int = Field(default=1, ge=1, le=1_000_000, description="noisy rounds the query's (ε, δ) covers")
    t_min: int | None = Field(
        default=None, ge=1, description="contributors whose noise shares together carry the round's noise"
    )
    l1_sensitivity: float = Field(default=0.0, ge=0, description="largest L1 norm of one device's vector this round")
    l2_sensitivity: float = Field(default=0.0, ge=0, description="largest L2 norm of one device's vector this round")
    weight: float = Field(
        default=1.0, gt=0, le=1_000_000,
        description="unit rounds of the query's budget this round spends (`queries.kind.RoundPlan.privacy_weight`): "
        "its noise may be as low as a unit round's divided by √weight, and the weights of the rounds one device "
        "contributes to must sum to at most `rounds`",
    )
    validation: Validation = Field(default="none", description="whether devices prove their contribution valid")


class Assignment(_Model):
    query_id: str
    round: int
    cohort_id: str
    party_id: int
    kind: str
    source: str
    task: dict[str, Any]
    secagg: dict[str, Any] = Field(description="secagg.SecAggConfig.to_dict()")
    threat_model: Literal["semi_honest", "active"] = Field(
        description="always `active` from this server (the consistency round); a device refuses anything else "
        "(`unsafe_parameters`)")
    first_phase: int = 0
    phase_timeout_s: float
    noise: NoiseBlock | None = None
    validation: ValidationBlock | None = Field(
        default=None, description="present when the device must prove its contribution valid (docs/validation.md)"
    )
    privacy: AssignmentPrivacy | None = Field(
        default=None, description="the query's public privacy parameters (absent from servers before this field)"
    )
    spec: dict[str, Any] | None = Field(
        default=None, description="the query's spec as stored and shown to analysts (GET /v1/queries/{id}): part of the "
        "task digest every device computes (queries/task_digest.py)"
    )
    server_url: str | None = Field(
        default=None, max_length=2048,
        description="base URL of the server process that runs this cohort: the device sends its phase requests "
        "there (absent: the URL it checked in with). If that process cannot be reached the device leaves the "
        "cohort and checks in again.",
    )


class CheckinResponse(_Model):
    assignment: Assignment | None = None
    log: TaskProof | None = Field(
        default=None, description="with an assignment: its cohort's task entry in the transparency log, the newest "
        "signed head, and the proofs a device checks before it contributes (docs/transparency.md)"
    )
    retry_after: float | None = None
    queries_running: int = 0
    advertised: bool | None = Field(
        default=None, description="with an assignment, when the check-in sent secagg_keys: true if they were accepted "
        "as this party's advertise-keys message (the device sends nothing for phase first_phase), false if not "
        "(the device runs phase first_phase itself)"
    )
    next: PhaseMessage | None = Field(
        default=None, description="with advertised true: the server's message after the advertise-keys phase, when "
        "it was ready before the check-in's long-poll ran out (else the device long-polls …/phases/0/next)"
    )


class RefusalReport(_Model):
    """`POST /v1/device/cohorts/{cohort}/refusal`: this device will not take part, and why."""

    reason: RefusalReason
    detail: str = Field(default="", max_length=MAX_REFUSAL_DETAIL)


class CohortStatus(_Model):
    cohort_id: str
    status: Literal["running", "finished", "aborted"]
    phase: int
    reason: str | None = None


class ErrorBody(_Model):
    error: str
    detail: Any = None
