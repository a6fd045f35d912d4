"""A server broken by the attacker who runs it: `python -m tests.e2e.malicious_server serve --db URL --port P`
(the arguments of `fa-server`) with `FA_EVIL` = `task` | `model` | `n`.

It is the real server (`analytics_server.cli.main`) with two changes made in this process only:

1. `Orchestrator._make_cohort` builds every cohort as usual and then shows ONE member — the device with the
   highest party id, the victim — an assignment rewritten with `model_copy(update=…)`:
   - `task`: the histogram's bucket names replaced by decoys of the same number (the vector length, hence the
     secagg config and the validity statement, stay what every other member expects). This is the decoy-task
     attack: show everyone but the victim buckets that match nobody's data (or, as here, show the victim the odd
     task) and the released "sum" is one device's value alone, while every proof passes.
   - `model`: in a training round, the model's weights (`task["weights"]`, the parameters the devices start their
     local step from; `queries/training/kind.py` `plan_round`) changed for the victim alone. This mirrors Pasquini
     et al., "Eluding Secure Aggregation in Federated Learning via Model Inconsistency" (CCS 2022): the server
     sends different models to different clients so that the others' updates vanish (or are recognisable) in the
     aggregate and the victim's update can be read out of the secure sum.
   - `n`: the `secagg` block's cohort size n + 1 (still a configuration the device accepts — checked here when
     the cohort is built — only the task digest differs): a server lying about how many devices share the sum.
2. It does not check what the devices sign: `secagg.crypto.verify` is a no-op in this process, so the honest
   server's own check (`ServerSession._accept_share_keys` verifies each share-keys signature against the cohort's
   digest) does not stop the victim's signature, made over the digest of what *it* was shown, and the server
   routes it to the victim's peers. Only the devices can catch the inconsistency: each verifies its share senders'
   signatures under its own digest before its masked input leaves (`secagg/client.py` `_verify_cohort`) and
   refuses with reason `task_mismatch` (docs/secagg.md, "Devices that check the server").

Test tooling only (tests/e2e/test_checking_the_server.py); never installed.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from analytics_server import cli
from analytics_server.orchestrator import Orchestrator
from secagg import crypto
from secagg.config import SecAggConfig

log = logging.getLogger("malicious_server")
MODES = ("task", "model", "n")


def _changed(mode: str, a: Any) -> dict[str, Any] | None:
    """The fields of assignment `a` the attacker rewrites for the victim (None: this round is left alone)."""
    if mode == "task":
        if a.kind != "histogram":
            return None
        buckets = a.task["buckets"]
        return {"task": {**a.task, "buckets": [f"decoy{i}" for i in range(len(buckets))]}}
    if mode == "model":
        weights = a.task.get("weights") if a.kind == "training" else None
        if not weights:  # label counts have no model; eval and train rounds do
            return None
        return {"task": {**a.task, "weights": [w + 0.5 for w in weights]}}
    secagg = {**a.secagg, "n": a.secagg["n"] + 1}
    SecAggConfig.from_dict(secagg)  # the device accepts the config itself: only the digest may differ
    return {"secagg": secagg}


def install(mode: str) -> None:
    if mode not in MODES:
        raise SystemExit(f"FA_EVIL: must be one of {', '.join(MODES)}, got {mode!r}")
    real = Orchestrator._make_cohort

    def make_cohort(self: Orchestrator, *args: Any, **kwargs: Any) -> Any:
        cohort = real(self, *args, **kwargs)
        victim = max(cohort.members, key=cohort.members.__getitem__)
        a = cohort.assignments[victim]
        update = _changed(mode, a)
        if update is not None:
            cohort.assignments[victim] = a.model_copy(update=update)
            log.warning("FA_EVIL=%s: cohort %s shows party %d (device %s) another %s", mode, cohort.id[:8], a.party_id,
                        victim[:8], {"task": "task", "model": "model", "n": "cohort size"}[mode])
        return cohort

    Orchestrator._make_cohort = make_cohort  # type: ignore[method-assign]

    def verify(public_raw: bytes, signature: bytes, payload: bytes, what: str) -> None:
        """Accepts every signature: the attacker's server forwards whatever the devices sign."""

    crypto.verify = verify


def main(argv: list[str] | None = None) -> int:
    install(os.environ.get("FA_EVIL", ""))
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
