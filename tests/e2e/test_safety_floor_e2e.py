"""Acceptance: the safety floor devices compute for themselves (`secagg/floor.py`; docs/secagg.md), against a real
server process changed by the attacker who runs it (tests/e2e/malicious_server.py) and real devices: `fa-sim` fleets
whose `DevicePolicy` is the default (with an issuer's keys pinned where one is configured) and, for the split
survivor sets, one member the test drives itself.

- `sparse2`: every cohort on the sparse graph of degree 2 (threshold 2 of a neighbourhood of 3), 60 devices, with the
  default policy and with `min_cohort: 50` (the original attack: the devices verify 50 signatures, yet one corrupt
  neighbour — 2t − m = 1 — lets the server gather both of a device's secrets). Every device refuses
  `unsafe_parameters` before it reads any data.
- `semi_honest`: assignments without the consistency round (the assignment's threat model and its secagg block):
  every device refuses `unsafe_parameters`.
- `split_survivors`: at the masked-input close half of a 21-member cohort is shown the true survivor set and the
  other half a set where six of the first half (the victims) dropped — six: as many as can drop while the set still
  holds the share threshold t = 15 (a smaller set every device rejects outright, before signing); one colluding
  member signs both sets and the server forwards each half the signatures over its set (11 each). No set gathers t
  signatures, so every honest member refuses `inconsistent_survivors` before it reveals a share: the server gets the
  colluder's shares alone and cannot unmask anything.
- `invented_neighbours`: with an issuer configured, the server registers 8 identities of its own without tokens and
  seats them beside 12 enrolled devices that pin the issuer's keys: each of those counts 12 token holders in its
  neighbourhood, below the share threshold of 14, and refuses `unsafe_parameters` before it encrypts any share.

In each: the query fails naming the refusal, nothing is released (409, no contributor, the one cohort aborted), the
refusals are counted in `/metrics` by reason and named in the devices' own logs, and the server log proves the attack
ran. The controls: an honest `fa-server` with the same fleets releases the exact histogram (the 20-device fleet of
`semi_honest` is the split control's without its hand-driven member, and test_checking_the_server.py's control).

Each attack test fails with the device's check switched off (checked by hand in a copy of the tree: the no-op
`floor.check`, no threat-model check in `policy.decide` and `ClientSession`, no count of neighbour signatures at the
unmask request, no count of token holders at the peer keys): the cohort is released, or for the split every honest
member reveals its shares — the victims' mask keys among them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from analyst_client.cli import AnalystClient
from analyst_client.client import ApiError
from devstack.processes import Fleet, Issuer, Server, fresh_database, new_app_key_file
from secagg import shamir
from secagg.client import ClientSession
from secagg.errors import InconsistentSurvivorsError
from secagg.messages import ShareKind, UnmaskRequest, UnmaskShares, decode, decode_bitmap
from tests.e2e.harness import SyncDevice, check_exact, client_session

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
N = 20
WAIT_S = 180
BUCKETS = ["moon", "sun", "star", "cloud", "rain", "snow", "river"]


def histogram(n: int) -> dict[str, Any]:
    """The words histogram over a cohort of exactly `n` (phases close as soon as every member answered or refused;
    the deadline only bounds a straggler on a loaded machine). No validity proofs: the floor does not depend on them,
    and a 60-device fleet proves slowly on two cores."""
    return {"kind": "histogram", "name": "safety floor", "source": "words",
            "params": {"buckets": BUCKETS, "other_bucket": "other", "max_contributions_per_device": 2},
            "privacy": {"mechanism": "none", "validation": "none"},
            "cohort": {"min_clients": n, "max_clients": n, "phase_timeout_s": 15}}


@contextmanager
def server_process(tmp: Path, evil: str | None, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A server on a fresh SQLite file: the honest `fa-server`, or (`evil`) the malicious one, where a query fails
    after its first aborted cohort. The log must hold no traceback."""
    url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
    fresh_database(url)
    env = dict(env or {})
    command = None
    if evil is not None:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env |= {"FA_EVIL": evil, "PYTHONPATH": path, "FA_MAX_CONSECUTIVE_ABORTS": "1"}
        command = [sys.executable, "-m", "tests.e2e.malicious_server"]
    srv = Server(url, tmp / "server.log", env=env, command=command).start()
    try:
        yield srv
    finally:
        srv.stop()
    assert not srv.log_has_tracebacks(), (tmp / "server.log").read_text(errors="replace")[-5000:]


