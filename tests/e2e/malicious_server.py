"""A server broken by the attacker who runs it: `python -m tests.e2e.malicious_server serve --db URL --port P`
(the arguments of `fa-server`) with `FA_EVIL` = `task` | `model` | `n` (a device shown another task) or `sparse2` |
`semi_honest` | `split_survivors` | `invented_neighbours` (a cohort below the devices' safety floor).

With `task`, `model` or `n` it is the real server (`analytics_server.cli.main`) with two changes made in this process
only:

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
   - `n`: the `secagg` block's cohort size n + 1, with the graph and threshold a server gives a cohort of n + 1 (a
     configuration the device accepts, at its safety floor — checked here when the cohort is built — only the task
     digest differs), and a members list of n + 1 leaves in the victim's peer keys: a server lying about how many
     devices share the sum.
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
  the server's choice of degree and threshold, answers that): one corrupt neighbour (2t − m = 1) lets the server
  show a neighbourhood two survivor sets and gather both of a device's secrets, whatever `min_cohort` the devices
  verify beyond their neighbourhood.
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

import base64
import contextvars
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics_server import cli, cohort_plan
from analytics_server.db.device_store import Devices
from analytics_server.db.store import Store
from analytics_server.db.base import epoch_ms
from analytics_server.db.translog_store import LOG_LOCK, TransparencyLog
from fa_common.clock import SYSTEM_CLOCK
from analytics_server.http import device as device_routes
from analytics_server.pool import DevicePool
from analytics_server.services import cohorts_service
from queries.envelope import device_id_for
from queries.task_digest import task_digest
from translog import entries as te
from analytics_server.orchestrator import Orchestrator
from secagg import crypto, floor
from secagg.config import SecAggConfig
from secagg.errors import MessageFormatError
from secagg.messages import (
    ConsistencyRequest,
    ConsistencySignature,
    PeerKeys,
    ShareKind,
    UnmaskRequest,
    UnmaskShares,
    decode,
    encode_bitmap,
)
from secagg.phases import Phase
from secagg.server import ServerSession

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
    n = a.secagg["n"] + 1
    safe = floor.plan(n)  # the graph and threshold a server gives a cohort of n + 1: at the floor the device computes
    secagg = {**a.secagg, "n": n, "graph": "complete" if safe.complete else "sparse",
              "degree": None if safe.complete else safe.degree, "threshold": safe.threshold}
    cfg = SecAggConfig.from_dict(secagg)
    floor.check(cfg.n, cfg.resolved_degree, cfg.share_threshold)  # the device accepts the config: only the digest differs
    return {"secagg": secagg}


_LONGER_LIST: dict[bytes, int] = {}
"""`n`: session id → the victim's party, whose members list gets one more (absent) leaf: n + 1, as its config says."""


def install_longer_members_list() -> None:
    """`n`: the victim's peer keys carry a members list of n + 1 leaves (the last party absent, as if it never
    advertised keys), so that its session accepts them and goes on to sign and check signatures under its own
    digest (and members root): a list of n leaves it would reject outright, before anything is signed."""
    real = ServerSession._close_advertise_keys

    def close_advertise_keys(self: ServerSession) -> dict[int, bytes]:
        out = real(self)
        victim = _LONGER_LIST.get(self.config.session_id)
        if victim in out:
            msg = decode(out[victim])
            assert isinstance(msg, PeerKeys)
            out[victim] = dataclasses.replace(msg, leaves=msg.leaves + crypto.ABSENT_LEAF).encode()
        return out

    ServerSession._close_advertise_keys = close_advertise_keys  # type: ignore[method-assign]


_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("checkin_device", default=None)
_VICTIMS: dict[str, tuple[str, bytes, int, bytes, dict[str, Any]]] = {}
"""cohort id → (victim device, the digest of what it was shown, round, the digest of what the others were shown, the
cohort parameters it was shown)"""


