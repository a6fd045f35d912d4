"""`fa-sim`: run N simulated devices against a server (see fleet_sim.simulator)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys

from device_sdk.policy import DevicePolicy
from device_sdk.servers import parse_server_urls
from fleet_sim.scenarios import SCENARIOS
from fleet_sim.simulator import make_devices, run_fleet, run_fleet_processes, write_truth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fa-sim", description="simulated device fleet")
    p.add_argument("--server", default="http://127.0.0.1:8000",
                   help="server URL, or comma-separated URLs of processes sharing one database (devices fail over)")
    p.add_argument("--split-servers", action="store_true",
                   help="spread the devices over the --server URLs (each starts at a different one) instead of all at the first")
    p.add_argument("--devices", type=int, default=100, help="how many simulated devices (default 100)")
    p.add_argument("--scenario", default="words", help=f"one of: {', '.join(sorted(SCENARIOS))}")
    p.add_argument("--dropout", type=float, default=0.0, help="per-cohort probability that a device stops at a random phase")
    p.add_argument("--seed", type=int, default=0, help="seed of the devices' data and dropout (default 0)")
    p.add_argument("--seeded-randomness", action="store_true",
                   help="device keys, nonces, masks and noise from seeded sources derived from --seed: reproducible "
                   "test runs against a fresh server only (default: OS entropy)")
    p.add_argument("--until-idle", action="store_true", help="exit when no query runs and nothing was assigned for --idle-seconds")
    p.add_argument("--idle-seconds", type=float, default=10.0, help="idle time before --until-idle exits (default 10)")
    p.add_argument("--checkin-wait", type=float, default=10.0, help="long-poll seconds per check-in")
    p.add_argument("--processes", type=int, default=1, help="spread the devices over this many OS processes (default 1)")
    p.add_argument("--truth-file", help="write {device_id: local data} JSON here before starting")
    p.add_argument("--policy", metavar="JSON",
                   help='DevicePolicy fields every device applies, e.g. \'{"require_noise": true, "min_cohort": 50}\' '
                   "(docs/device_sdk.md)")
    p.add_argument("--list-scenarios", action="store_true", help="print the scenarios with a line on each and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    if args.list_scenarios:
        for name, (_, desc) in sorted(SCENARIOS.items()):
            print(f"{name}: {desc}")
        return 0
    if args.scenario not in SCENARIOS:
        p.error(f"--scenario: unknown {args.scenario!r} (known: {', '.join(sorted(SCENARIOS))})")
    if not 0 <= args.dropout < 1:
        p.error("--dropout: must be in [0, 1)")
    if args.devices < 1 or args.processes < 1:
        p.error("--devices and --processes must be ≥ 1")
    try:
        parse_server_urls(args.server, "--server")
    except ValueError as exc:
        p.error(str(exc))
    policy = None
    if args.policy:
        try:
            policy = json.loads(args.policy)
            if not isinstance(policy, dict):
                raise ValueError("must be a JSON object")
            DevicePolicy(**policy)
        except (ValueError, TypeError) as exc:
            p.error(f"--policy: {exc}")
    devices = make_devices(args.devices, args.scenario, args.seed, seeded_randomness=args.seeded_randomness)
    if args.truth_file:
        write_truth(args.truth_file, args.scenario, args.seed, devices)
    print(f"fa-sim: {args.devices} devices, scenario {args.scenario}, dropout {args.dropout}", file=sys.stderr, flush=True)
    if args.processes > 1:
        outcomes = run_fleet_processes(
            args.server, devices, args.processes, args.dropout, args.seed, args.until_idle, args.idle_seconds,
            args.checkin_wait, args.seeded_randomness, args.split_servers, policy,
        )
    else:
        outcomes = asyncio.run(_run_single(args, devices)).outcomes
    print(json.dumps({"outcomes": outcomes}), flush=True)
    return 0


async def _run_single(args: argparse.Namespace, devices):  # type: ignore[no-untyped-def]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await run_fleet(
        args.server, devices, args.dropout, args.seed, args.until_idle, args.idle_seconds, args.checkin_wait, stop,
        seeded_randomness=args.seeded_randomness, split=args.split_servers,
        policy=json.loads(args.policy) if args.policy else None,
    )


if __name__ == "__main__":
    sys.exit(main())
