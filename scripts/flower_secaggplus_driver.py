"""One Flower SecAgg+ round with every party in this process; prints one JSON object (run by scripts/bench_flower.py).

    .venv-flower/bin/python scripts/flower_secaggplus_driver.py --clients 50 --dim 100000 --dropout 0.1

Runs with the Flower virtualenv's interpreter and imports nothing of this repository. Everything that runs is
Flower's own code, unmodified:

- server: `flwr.server.workflow.SecAggPlusWorkflow.__call__` — its four stages (setup, share keys, collect masked
  vectors, unmask) exactly as a Flower ServerApp runs them, with a `LegacyContext` holding a `FedAvg` strategy and
  a `SimpleClientManager` of `GridClientProxy`s, as `DefaultWorkflow` sets them up;
- clients: one `flwr.client.ClientApp(client_fn, mods=[secaggplus_mod])` per client with its own `Context`, the
  mod's stage functions doing the client side (`_setup`, `_share_keys`, `_collect_masked_vectors`, `_unmask`);
- cryptography: Flower's (`flwr.supercore.primitives.asymmetric`: ECDH key pairs on SECP384R1;
  `flwr.common.secure_aggregation.crypto`: HKDF key agreement, Fernet share encryption, Shamir over pycryptodome;
  `secaggplus_utils.pseudo_rand_gen`: the mask PRG, numpy's MT19937 seeded with 32 bits of the key).

The only code of ours is the transport: `DirectGrid`, a `flwr.serverapp.grid.Grid` whose `send_and_receive`
hands each message straight to the destination's `ClientApp` in this process (no gRPC, no SuperLink state, no
simulation engine) and returns the replies. A client that drops never receives its collect-masked-vectors
message, so the server gets no reply from it, as when a Flower grid's `timeout` expires; the driver never waits.
Each message and each reply is copied on the way (`copy.deepcopy`: every receiver gets its own objects, as from
any transport); with `--wire proto` it goes through Flower's protobuf serialisation instead
(`flwr.common.serde.message_to_proto`, `SerializeToString`, parsing, `message_from_proto`), as messages crossing
a network would.

Parameters. `num_shares` = n: each client's neighbourhood is every client (the complete graph);
`reconstruction_threshold` (Flower has no default) = floor(2n/3) + 1 unless given, secagg's default for the
active threat model (scripts/bench_flower.py passes secagg's own number); `modulus_range` = 2^32, Flower's
default; the other workflow arguments keep their defaults. The drops are seeded (`--seed`); keys, seeds and
Flower's neighbour shuffle come from the OS, as in Flower.

Inputs. Flower's workflow aggregates float model updates: each client quantises its floats to integers in
[0, quantization_range) (stochastic rounding), prepends its weight factor and masks the integer vector modulo
`modulus_range`. The inputs here are floats x = k / 2^18 - 8 with k uniform in [0, 2^22), which the default
quantisation (clipping 8.0, quantization_range 2^22) maps to exactly k, with weight 1 (num_examples = max_weight
= 1000). So each client's masked integer vector is [2^22, k_1 … k_dim] (dim + 1 entries) modulo 2^32.

Correctness. The unmasked integer aggregate the server computes (the argument of the workflow's `factor_extract`,
recorded by a pass-through spy) must equal the plain sum of the surviving clients' integer vectors modulo the
modulus, and the model the workflow stores (dequantised, then FedAvg) must be the survivors' mean; the driver
exits 1 otherwise.

Time. `total_s` / `cpu_s` span the workflow call, every party included: wall clock and this process's CPU time
(all threads: Flower's Shamir code uses a thread pool). `client_s` / `server_s` split them per stage (client =
inside the ClientApps; server = the rest). `strategy_aggregate_fit_s` is FedAvg averaging the unmasked result
after the protocol (included in the totals; `protocol_s` excludes it). The server's FitIns carries a one-entry
placeholder model, so no model broadcast is counted.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import resource
import sys
import time
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np

import flwr
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import ndarrays_to_parameters
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.strategy import FedAvg
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation import secaggplus_workflow
from flwr.serverapp.grid import Grid
from flwr.supercore.task_identity import TaskIdentity

RUN_ID = 1
NUM_EXAMPLES = 1000  # = SecAggPlusWorkflow's default max_weight: weight factor 1
STAGES = (Stage.SETUP, Stage.SHARE_KEYS, Stage.COLLECT_MASKED_VECTORS, Stage.UNMASK)


class DirectGrid(Grid):
    """Delivers each message to its node's ClientApp in this process and returns the replies at once."""

    def __init__(self, apps: dict[int, tuple[ClientApp, Context]], drop_at: dict[str, set[int]], wire: str) -> None:
        self.apps = apps
        self.drop_at = drop_at
        self.wire = wire
        self.client_s = {s: 0.0 for s in STAGES}
        self.client_cpu_s = {s: 0.0 for s in STAGES}
        self.wire_bytes = {s: 0 for s in STAGES}
        self._run: Any = None

    def set_run(self, run: Any) -> None:
        self._run = run

    @property
    def run(self) -> Any:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.apps)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        raise NotImplementedError("SecAggPlusWorkflow only calls send_and_receive")

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        raise NotImplementedError("SecAggPlusWorkflow only calls send_and_receive")

    def _over_wire(self, msg: Message, stage: str) -> Message:
        if self.wire != "proto":
            # The receiver gets its own copy, as from any transport: the workflow sends one content object to every
            # client in the setup stage, and secaggplus_mod pops the stage key out of what it receives.
            return copy.deepcopy(msg)
        from flwr.common.serde import message_from_proto, message_to_proto
        from flwr.proto.message_pb2 import Message as ProtoMessage

        data = message_to_proto(msg).SerializeToString()
        self.wire_bytes[stage] += len(data)
        return message_from_proto(ProtoMessage.FromString(data))

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        replies = []
        for msg in messages:
            stage = str(msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE])
            node = msg.metadata.dst_node_id
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # what the SuperLink assigns
            if node in self.drop_at.get(stage, ()):
                continue  # the client is gone: no reply, as when the grid's timeout expires
            msg = self._over_wire(msg, stage)
            app, ctx = self.apps[node]
            wall, cpu = time.perf_counter(), time.process_time()
            reply = app(msg, ctx)
            self.client_s[stage] += time.perf_counter() - wall
            self.client_cpu_s[stage] += time.process_time() - cpu
            reply.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            replies.append(self._over_wire(reply, stage))
        return replies


