"""`fa-sim`: run N simulated devices against a server (see fleet_sim.simulator).

Before it builds the fleet, `fa-sim` checks that a server answers (`GET /healthz` on each --server URL, retried
for --connect-timeout seconds); if none does it says so in one line on stderr and exits with `EXIT_UNREACHABLE`.
Once running, the devices ride out a server that goes away (restarts, failover) as real devices do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request

from device_sdk.policy import DevicePolicy
from device_sdk.servers import parse_server_urls
from fleet_sim.enrolment import EnrolmentSetupError, enrolments, issuer_keys
from fleet_sim.scenarios import SCENARIOS
from fleet_sim.simulator import make_devices, run_fleet, run_fleet_processes, write_truth


EXIT_UNREACHABLE = 2
"""No --server URL answered within --connect-timeout seconds at start (the code of bad usage too, as fa-server's
for an unreachable database)."""
EPILOG = ("exit codes: 0 the fleet ran and stopped (--until-idle, SIGINT or SIGTERM); 2 bad usage, or no --server URL "
          "answered GET /healthz within --connect-timeout seconds at start (one line on stderr names the URL)")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Straight to the server, as the devices' aiohttp session goes (it ignores *_proxy variables)."""


def unreachable(urls: list[str], timeout_s: float) -> str | None:
    """None as soon as one of `urls` answers `GET /healthz` with any HTTP status (it is up, if perhaps unwell),
    else, once `timeout_s` has passed, why the last try at each failed."""
    deadline = time.monotonic() + timeout_s
    while True:
        reasons = []
        for url in urls:
            try:
                with _NO_PROXY.open(f"{url}/healthz", timeout=max(0.2, min(2.0, deadline - time.monotonic()))):
                    return None
            except urllib.error.HTTPError:
                return None  # an HTTP answer: something listens there
            except TimeoutError:
                return None  # connected (urllib wraps a connect timeout in URLError), but slow to answer: a busy server
            except (OSError, ValueError) as exc:
                reasons.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
        if time.monotonic() >= deadline:
            return "; ".join(reasons)
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="fa-sim", description="simulated device fleet", epilog=EPILOG)
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
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS",
                   help=f"at start, keep trying the server this long before giving up with exit code {EXIT_UNREACHABLE} "
                   "(default 10)")
    p.add_argument("--checkin-wait", type=float, default=10.0, help="long-poll seconds per check-in")
    p.add_argument("--processes", type=int, default=1, help="spread the devices over this many OS processes (default 1)")
    p.add_argument("--truth-file", help="write {device_id: local data} JSON here before starting")
    p.add_argument("--policy", metavar="JSON",
                   help='DevicePolicy fields every device applies, e.g. \'{"require_noise": true, "min_cohort": 50}\' '
                   "(docs/device_sdk.md)")
    p.add_argument("--issuer", metavar="URL", default=os.environ.get("FA_ISSUER_URL") or None,
                   help="enrol every device with this identity issuer (fa-issuer) and pin its keys in the devices' "
                        "policy (docs/identities.md); needs --app-key (default: $FA_ISSUER_URL, as fa-server reads it)")
    p.add_argument("--app-key", metavar="FILE", default=os.environ.get("FA_APP_KEY_FILE") or None,
                   help="the app backend's key file (`fa-issuer app-key --out FILE`): fa-sim signs each device's "
                        "enrolment credential with it, as an app's backend would (default: $FA_APP_KEY_FILE)")
    p.add_argument("--app", default="fa-sim", help="the app's name in the credentials (the issuer's --app NAME=…; default fa-sim)")
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
        urls = parse_server_urls(args.server, "--server")
    except ValueError as exc:
        p.error(str(exc))
    if args.connect_timeout < 0:
        p.error("--connect-timeout: must be ≥ 0")
    policy = None
    if args.policy:
        try:
            policy = json.loads(args.policy)
            if not isinstance(policy, dict):
                raise ValueError("must be a JSON object")
            DevicePolicy(**policy)
        except (ValueError, TypeError) as exc:
            p.error(f"--policy: {exc}")
    if bool(args.issuer) != bool(args.app_key):
        p.error("--issuer and --app-key go together")
    why = unreachable(urls, args.connect_timeout)
    if why is not None:
        print(f"fa-sim: cannot reach the server at {args.server} after {args.connect_timeout:g} s ({why}); is fa-server "
              "running there? (--server, --connect-timeout)", file=sys.stderr, flush=True)
        return EXIT_UNREACHABLE
    devices = make_devices(args.devices, args.scenario, args.seed, seeded_randomness=args.seeded_randomness)
    if args.truth_file:
        write_truth(args.truth_file, args.scenario, args.seed, devices)
    enrolled = None
    if args.issuer:
        try:
            policy = {"issuer_keys": issuer_keys(args.issuer), **(policy or {})}
            enrolled = enrolments(args.issuer, args.app_key, args.app, devices)
        except EnrolmentSetupError as exc:
            print(f"fa-sim: {exc}", file=sys.stderr, flush=True)
            return EXIT_UNREACHABLE
    args.policy_fields = policy
    print(f"fa-sim: {args.devices} devices, scenario {args.scenario}, dropout {args.dropout}", file=sys.stderr, flush=True)
    if args.processes > 1:
        outcomes = run_fleet_processes(
            args.server, devices, args.processes, args.dropout, args.seed, args.until_idle, args.idle_seconds,
            args.checkin_wait, args.seeded_randomness, args.split_servers, policy, enrolled,
        )
    else:
        outcomes = asyncio.run(_run_single(args, devices, enrolled)).outcomes
    print(json.dumps({"outcomes": outcomes}), flush=True)
    return 0


async def _run_single(args: argparse.Namespace, devices, enrolled):  # type: ignore[no-untyped-def]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await run_fleet(
        args.server, devices, args.dropout, args.seed, args.until_idle, args.idle_seconds, args.checkin_wait, stop,
        seeded_randomness=args.seeded_randomness, split=args.split_servers,
        policy=args.policy_fields, enrolments=enrolled,
    )


if __name__ == "__main__":
    sys.exit(main())
