"""Identity-token benchmark (`make bench`): what one token costs the issuer, a device and a verifier.

Over `--tokens` tokens (default 200), each for a fresh identity key under one 2048-bit issuer key:
- the issuer: CPU ms of `blind_rsa.blind_sign` per token, and of a whole admission (the credential check, the
  quota charge in a SQLite file, the signature) as `POST /v1/issuer/token` does it, without HTTP;
- the device: ms of `identity_token.request` (blinding) plus `PendingToken.finalize` (unblinding and checking);
- a verifier (the server at registration, a peer checking its cohort): ms of `identity_token.verify`.
Prints one JSON object (means and medians in ms).

    python -m scripts.bench_issuer [--tokens 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fa_issuer.attesters import AppBackendAttester, mint_credential, new_app_key
from fa_issuer.quota import QuotaStore
from secagg import blind_rsa, identity_token
from secagg.randomness import OsRandom


def summary(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"mean_ms": round(statistics.fmean(ms), 3), "median_ms": round(statistics.median(ms), 3),
            "max_ms": round(max(ms), 3)}


def timed(clock: Callable[[], float], work: Callable[[], Any]) -> tuple[float, Any]:
    start = clock()
    out = work()
    return clock() - start, out


def run(tokens: int) -> dict[str, Any]:
    rand = OsRandom()
    key = blind_rsa.generate_key()
    public = key.public_key()
    trusted = identity_token.trusted_keys([public])
    app_key = new_app_key(rand)
    attester = AppBackendAttester({"bench": bytes(app_key.verify_key)})
    sign_cpu, admission_cpu, device, verify = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        quota = QuotaStore(Path(tmp) / "issuer.db", tokens_per_day=tokens)
        for n in range(tokens):
            identity = rand.bytes(32)
            credential = mint_credential(app_key, "bench", f"install-{n}", int(time.time()) + 3600)
            t_request, pending = timed(time.perf_counter, lambda: identity_token.request(public, identity, rand))
            t_sign, _ = timed(time.process_time, lambda: blind_rsa.blind_sign(key, pending.blinded_msg))

            def admit_and_sign() -> bytes:
                admission = attester.admit(credential, time.time())
                assert quota.charge(admission.app, admission.install, time.time()).granted
                return blind_rsa.blind_sign(key, pending.blinded_msg)

            t_admission, blind_sig = timed(time.process_time, admit_and_sign)
            t_finalize, token = timed(time.perf_counter, lambda: pending.finalize(blind_sig))
            raw = token.encode()
            t_verify, _ = timed(time.perf_counter, lambda: identity_token.verify(raw, identity, trusted))
            sign_cpu.append(t_sign)
            admission_cpu.append(t_admission)
            device.append(t_request + t_finalize)
            verify.append(t_verify)
        quota.close()
    return {
        "tokens": tokens,
        "token_bytes": identity_token.TOKEN_BYTES,
        "issuer_blind_sign_cpu": summary(sign_cpu),
        "issuer_admission_cpu": summary(admission_cpu),
        "device_request_and_finalize": summary(device),
        "verify": summary(verify),
        "issuer_tokens_per_cpu_s": round(len(admission_cpu) / sum(admission_cpu), 1) if sum(admission_cpu) else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tokens", type=int, default=200)
    args = parser.parse_args()
    print(json.dumps(run(args.tokens)))


if __name__ == "__main__":
    main()
