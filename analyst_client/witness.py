"""`fa witness` as a library: the simplest real witness of the transparency log (docs/transparency.md).

Each pass (`witness_once`):

1. `GET /v1/log/head`, and verify the head under the pinned log key(s): those given, else the ones in the
   state file, else the key the server serves (`GET /v1/log/key`), pinned into the state on first use;
2. check that the head extends the last head this witness cosigned (the state file's): same origin, no
   smaller, the same root at the same size, else the consistency proof `GET /v1/log/proof/consistency` from it;
3. save the head as the state (atomically), cosign it (`translog.heads.Signer.cosign`, the time in Unix
   seconds) and `POST /v1/log/cosignatures` `{size, witness, key_id, time, signature}`.

A head that does not extend the state's is never cosigned: the pass returns `inconsistent` with both signed
heads (and the proof the server gave), which together show that the log forked or equivocated. The state
is left as it was, so every later pass refuses too.

The key file holds the witness's Ed25519 seed, 32 bytes in base64 (`init_key` writes a fresh one). The state
file is the witness's memory: losing it means trusting the next head seen.
"""

from __future__ import annotations

import base64
import binascii
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from analyst_client.audit import AuditError, LogReader, read_state, write_state
from analyst_client.client import ApiError
from translog.keyfile import KeyFileError, new_key_file, read_seed
from translog.heads import HeadError, Signer, key_id, key_table, verify_head
from translog.merkle import ProofError, verify_consistency
from translog.wire import CosignatureModel, HeadModel, b64

STATE_VERSION = 1
MAX_NAME = 100


class WitnessError(Exception):
    """The pass could not run or its head is not acceptable (bad key file, unreachable log, a head that does not
    verify, the server refusing the cosignature); the message says which. Not a proof of a fork."""


@dataclass
class WitnessResult:
    status: str
    """`cosigned`, or `inconsistent` (nothing cosigned: `previous` and `head` prove a fork)."""
    head: dict[str, Any]
    """The served head (HeadModel JSON)."""
    previous: dict[str, Any] | None = None
    """The last head this witness cosigned before this pass."""
    message: str = ""
    proof: list[str] = field(default_factory=list)
    """The consistency proof the server gave from `previous` to `head` (base64), if any."""
    stored: bool | None = None
    """The server's answer to the cosignature: stored, or already held."""


def read_key(path: str | os.PathLike[str]) -> bytes:
    """The 32-byte seed in a key file (base64); WitnessError naming the file."""
    try:
        return read_seed(path)
    except KeyFileError as exc:
        raise WitnessError(str(exc)) from None


def init_key(path: str | os.PathLike[str]) -> Signer:
    """Write a fresh seed (os.urandom) to a new key file, readable by its owner only; refuses to overwrite."""
    try:
        return new_key_file(path)
    except KeyFileError as exc:
        raise WitnessError(str(exc)) from None


def default_name() -> str:
    return f"fa-witness@{socket.gethostname()}"[:MAX_NAME]


def _keys_of_state(state: dict[str, Any] | None) -> list[bytes]:
    out = []
    for k in (state or {}).get("log_keys") or []:
        try:
            raw = base64.b64decode(str(k), validate=True)
            key_id(raw)
        except (ValueError, binascii.Error, HeadError):
            raise WitnessError(f"state file: log_keys holds {str(k)[:60]!r}, not a base64 Ed25519 public key") from None
        out.append(raw)
    return out


def witness_once(base_url: str, *, seed: bytes, state: str | os.PathLike[str], log_keys: list[bytes] | None = None,
                 name: str | None = None, timeout_s: float = 30.0, now: float | None = None) -> WitnessResult:
    """One pass (see the module's doc). Raises WitnessError when the pass cannot be made; OSError when the server
    cannot be reached."""
    name = (name or default_name())[:MAX_NAME]
    signer = Signer(seed)
    log = LogReader(base_url, timeout_s)
    try:
        saved = read_state(state)
    except AuditError as exc:
        raise WitnessError(str(exc)) from None
    pinned = list(log_keys or []) or _keys_of_state(saved)
    try:
        if not pinned:  # trust on first use: the key the server serves now
            pinned = [base64.b64decode(log.key().public_key, validate=True)]
        served = log.head()
    except (AuditError, ApiError, ValueError, binascii.Error) as exc:
        raise WitnessError(f"the log at {log.http.server}: {exc}") from None
    if served is None:
        raise WitnessError(f"the log at {log.http.server} is empty: no head to cosign yet")
    model = served.head
    try:
        signed = model.parse()
        verify_head(signed, key_table(pinned))
    except HeadError as exc:
        raise WitnessError(f"the served head does not verify: {exc}") from None
    head = signed.head

    previous: dict[str, Any] | None = (saved or {}).get("head")
    if previous is not None:
        try:
            last = HeadModel.model_validate(previous).parse().head
        except (ValidationError, HeadError) as exc:
            raise WitnessError(f"state file {state}: no valid head ({exc})") from None
        bad, proof = _extends(log, last, head)
        if bad:
            return WitnessResult("inconsistent", model.model_dump(), previous, bad, [b64(h) for h in proof])

    write_state(state, {"version": STATE_VERSION, "server": log.http.server, "witness": name,
                        "key_id": signer.key_id, "log_keys": [b64(k) for k in pinned], "head": model.model_dump(),
                        "cosigned_at": int(time.time() if now is None else now)})
    cos = signer.cosign(name, head, int(time.time() if now is None else now))
    body = {"size": head.size, **CosignatureModel.of(cos).model_dump()}
    try:
        answer = log.http.call("POST", "/v1/log/cosignatures", body)
    except ApiError as exc:
        hint = (f" (add {name}={b64(signer.public_key)} to the server's FA_LOG_WITNESS_KEYS)"
                if exc.status == 403 else "")
        raise WitnessError(f"the server refused the cosignature of the head of size {head.size}: HTTP {exc.status}: "
                           f"{exc.message}{hint}") from None
    stored = answer.get("stored") if isinstance(answer, dict) else None
    return WitnessResult("cosigned", model.model_dump(), previous, "", [], stored)


def _extends(log: LogReader, last: Any, head: Any) -> tuple[str, list[bytes]]:
    """('' , proof) if `head` extends `last`; else (why not, the proof the server gave)."""
    if head.origin != last.origin:
        return f"the head is of log {head.origin!r}, the witness follows {last.origin!r}", []
    if head.size < last.size:
        return f"the log shrank: the head has {head.size} entries, the witness cosigned one of {last.size}", []
    if head.size == last.size:
        if head.root != last.root:
            return f"two signed heads of size {head.size} with different roots (equivocation)", []
        return "", []
    if last.size == 0:
        return "", []
    try:
        proof = log.consistency(last.size, head.size)
    except (ApiError, AuditError) as exc:
        raise WitnessError(f"no consistency proof from size {last.size} to {head.size}: {exc}") from None
    try:
        verify_consistency(last.size, head.size, last.root, head.root, proof)
    except ProofError as exc:
        return (f"the head of size {head.size} does not extend the cosigned head of size {last.size}: {exc}", proof)
    return "", proof


__all__ = ["WitnessError", "WitnessResult", "default_name", "init_key", "read_key", "witness_once"]