def install_log_both() -> None:
    """FA_EVIL_LOG=both: the victim's task is logged too (a second `task` entry for the cohort), and each device's
    check-in carries the proof of the entry for the task it was shown — every device finds its own digest in the
    log. Only the task binding (and an audit: two tasks for one cohort) can catch it."""
    real_create, real_proof, real_checkin = cohorts_service.create_cohort, TransparencyLog.task_proof, DevicePool.checkin

    async def create_cohort(store: Store, cohort_id: str, query_id: str, *args: Any, **kwargs: Any) -> None:
        if cohort_id in _VICTIMS:  # logged first: committed before any member's assignment can be delivered
            _, digest, rnd, _, shown = _VICTIMS[cohort_id]
            async with store.db.tx([LOG_LOCK]) as s:
                await store.log.append(s, [te.task_entry(query_id, rnd, cohort_id, digest, epoch_ms(SYSTEM_CLOCK), shown)])
        await real_create(store, cohort_id, query_id, *args, **kwargs)

    async def task_proof(self: TransparencyLog, cohort_id: str, from_size: int | None, *args: Any, **kwargs: Any) -> Any:
        victim = _VICTIMS.get(cohort_id)
        if victim is not None:
            kwargs["task_digest"] = victim[1] if victim[0] == _DEVICE.get() else victim[3]
        return await real_proof(self, cohort_id, from_size, *args, **kwargs)

    async def checkin(self: DevicePool, device_id: str, *args: Any, **kwargs: Any) -> Any:
        _DEVICE.set(device_id)
        return await real_checkin(self, device_id, *args, **kwargs)

    cohorts_service.create_cohort = create_cohort
    TransparencyLog.task_proof = task_proof  # type: ignore[method-assign]
    DevicePool.checkin = checkin  # type: ignore[method-assign]


def install(mode: str) -> None:
    if mode not in MODES:
        raise SystemExit(f"FA_EVIL: must be one of {', '.join((*MODES, *FLOOR_MODES))}, got {mode!r}")
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
            if mode == "n":
                _LONGER_LIST[bytes.fromhex(cohort.id)] = a.party_id
            log.warning("FA_EVIL=%s: cohort %s shows party %d (device %s) another %s", mode, cohort.id[:8], a.party_id,
                        victim[:8], {"task": "task", "model": "model", "n": "cohort size"}[mode])
        return cohort

    Orchestrator._make_cohort = make_cohort  # type: ignore[method-assign]
    if mode == "n":
        install_longer_members_list()

    def verify(public_raw: bytes, signature: bytes, payload: bytes, what: str) -> None:
        """Accepts every signature: the attacker's server forwards whatever the devices sign."""

    crypto.verify = verify


# -- below the devices' safety floor ----------------------------------------------------------------------------

SPARSE_DEGREE, SPARSE_THRESHOLD = 2, 2
"""`sparse2`: two neighbours each (a neighbourhood of m = 3) and a threshold of 2 (> m/2, so the config is valid)."""


def install_sparse2() -> None:
    """The server's choice of graph and threshold (`floor.plan`, called by `Orchestrator._make_cohort` for each
    cohort) is the sparse graph of degree 2 with threshold 2, whatever n."""

    def plan(n: int, *args: Any, **kwargs: Any) -> floor.Floor:
        log.warning("FA_EVIL=sparse2: a cohort of %d on the sparse graph of degree %d, threshold %d", n, SPARSE_DEGREE,
                    SPARSE_THRESHOLD)
        return floor.Floor(n, SPARSE_DEGREE, SPARSE_THRESHOLD)

    floor.plan = plan  # type: ignore[assignment]


class _SemiHonestConfig:
    """`SecAggConfig` as cohort planning calls it (`cohort_plan.secagg_config`), building every cohort's config in
    the semi-honest model: the assignments' `threat_model` and secagg block, the task digest and the server's session
    all follow."""

    from_dict = staticmethod(SecAggConfig.from_dict)

    def __call__(self, *args: Any, **kwargs: Any) -> SecAggConfig:
        cfg = SecAggConfig(*args, **{**kwargs, "threat_model": "semi_honest"})
        log.warning("FA_EVIL=semi_honest: a cohort of %d without the consistency round", cfg.n)
        return cfg


def install_semi_honest() -> None:
    setattr(cohort_plan, "SecAggConfig", _SemiHonestConfig())


def _colluder_key() -> Ed25519PrivateKey:
    raw = os.environ.get("FA_EVIL_COLLUDER_KEY", "")
    try:
        return Ed25519PrivateKey.from_private_bytes(base64.b64decode(raw, validate=True))
    except ValueError:
        raise SystemExit("FA_EVIL=split_survivors needs FA_EVIL_COLLUDER_KEY: base64 of the colluding device's raw "
                         "Ed25519 private key") from None


