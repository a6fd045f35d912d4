"""Typed exceptions of the secure-aggregation library.

`ProtocolError`s mean a message must be rejected (the caller maps them to 4xx, or abandons the cohort on
the device); `AbortError` means the cohort can no longer produce a correct sum; `ConfigError` means the
parameters themselves are unusable.
"""

from __future__ import annotations


class SecAggError(ValueError):
    """Base class of every error raised by `secagg`."""


class ConfigError(SecAggError):
    """Parameters that cannot work (bit width too small, threshold out of range, …)."""


class ProtocolError(SecAggError):
    """A message that must be rejected."""


class MessageFormatError(ProtocolError):
    """Bytes that do not decode: bad magic or version, truncated fields, trailing bytes, bad lengths."""


class WrongSessionError(ProtocolError):
    """A message for another session (for example replayed from an earlier cohort)."""


class WrongPhaseError(ProtocolError):
    """A message that does not belong to the current phase of the state machine."""


class UnknownPartyError(ProtocolError):
    """A party id that is not part of this cohort, or not expected in this phase."""


class ConflictError(ProtocolError):
    """A party sent a different message for a phase it already answered."""


class SignatureError(ProtocolError):
    """A missing or invalid Ed25519 signature."""


class TaskMismatchError(SignatureError):
    """A peer's signature over its keys, bound to the session and this party's task digest, does not verify, or its
    share does not open under the channel key bound to them: the server showed that peer another task (or another
    cohort size, model, privacy block, members list…), or altered its keys or its share."""

    def __init__(self, party: int, detail: str = "", *, share: bool = False) -> None:
        what = ("share does not open under the channel key bound to this session, task and members list"
                if share else "signature over its keys for this session and task does not verify")
        super().__init__(
            f"party {party}'s {what}: it was shown another task or its keys were altered" + (f" ({detail})" if detail else "")
        )
        self.party = party


class DuplicateKeyError(ProtocolError):
    """Two parties advertised the same public key."""


class DecryptionError(ProtocolError):
    """A share ciphertext that fails authentication or names the wrong parties."""


class InconsistentSetsError(ProtocolError):
    """The survivor sets shown by the server are not nested, omit this party, or are below threshold."""


class TooFewSurvivorsError(InconsistentSetsError):
    """The survivor set lists fewer parties than this client's own minimum (`ClientSession(min_survivors=…)`)."""

    def __init__(self, survivors: int, minimum: int) -> None:
        super().__init__(f"survivors: {survivors} parties, below this party's minimum of {minimum}")
        self.survivors = survivors
        self.minimum = minimum


class InconsistentSurvivorsError(InconsistentSetsError):
    """The unmask request's survivor set is not the one this party signed, or fewer than the threshold of its
    neighbours signed it: the server may be showing parts of the neighbourhood different survivor sets."""


class CohortUnverifiedError(InconsistentSetsError):
    """Fewer distinct members than this client's minimum signed their keys for this session and task
    (`ClientSession(min_verified=…)`): the cohort the server announced is not one the client can verify."""

    def __init__(self, verified: int, minimum: int, tokens: bool = False) -> None:
        what = "signed their keys for this session and task" + (
            " and hold an identity token from a pinned issuer" if tokens else "")
        super().__init__(
            f"cohort: {verified} distinct members (this one included) {what}, below this party's minimum of {minimum}"
        )
        self.verified = verified
        self.minimum = minimum


class DoubleRevealError(ProtocolError):
    """The server asked for both the self-mask share and the key share of the same peer."""


class InvalidInputError(ProtocolError):
    """A masked input whose validity proof does not verify: the party is dropped as if it had not answered."""


class AbortError(SecAggError):
    """Too few parties remain for a phase; the cohort produces no result."""

    def __init__(self, phase: str, needed: int, have: int, detail: str = "") -> None:
        self.phase = phase
        self.needed = needed
        self.have = have
        self.detail = detail
        msg = f"aborted in phase {phase}: needed at least {needed} parties, have {have}"
        super().__init__(msg + (f" ({detail})" if detail else ""))
