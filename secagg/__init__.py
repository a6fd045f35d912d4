"""Sans-IO secure aggregation: SecAgg (Bonawitz et al., CCS 2017) with the SecAgg+ sparse neighbour
graph (Bell et al., CCS 2020).

Pure protocol: no network, disk, clock or global state. The client and server are state machines that
take bytes and return bytes; the caller moves the bytes and decides when a phase's deadline has passed.
See docs/secagg.md for the protocol, the parameters and what they guarantee.
"""

from secagg import encoding
from secagg.client import ClientSession
from secagg.config import SecAggConfig
from secagg.errors import (
    AbortError,
    CohortUnverifiedError,
    ConfigError,
    ConflictError,
    DecryptionError,
    DoubleRevealError,
    DuplicateKeyError,
    InconsistentSetsError,
    InconsistentSurvivorsError,
    MessageFormatError,
    ProtocolError,
    SecAggError,
    SignatureError,
    TaskMismatchError,
    TooFewSurvivorsError,
    UnknownPartyError,
    WrongPhaseError,
    WrongSessionError,
)
from secagg.meter import CostMeter
from secagg.phases import Phase
from secagg.server import AggregateResult, ServerSession

__all__ = [
    "AbortError",
    "AggregateResult",
    "ClientSession",
    "CohortUnverifiedError",
    "ConfigError",
    "ConflictError",
    "CostMeter",
    "DecryptionError",
    "DoubleRevealError",
    "DuplicateKeyError",
    "InconsistentSetsError",
    "InconsistentSurvivorsError",
    "MessageFormatError",
    "Phase",
    "ProtocolError",
    "SecAggConfig",
    "SecAggError",
    "ServerSession",
    "SignatureError",
    "TaskMismatchError",
    "TooFewSurvivorsError",
    "UnknownPartyError",
    "WrongPhaseError",
    "WrongSessionError",
    "encoding",
]
