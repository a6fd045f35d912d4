"""A server broken by the attacker who runs it: `python -m tests.e2e.malicious_server serve --db URL --port P`
(the arguments of `fa-server`) with `FA_EVIL` = `task` | `model` | `n` (a device shown another task) or `sparse2` |
`semi_honest` | `split_survivors` | `invented_neighbours` (a cohort below the devices' safety floor).

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

3. Its transparency log (docs/transparency.md) holds the cohort's task as the honest server logs it, so the victim
   finds no entry for what it was shown and refuses (`not_logged`). With `FA_EVIL_LOG=both` the attacker logs the
   victim's task too (a second `task` entry for the cohort) and gives each device the proof of the entry for what it
   was shown: the log checks pass, the task binding does not, and `fa audit` names the second entry.

Below the devices' safety floor (docs/secagg.md; `secagg/floor.py`; tests/e2e/test_safety_floor_e2e.py) — each its
own change, signatures are checked as usual:

- `sparse2`: every cohort on the sparse graph of degree 2 with threshold 2 of its neighbourhood of 3 (`floor.plan`,
  the server's choice of degree and threshold, answers that): masks a server that owns two of a device's neighbours
  could strip, whatever `min_cohort` the devices verify beyond their neighbourhood.
- `semi_honest`: cohorts without the consistency round — the assignment's `threat_model` and its secagg block both
  say `semi_honest`, and the server's session runs that way.
- `split_survivors`: the active model, but when the masked inputs close the server shows half of the honest members
  the true survivor set and the other half a set from which some of the first half (the victims) "dropped": the
  first half would reveal the victims' self-mask shares, the second their mask-key shares. One colluding member —
  a real registered device whose identity key the attacker holds (`FA_EVIL_COLLUDER_KEY`, base64 of the raw Ed25519
  private key) — signs both sets; each member is forwarded the signatures over the set it was shown. The server
  logs which parties revealed shares and how many shares of each victim's secrets it got.
- `invented_neighbours`: a server configured with an issuer that seats identities it invented: it registers devices
  without an issuer token (the attacker's own fleet) and relays the real members' tokens and none for its own, so
  that a member's neighbourhood holds fewer token holders than the share threshold.

Test tooling only (tests/e2e/test_checking_the_server.py, tests/e2e/test_safety_floor_e2e.py); never installed.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
from typing import Any

from analytics_server import cli
from analytics_server.db.store import Store
from analytics_server.db.translog_store import LOG_LOCK, now_ms
from analytics_server.pool import DevicePool
from queries.task_digest import task_digest
from translog import entries as te
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


_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("checkin_device", default=None)
_VICTIMS: dict[str, tuple[str, bytes, int, bytes, dict[str, Any]]] = {}
"""cohort id → (victim device, the digest of what it was shown, round, the digest of what the others were shown, the
cohort parameters it was shown)"""


def install_log_both() -> None:
    """FA_EVIL_LOG=both: the victim's task is logged too (a second `task` entry for the cohort), and each device's
    check-in carries the proof of the entry for the task it was shown — every device finds its own digest in the
    log. Only the task binding (and an audit: two tasks for one cohort) can catch it."""
    real_create, real_proof, real_checkin = Store.create_cohort, Store.log_task_proof, DevicePool.checkin

    async def create_cohort(self: Store, cohort_id: str, query_id: str, *args: Any, **kwargs: Any) -> None:
        if cohort_id in _VICTIMS:  # logged first: committed before any member's assignment can be delivered
            _, digest, rnd, _, shown = _VICTIMS[cohort_id]
            async with self._tx([LOG_LOCK]) as s:
                await self._log_append(s, [te.task_entry(query_id, rnd, cohort_id, digest, now_ms(), shown)])
        await real_create(self, cohort_id, query_id, *args, **kwargs)

    async def log_task_proof(self: Store, cohort_id: str, from_size: int | None, *args: Any, **kwargs: Any) -> Any:
        victim = _VICTIMS.get(cohort_id)
        if victim is not None:
            kwargs["task_digest"] = victim[1] if victim[0] == _DEVICE.get() else victim[3]
        return await real_proof(self, cohort_id, from_size, *args, **kwargs)

    async def checkin(self: DevicePool, device_id: str, *args: Any, **kwargs: Any) -> Any:
        _DEVICE.set(device_id)
        return await real_checkin(self, device_id, *args, **kwargs)

    Store.create_cohort = create_cohort  # type: ignore[method-assign]
    Store.log_task_proof = log_task_proof  # type: ignore[method-assign]
    DevicePool.checkin = checkin  # type: ignore[method-assign]


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
            cohort.assignments[victim] = shown = a.model_copy(update=update)
            _VICTIMS[cohort.id] = (victim, task_digest(shown), a.round, cohort.task_digest,
                                   SecAggConfig.from_dict(shown.secagg).public_summary())
            log.warning("FA_EVIL=%s: cohort %s shows party %d (device %s) another %s", mode, cohort.id[:8], a.party_id,
                        victim[:8], {"task": "task", "model": "model", "n": "cohort size"}[mode])
        return cohort

    Orchestrator._make_cohort = make_cohort  # type: ignore[method-assign]

    def verify(public_raw: bytes, signature: bytes, payload: bytes, what: str) -> None:
        """Accepts every signature: the attacker's server forwards whatever the devices sign."""

    crypto.verify = verify


def main(argv: list[str] | None = None) -> int:
    install(os.environ.get("FA_EVIL", ""))
    if os.environ.get("FA_EVIL_LOG") == "both":
        install_log_both()
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