def install_split_survivors() -> None:
    """At the masked-input close the honest survivors (the colluder left out) are split in two halves by party id:
    the first half and the colluder are shown the true survivor set U3, the second half U3 without the victims —
    the first |U3| − t parties of the first half, as many as can "drop" while the set still holds the threshold t
    every device checks (a set below it each device rejects outright). The first half would reveal the victims'
    self-mask seed shares, the second their mask-key shares. Each signature is checked against the set its signer
    was shown; the colluder's signature over the other set is made with its key; each member gets the signatures
    over its own set. Unmask shares are accepted whatever their kind, the parties that revealed and each victim's
    shares are logged, and the sum is then attempted with the shares that match the true survivor set."""
    colluder_key = _colluder_key()
    colluder_id = crypto.ed25519_public_bytes(colluder_key)
    real_close_masked = ServerSession._close_masked_input
    real_close_consistency = ServerSession._close_consistency_check
    real_close_unmasking = ServerSession._close_unmasking
    views: dict[bytes, dict[int, bytes]] = {}
    """session id → party → the survivor bitmap it was shown"""
    victims: dict[bytes, frozenset[int]] = {}

    def tag(self: ServerSession) -> str:
        return f"FA_EVIL=split_survivors: cohort {self.config.session_id.hex()[:8]}"

    def close_masked_input(self: ServerSession) -> dict[int, bytes]:
        out = real_close_masked(self)
        sid, n, t = self.config.session_id, self.config.n, self.config.share_threshold
        u3 = self.survivors(Phase.MASKED_INPUT)
        colluder = next((p for p, k in self._ids.items() if k == colluder_id and p in u3), None)
        if colluder is None:
            log.warning("%s: the colluder is not among the survivors; the cohort is left alone", tag(self))
            return out
        honest = sorted(u3 - {colluder})
        first, second = honest[: len(honest) // 2], honest[len(honest) // 2:]
        dropped = frozenset(first[: max(1, len(u3) - t)])
        split = encode_bitmap(u3 - dropped, n)
        full = self._survivor_bitmap
        views[sid] = {p: full for p in [*first, colluder]} | {p: split for p in second}
        victims[sid] = dropped
        for p in second:
            out[p] = ConsistencyRequest(sid, p, split).encode()
        log.warning("%s: colluder party %d; parties %s shown all %d survivors; parties %s shown a set without %s "
                    "(threshold %d)", tag(self), colluder, first, len(u3), second, sorted(dropped), t)
        return out

    def accept_consistency_check(self: ServerSession, party: int, msg: ConsistencySignature) -> None:
        shown = views.get(self.config.session_id, {}).get(party, self._survivor_bitmap)
        crypto.verify(self._ids[party], msg.signature, crypto.consistency_payload(self._bind, shown),
                      f"party {party}'s consistency check")
        self._sigs[party] = msg.signature

    def close_consistency_check(self: ServerSession) -> dict[int, bytes]:
        sid = self.config.session_id
        view = views.get(sid)
        if view is None:
            return real_close_consistency(self)
        u4 = frozenset(self._digests)
        self._finish_phase(Phase.CONSISTENCY_CHECK, u4)
        self._require_share_holders(Phase.CONSISTENCY_CHECK, u4)
        colluder = next(p for p, k in self._ids.items() if k == colluder_id)
        out, forwarded = {}, {}
        for u in sorted(u4):
            shown = view[u]
            sigs = {v: self._sigs[v] for v in u4 if view[v] == shown}
            sigs[colluder] = crypto.sign(colluder_key, crypto.consistency_payload(self._bind, shown))
            out[u] = UnmaskRequest(sid, u, shown, tuple(sorted(sigs.items()))).encode()
            forwarded[u] = len(sigs)
        log.warning("%s: signatures forwarded per party: %s", tag(self), forwarded)
        self.phase, self._expected = Phase.UNMASKING, u4
        return out

    def accept_unmasking(self: ServerSession, party: int, msg: UnmaskShares) -> None:
        got = {v: k for v, k, _ in msg.shares}
        if len(got) != len(msg.shares) or not set(got) <= self.survivors(Phase.SHARE_KEYS):
            raise MessageFormatError(f"party {party}: unmask shares for parties outside the cohort")
        self._shares[party] = msg

    def close_unmasking(self: ServerSession) -> dict[int, bytes]:
        """One line (warnings are rate-limited per message): per party that revealed, its self-mask seed and mask-key
        shares; per victim, the shares of each of its secrets the server holds; the victims whose input it could
        strip of every mask (both secrets at the threshold)."""
        sid, t = self.config.session_id, self.config.share_threshold
        u3 = self.survivors(Phase.MASKED_INPUT)
        revealed = {}
        for party, msg in sorted(self._shares.items()):
            seeds = sum(1 for _, k, _ in msg.shares if k == ShareKind.SELF_MASK_SEED)
            revealed[party] = [seeds, len(msg.shares) - seeds]
        held = {}
        for v in sorted(victims.get(sid, ())):
            kinds = [k for msg in self._shares.values() for w, k, _ in msg.shares if w == v]
            held[v] = [kinds.count(ShareKind.SELF_MASK_SEED), kinds.count(ShareKind.MASK_KEY)]
        exposed = [v for v, (seeds, keys) in held.items() if min(seeds, keys) >= t]
        log.warning("%s: unmask shares (self-mask seeds, mask keys) revealed per party: %s; held per victim: %s; "
                    "threshold %d; victims exposed: %s", tag(self), json.dumps(revealed), json.dumps(held), t,
                    json.dumps(exposed))
        for party, msg in list(self._shares.items()):  # the honest sum needs shares of the kinds U3 asks for
            kept = tuple(s for s in msg.shares if (s[1] == ShareKind.SELF_MASK_SEED) == (s[0] in u3))
            self._shares[party] = UnmaskShares(msg.session_id, msg.party, kept)
        return real_close_unmasking(self)

    ServerSession._close_masked_input = close_masked_input  # type: ignore[method-assign]
    ServerSession._accept_consistency_check = accept_consistency_check  # type: ignore[method-assign]
    ServerSession._close_consistency_check = close_consistency_check  # type: ignore[method-assign]
    ServerSession._accept_unmasking = accept_unmasking  # type: ignore[method-assign]
    ServerSession._close_unmasking = close_unmasking  # type: ignore[method-assign]


NO_TOKEN = b""
"""What the attacker's store answers for an identity registered without a token: relayed as "no token" (the
encoding of an absent token in the peer keys) instead of keeping the cohort from relaying anyone's."""


def install_invented_neighbours() -> None:
    """Registration admits devices without an issuer token (the attacker's own identities); they are known to the
    device routes and seated like any other; every cohort relays each real member's token and none for its own."""
    real_token, real_identity, real_keys = device_routes._identity_token, Devices.identity, Devices.keys

    def identity_token(st: Any, req: Any, identity_key: bytes) -> bytes | None:
        if req.identity_token is None:
            log.info("FA_EVIL=invented_neighbours: registered device %s without an identity token",
                     device_id_for(identity_key)[:8])
            return None
        return real_token(st, req, identity_key)

    async def device_identity(self: Devices, device_id: str) -> Any:
        raw, token = await real_identity(self, device_id)
        return raw, (NO_TOKEN if raw is not None and token is None else token)

    async def device_keys(self: Devices, device_ids: list[str]) -> dict[str, tuple[bytes, bytes | None]]:
        keys = await real_keys(self, device_ids)
        invented = sum(1 for _, token in keys.values() if token is None)
        if invented:
            log.warning("FA_EVIL=invented_neighbours: a cohort of %d seats %d identities without an issuer token beside "
                        "%d with one", len(keys), invented, len(keys) - invented)
        return {d: (key, NO_TOKEN if token is None else token) for d, (key, token) in keys.items()}

    device_routes._identity_token = identity_token
    Devices.identity = device_identity  # type: ignore[method-assign]
    Devices.keys = device_keys  # type: ignore[method-assign]


FLOOR_MODES: dict[str, Callable[[], None]] = {
    "sparse2": install_sparse2,
    "semi_honest": install_semi_honest,
    "split_survivors": install_split_survivors,
    "invented_neighbours": install_invented_neighbours,
}


def main(argv: list[str] | None = None) -> int:
    mode = os.environ.get("FA_EVIL", "")
    if mode in FLOOR_MODES:
        FLOOR_MODES[mode]()
    else:
        install(mode)
    if os.environ.get("FA_EVIL_LOG") == "both":
        install_log_both()
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