class VectorClient(NumPyClient):
    """A client whose `fit` returns its fixed update vector (no training)."""

    def __init__(self, vector: np.ndarray) -> None:
        self.vector = vector

    def fit(self, parameters: list[np.ndarray], config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict]:
        return [self.vector], NUM_EXAMPLES, {}


def client_fn_for(vector: np.ndarray) -> Any:
    def client_fn(context: Context) -> Any:  # ClientApp checks for exactly this signature
        return VectorClient(vector).to_client()

    return client_fn


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    n, dim = args.clients, args.dim
    node_ids: list[int] = []  # random 63-bit ids, as the SuperLink assigns them
    while len(node_ids) < n:
        nid = int(rng.integers(2, 1 << 63))
        if nid != SUPERLINK_NODE_ID and nid not in node_ids:
            node_ids.append(nid)
    ks = {nid: rng.integers(0, 1 << 22, dim, dtype=np.int64) for nid in node_ids}
    floats = {nid: k / float(1 << 18) - 8.0 for nid, k in ks.items()}  # quantise to exactly k (see docstring)
    dropped = set(rng.choice(node_ids, size=int(round(n * args.dropout)), replace=False).tolist())
    survivors = [nid for nid in node_ids if nid not in dropped]

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, RUN_ID, SUPERLINK_NODE_ID  # as start_grid
    apps: dict[int, tuple[ClientApp, Context]] = {}
    for nid in node_ids:
        app = ClientApp(client_fn=client_fn_for(floats[nid]), mods=[secaggplus_mod])
        apps[nid] = (app, Context(run_id=RUN_ID, node_id=nid, node_config={}, state=RecordDict(), run_config={}))
    grid = DirectGrid(apps, {Stage.COLLECT_MASKED_VECTORS: dropped}, args.wire)

    client_manager = SimpleClientManager()
    for nid in node_ids:
        client_manager.register(GridClientProxy(nid, grid, RUN_ID))
    strategy = FedAvg(fraction_fit=1.0, min_fit_clients=n, min_available_clients=n, fraction_evaluate=0.0,
                      fit_metrics_aggregation_fn=lambda metrics: {})
    base = Context(run_id=RUN_ID, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context = LegacyContext(base, strategy=strategy, client_manager=client_manager)
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: 1})
    context.state.array_records[MAIN_PARAMS_RECORD] = compat.parameters_to_arrayrecord(
        ndarrays_to_parameters([np.zeros(1)]), keep_input=True)

    threshold = args.threshold if args.threshold is not None else (2 * n) // 3 + 1
    workflow = SecAggPlusWorkflow(num_shares=args.num_shares or n, reconstruction_threshold=threshold,
                                  modulus_range=args.modulus)

    # Pass-through spies: the unmasked integer aggregate, the stages' and FedAvg's times.
    seen: dict[str, Any] = {}
    factor_extract = secaggplus_workflow.factor_extract

    def spy_factor_extract(parameters: list[np.ndarray]) -> Any:
        seen["aggregate"] = [np.array(a, copy=True) for a in parameters]
        return factor_extract(parameters)

    secaggplus_workflow.factor_extract = spy_factor_extract
    aggregate_fit = strategy.aggregate_fit
    agg = {"s": 0.0, "cpu_s": 0.0}

    def timed_aggregate_fit(*a: Any, **kw: Any) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return aggregate_fit(*a, **kw)
        finally:
            agg["s"] += time.perf_counter() - wall
            agg["cpu_s"] += time.process_time() - cpu

    strategy.aggregate_fit = timed_aggregate_fit  # type: ignore[method-assign]
    stage_s: dict[str, float] = {}
    stage_cpu_s: dict[str, float] = {}
    for name, stage in zip(("setup_stage", "share_keys_stage", "collect_masked_vectors_stage", "unmask_stage"), STAGES):
        def timed(*a: Any, _f: Any = getattr(workflow, name), _stage: str = stage, **kw: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return _f(*a, **kw)
            finally:
                stage_s[_stage] = time.perf_counter() - wall
                stage_cpu_s[_stage] = time.process_time() - cpu
        setattr(workflow, name, timed)

    wall0, cpu0 = time.perf_counter(), time.process_time()
    workflow(grid, context)
    total_s, cpu_s = time.perf_counter() - wall0, time.process_time() - cpu0

    # Correctness: Flower's unmasked integer aggregate against the plain sum of the survivors' integer vectors.
    mod = args.modulus
    want = [np.array([len(survivors) * (1 << 22)], dtype=np.int64) % mod,
            np.sum([ks[nid] for nid in survivors], axis=0, dtype=np.int64) % mod]
    got = seen.get("aggregate")
    ints_ok = got is not None and len(got) == 2 and all(
        g.shape == w.shape and np.array_equal(g.astype(np.int64) % mod, w) for g, w in zip(got, want))
    model = compat.arrayrecord_to_parameters(context.state.array_records[MAIN_PARAMS_RECORD], keep_input=True)
    mean = np.mean([floats[nid] for nid in survivors], axis=0)
    from flwr.common import parameters_to_ndarrays
    arrays = parameters_to_ndarrays(model)
    model_ok = len(arrays) == 1 and arrays[0].shape == mean.shape and bool(
        np.allclose(arrays[0], mean, rtol=0.0, atol=1e-9))

    client_s = sum(grid.client_s.values())
    client_cpu_s = sum(grid.client_cpu_s.values())
    return {
        "flower_version": flwr.__version__,
        "clients": n,
        "dim": dim,
        "entries_masked": dim + 1,
        "modulus": mod,
        "quantization_range": workflow.quantization_range,
        "num_shares": workflow.num_shares,
        "threshold": threshold,
        "graph": "complete" if (args.num_shares or n) >= n else "sparse",
        "dropout": args.dropout,
        "drop_phase": "masked_input (after share keys, before sending the masked vector)",
        "dropped": len(dropped),
        "contributors": len(survivors),
        "wire": args.wire,
        "wire_bytes": {s: grid.wire_bytes[s] for s in STAGES} if args.wire == "proto" else None,
        "total_s": round(total_s, 4),
        "cpu_s": round(cpu_s, 4),
        "protocol_s": round(total_s - agg["s"], 4),
        "protocol_cpu_s": round(cpu_s - agg["cpu_s"], 4),
        "strategy_aggregate_fit_s": round(agg["s"], 4),
        "stage_s": {s: round(stage_s.get(s, 0.0), 4) for s in STAGES},
        "stage_cpu_s": {s: round(stage_cpu_s.get(s, 0.0), 4) for s in STAGES},
        "client_s": {s: round(v, 4) for s, v in grid.client_s.items()},
        "client_cpu_s": {s: round(v, 4) for s, v in grid.client_cpu_s.items()},
        "server_s": {s: round(stage_s.get(s, 0.0) - grid.client_s[s], 4) for s in STAGES},
        "client_total_s": round(client_s, 4),
        "server_total_s": round(total_s - client_s, 4),
        "client_total_cpu_s": round(client_cpu_s, 4),
        "server_total_cpu_s": round(cpu_s - client_cpu_s, 4),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "aggregate_ok": bool(ints_ok),
        "model_ok": model_ok,
        "ok": bool(ints_ok and model_ok),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--dim", type=int, default=100_000)
    ap.add_argument("--dropout", type=float, default=0.1, help="share of clients dropping after share keys")
    ap.add_argument("--num-shares", type=int, default=None, help="default: all clients (the complete graph)")
    ap.add_argument("--threshold", type=int, default=None,
                    help="reconstruction threshold; default floor(2n/3)+1, secagg's for the active threat model")
    ap.add_argument("--modulus", type=int, default=1 << 32, help="SecAggPlusWorkflow's modulus_range (its default)")
    ap.add_argument("--wire", choices=["memory", "proto"], default="memory",
                    help="pass message objects (default) or round-trip each through Flower's protobuf serde")
    ap.add_argument("--seed", type=int, default=0, help="seed of the inputs and the drops")
    args = ap.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    result = run(args)
    print(json.dumps(result))
    if not result["ok"]:
        print(f"flower driver: wrong aggregate (integers ok={result['aggregate_ok']}, model ok={result['model_ok']})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