def refusals(server: Server) -> dict[str, float]:
    """`fa_device_refusals_total` from /metrics: reason → count, the reasons counted at least once."""
    with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for labels, value in re.findall(r"^fa_device_refusals_total\{([^}]*)\} ([0-9.e+-]+)$", text, re.M):
        reason = re.search(r'reason="([^"]+)"', labels)
        if reason and float(value):
            out[reason.group(1)] = out.get(reason.group(1), 0.0) + float(value)
    return out


def stored_events(server: Server, token: str, query_id: str) -> list[dict[str, Any]]:
    """The query's stored events (GET …/events; the stream ends by itself once the query is terminal)."""
    req = urllib.request.Request(f"{server.url}/v1/queries/{query_id}/events", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("event") not in (None, "progress", "end"):
            events.append(json.loads(fields["data"]))
    return events


def devices_refusing(tmp: Path, seed: int, reason: str) -> dict[str, str]:
    """Device (id prefix) → its refusal's detail, as a fleet's devices logged it (`fleet-{seed}.log`)."""
    text = (tmp / f"fleet-{seed}.log").read_text(errors="replace")
    return dict(re.findall(rf"device (\w+): refused query \w+ round 0 \({reason}\): (.*)$", text, re.M))


def nothing_released(server: Server, token: str, query_id: str, final: dict[str, Any], reason: str, refused: int,
                     n: int, phases: tuple[str, ...]) -> None:
    """The query failed naming `reason`, released nothing, its one cohort (of `n`) aborted in one of `phases` with
    `refused` refusals of that reason, and /metrics counts exactly those."""
    admin = AnalystClient(server.url, token)
    assert final["status"] == "failed" and reason in (final["error"] or ""), final
    with pytest.raises(ApiError) as no_result:
        admin.result(query_id)
    assert no_result.value.status == 409, no_result.value
    progress = final["progress"]
    assert progress["rounds_done"] == 0 and progress["contributors"] == 0, progress
    assert progress["cohorts"] == {"aborted": 1}, progress
    assert admin.call("GET", f"/v1/admin/queries/{query_id}/contributors")["rounds"] in ({}, {"0": []})
    events = stored_events(server, token, query_id)
    types = [e["type"] for e in events]
    assert types.count("cohort.formed") == 1 and types.count("cohort.aborted") == 1, types
    assert "cohort.finished" not in types, types
    (formed,) = (e for e in events if e["type"] == "cohort.formed")
    assert formed["data"]["n"] == n, formed
    (aborted,) = (e for e in events if e["type"] == "cohort.aborted")
    assert aborted["data"]["phase"] in phases, aborted
    named = reason if refused == 1 else f"{reason} ×{refused}"
    assert re.search(rf"devices refused: {named}($|,)", aborted["data"]["reason"]), aborted
    assert refusals(server) == {reason: refused}, refusals(server)


def attack_ran(tmp: Path, evil: str) -> str:
    log = (tmp / "server.log").read_text(errors="replace")
    assert f"FA_EVIL={evil}: " in log, "the attack did not run"
    return log


# -- sparse2: a neighbourhood of 3 ------------------------------------------------------------------------------

SPARSE_N = 60


@pytest.mark.parametrize("policy", [None, {"min_cohort": 50}], ids=["default_policy", "min_cohort_50"])
def test_a_sparse_graph_of_degree_two_is_refused(tmp_path: Path, policy: dict[str, Any] | None) -> None:
    with server_process(tmp_path, "sparse2") as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        fleet = Fleet(server.url, SPARSE_N, tmp_path, seed=7,
                      extra=["--policy", json.dumps(policy)] if policy else None)
        try:
            qid = admin.submit(histogram(SPARSE_N))["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
        finally:
            fleet.stop()
        # refused on the assignment, before any data is read: the cohort never reaches its masked inputs
        nothing_released(server, token, qid, final, "unsafe_parameters", SPARSE_N, SPARSE_N,
                         ("advertise_keys", "share_keys"))
    refused = devices_refusing(tmp_path, 7, "unsafe_parameters")
    assert len(refused) == SPARSE_N, refused
    assert all(d.startswith(f"degree: 2 neighbours in a cohort of {SPARSE_N}, below this device's floor")
               for d in refused.values()), refused
    attack_ran(tmp_path, "sparse2")


def test_an_honest_server_releases_the_exact_histogram_to_the_sixty_devices(tmp_path: Path) -> None:
    with server_process(tmp_path, None) as server:
        admin = AnalystClient(server.url, server.token("admin"))
        spec = histogram(SPARSE_N)
        fleet = Fleet(server.url, SPARSE_N, tmp_path, seed=7, extra=["--policy", json.dumps({"min_cohort": 50})])
        try:
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
            assert final["status"] == "succeeded", final
            res = check_exact(admin, qid, spec, fleet.truth())
        finally:
            fleet.stop()
        assert res["result"]["clients"] == SPARSE_N
        assert refusals(server) == {}


# -- semi_honest: no consistency round --------------------------------------------------------------------------

def test_a_cohort_without_the_consistency_round_is_refused(tmp_path: Path) -> None:
    with server_process(tmp_path, "semi_honest") as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        fleet = Fleet(server.url, N, tmp_path, seed=5)
        try:
            qid = admin.submit(histogram(N))["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
        finally:
            fleet.stop()
        nothing_released(server, token, qid, final, "unsafe_parameters", N, N, ("advertise_keys", "share_keys"))
    refused = devices_refusing(tmp_path, 5, "unsafe_parameters")
    assert len(refused) == N and all(d.startswith("threat model semi_honest: no consistency round")
                                     for d in refused.values()), refused
    attack_ran(tmp_path, "semi_honest")


# -- split_survivors: two survivor sets, one colluder -----------------------------------------------------------

def reveal_anyway(client: ClientSession, request: bytes) -> bytes:
    """A colluding member's answer to an unmask request: of each peer, the share the request asks for (the self-mask
    seed's of a listed survivor, the mask key's of any other), whatever signatures came with it."""
    msg = decode(request)
    assert isinstance(msg, UnmaskRequest), msg
    survivors = decode_bitmap(msg.survivors, client.config.n)
    shares = []
    for v in sorted(client._u2):
        b, s = client._own_shares if v == client.party else client._held[v]
        kind = ShareKind.SELF_MASK_SEED if v in survivors else ShareKind.MASK_KEY
        shares.append((v, int(kind), shamir.to_bytes(b if kind is ShareKind.SELF_MASK_SEED else s)))
    return UnmaskShares(client.config.session_id, client.party, tuple(shares)).encode()


class HandDrivenMember:
    """A real registered device the test drives itself on a thread (blocking HTTP, `harness.SyncDevice`): it runs the
    SDK's secagg client for its assignment through every phase, contributing the all-zero vector (it holds no words).
    `colluding`: it is the attacker's — its key is given to the server, which signs with it whatever set it likes, and
    at the unmask request, which its own client refuses as every honest member's does, it reveals the shares asked
    for anyway."""

    def __init__(self, colluding: bool) -> None:
        self.device = SyncDevice("")  # the key first: the attacker's server is given it when it starts
        self.colluding = colluding
        self.party: int | None = None
        self.outcome: str | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True, name="hand-driven-member")

    @property
    def private_key(self) -> str:
        raw = self.device.key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        return base64.b64encode(raw).decode()

    def start(self, url: str) -> None:
        self.device.url = url
        self.device.register()
        self._thread.start()

    def join(self, timeout_s: float) -> str:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "the hand-driven member is still running"
        if self.error is not None:
            raise self.error
        assert self.outcome is not None
        return self.outcome

    def _main(self) -> None:
        try:
            self.outcome = self._run()
        except BaseException as exc:  # re-raised by join, in the test's thread
            self.error = exc

    def _next(self, base: str, phase: int) -> tuple[int, dict[str, str], bytes]:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            status, headers, raw = self.device.call("GET", f"{base}/{phase}/next?wait=10", ctype=None)
            if status != 202:
                return status, headers, raw
        raise AssertionError(f"no answer after phase {phase}")

    def _run(self) -> str:
        dev = self.device
        a = dev.checkin_until_assigned(timeout_s=WAIT_S)
        self.party = a["party_id"]
        client = client_session(a, dev)
        base = f"/v1/device/cohorts/{a['cohort_id']}/phases"
        msg, phase = client.start(), int(a.get("first_phase", 0))
        while True:
            status, _, raw = dev.call("POST", f"{base}/{phase}", msg, "application/octet-stream")
            if status == 410:
                return f"gone after phase {phase}: {raw.decode(errors='replace')}"
            assert status == 202, (phase, status, raw)
            status, headers, raw = self._next(base, phase)
            if status == 410:
                return f"gone after phase {phase}: {raw.decode(errors='replace')}"
            assert status == 200, (phase, status, raw)
            if headers.get("Content-Type", "").startswith("application/json"):
                return json.dumps(json.loads(raw))
            phase = int(headers["X-FA-Phase"])
            try:
                msg = client.receive(raw)
            except InconsistentSurvivorsError:
                if not self.colluding:
                    raise
                msg = reveal_anyway(client, raw)


SPLIT = re.compile(r"FA_EVIL=split_survivors: cohort \w+: colluder party (\d+); parties \[([\d, ]*)\] shown all "
                   r"(\d+) survivors; parties \[([\d, ]*)\] shown a set without \[([\d, ]*)\] \(threshold (\d+)\)")


UNMASKED = re.compile(r"FA_EVIL=split_survivors: cohort \w+: unmask shares \(self-mask seeds, mask keys\) revealed per "
                      r"party: (\{.*?\}); held per victim: (\{.*?\}); threshold 15; victims exposed: (\[.*?\])$", re.M)


def _parties(text: str) -> set[int]:
    return {int(p) for p in text.split(",") if p.strip()}


def test_split_survivor_sets_are_refused_before_any_share_is_revealed(tmp_path: Path) -> None:
    colluder = HandDrivenMember(colluding=True)
    with server_process(tmp_path, "split_survivors", {"FA_EVIL_COLLUDER_KEY": colluder.private_key}) as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        fleet = Fleet(server.url, N, tmp_path, seed=5)
        try:
            colluder.start(server.url)
            qid = admin.submit(histogram(N + 1))["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
            outcome = colluder.join(WAIT_S)
        finally:
            fleet.stop()
        # every honest member refused at the unmask request; the server could not unmask: the cohort aborted there
        nothing_released(server, token, qid, final, "inconsistent_survivors", N, N + 1, ("unmasking",))
        assert outcome.startswith("gone after phase 4"), outcome
    refused = devices_refusing(tmp_path, 5, "inconsistent_survivors")
    assert len(refused) == N, refused
    assert all(re.match(r"consistency: 11 neighbours signed this survivor set, below the threshold 15", d)
               for d in refused.values()), refused

    log = attack_ran(tmp_path, "split_survivors")
    (split,) = SPLIT.findall(log)
    party, first, survivors, second, victims, t = split
    assert int(party) == colluder.party and int(survivors) == N + 1 and int(t) == 15, split
    assert len(_parties(first)) == len(_parties(second)) == N // 2 and len(_parties(victims)) == N + 1 - 15, split
    # no honest member revealed a share: the server holds the colluder's alone, no victim's secret is reconstructible
    ((revealed, held, exposed),) = UNMASKED.findall(log)
    assert json.loads(revealed) == {str(colluder.party): [N + 1, 0]}, revealed
    assert json.loads(held) == {str(v): [1, 0] for v in sorted(_parties(victims))}, held
    assert json.loads(exposed) == [], exposed


def test_an_honest_server_releases_the_exact_histogram_with_the_hand_driven_member(tmp_path: Path) -> None:
    member = HandDrivenMember(colluding=False)
    with server_process(tmp_path, None) as server:
        admin = AnalystClient(server.url, server.token("admin"))
        spec = histogram(N + 1)
        fleet = Fleet(server.url, N, tmp_path, seed=5)
        try:
            member.start(server.url)
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
            assert final["status"] == "succeeded", final
            assert json.loads(member.join(WAIT_S)) == {"status": "finished", "contributed": True}
            res = check_exact(admin, qid, spec, {**fleet.truth(), member.device.device_id: {"words": []}})
        finally:
            fleet.stop()
        assert res["result"]["clients"] == N + 1
        assert refusals(server) == {}


# -- invented_neighbours: identities without the issuer's token -------------------------------------------------

ENROLLED, INVENTED = 12, 8
"""A cohort of 20: share threshold 14 (the complete graph, ⅓ corrupt); 2t − m = 8 invented identities are what the
server needs to sign two survivor sets, and they leave 12 token holders in every neighbourhood."""


@contextmanager
def issuer_process(tmp: Path) -> Iterator[tuple[Issuer, Path]]:
    """An `fa-issuer` admitting fa-sim's credentials, and the app key file fa-sim signs them with."""
    app_key = tmp / "app.key"
    key = new_app_key_file(app_key)
    (tmp / "issuer").mkdir()
    issuer = Issuer(tmp / "issuer", {"fa-sim": bytes(key.verify_key)}).start()
    try:
        yield issuer, app_key
    finally:
        issuer.stop()


def test_a_neighbourhood_short_of_token_holders_is_refused(tmp_path: Path) -> None:
    with issuer_process(tmp_path) as (issuer, app_key), \
            server_process(tmp_path, "invented_neighbours", {"FA_ISSUER_URL": issuer.url}) as server:
        token = server.token("admin")
        admin = AnalystClient(server.url, token)
        enrolled = Fleet(server.url, ENROLLED, tmp_path, seed=12, extra=["--issuer", issuer.url, "--app-key", str(app_key)])
        invented = Fleet(server.url, INVENTED, tmp_path, seed=13)  # the attacker's own devices: no issuer, no token
        try:
            qid = admin.submit(histogram(ENROLLED + INVENTED))["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
        finally:
            enrolled.stop()
            invented.stop()
        # refused at the peer keys, before any share is encrypted: the invented members alone cannot share keys
        nothing_released(server, token, qid, final, "unsafe_parameters", ENROLLED, ENROLLED + INVENTED, ("share_keys",))
    refused = devices_refusing(tmp_path, 12, "unsafe_parameters")
    assert len(refused) == ENROLLED, refused
    assert all(d.startswith(f"threshold: {ENROLLED} of this party's {ENROLLED + INVENTED} neighbours (itself included) "
                            "hold a valid issuer token, below the share threshold 14") for d in refused.values()), refused
    assert devices_refusing(tmp_path, 13, r"\w+") == {}
    log = attack_ran(tmp_path, "invented_neighbours")
    assert (f"FA_EVIL=invented_neighbours: a cohort of {ENROLLED + INVENTED} seats {INVENTED} identities without an "
            f"issuer token beside {ENROLLED} with one") in log


def test_an_honest_server_releases_the_exact_histogram_to_a_fleet_holding_issuer_tokens(tmp_path: Path) -> None:
    """The fleet of the attack without the invented identities, all enrolled, pinning the issuer's keys."""
    with issuer_process(tmp_path) as (issuer, app_key), \
            server_process(tmp_path, None, {"FA_ISSUER_URL": issuer.url}) as server:
        admin = AnalystClient(server.url, server.token("admin"))
        spec = histogram(N)
        fleet = Fleet(server.url, N, tmp_path, seed=12, extra=["--issuer", issuer.url, "--app-key", str(app_key)])
        try:
            qid = admin.submit(spec)["id"]
            final = admin.wait(qid, timeout_s=WAIT_S)
            assert final["status"] == "succeeded", final
            res = check_exact(admin, qid, spec, fleet.truth())
        finally:
            fleet.stop()
        assert res["result"]["clients"] == N
        assert refusals(server) == {}
