"""The JavaScript device SDK's figures, as JSON (part of `make bench`).

- `bundle`: the minified browser bundle `device_sdk/js/dist/fa-device-sdk.min.js`, bytes and gzip (level 9) bytes.
- `cohort`: one 16-bucket histogram (15 words and `other`, Skellam noise, validity proofs) answered by a cohort of
  100 devices over real HTTP: 20 browser devices (headless Chromium, two per page, `browser_fleet.mjs`), 20 Node
  devices in one Node process (`fleet.mjs`) and 60 Python devices (`fa-sim`), no drops. Per secure-aggregation
  phase, the seconds from a server message's arrival to the device's answer (the SDK's `onPhaseTiming`: decoding,
  the crypto, encoding; not the network waits), median and p90 over the browser devices and over the Node devices,
  each device's total, and the query's wall-clock time. Devices sharing a page or process interleave on one event
  loop, so their figures include each other's work (the Node devices' most: twenty on one thread).

Needs Node, the built SDK and Chromium (`make js`, `make chromium`); without them the section says why. The two
cores of the CI machine are shared by the server, 60 Python devices and the browsers, so the figures are an upper
bound for a phone or laptop running one device.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
from analyst_client.cli import AnalystClient
from devstack.js_fleet import JS, JsFleet, js_missing, scenario_data
from devstack.processes import Fleet, Server, free_port, fresh_database
from fleet_sim.scenarios import generate

BUNDLE = JS / "dist" / "fa-device-sdk.min.js"
PHASES = ("advertise_keys", "share_keys", "masked_input", "consistency_check", "unmasking")


def bundle_size() -> dict[str, Any]:
    raw = BUNDLE.read_bytes()
    return {"path": str(BUNDLE.relative_to(ROOT)), "bytes": len(raw), "gzip_bytes": len(gzip.compress(raw, 9))}


def buckets(n: int) -> list[str]:
    """The `n - 1` most common words of the words scenario (the rest fall in `other`)."""
    counts: collections.Counter[str] = collections.Counter()
    for i in range(200):
        counts.update(generate("words", 1, i)["words"])
    return [w for w, _ in counts.most_common(n - 1)]


def quantiles(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"n": len(s), "median_s": round(statistics.median(s), 4), "p90_s": round(s[min(len(s) - 1, int(0.9 * len(s)))], 4),
            "max_s": round(s[-1], 4)}


def per_phase(report: dict[str, Any]) -> dict[str, Any]:
    """Median/p90 seconds per phase over the fleet's devices (one cohort: one figure per device and phase), and of
    each device's total over the phases."""
    devices = [d["phase_seconds"] for d in report.get("devices", []) if d.get("phase_seconds")]
    out: dict[str, Any] = {}
    for phase in PHASES:
        xs = [x for d in devices for x in d.get(phase, [])]
        if xs:
            out[phase] = quantiles(xs)
    totals = [sum(sum(v) for v in d.values()) for d in devices]
    if totals:
        out["device_total"] = quantiles(totals)
    out["outcomes"] = report.get("outcomes", {})
    return out


def cohort(n_browser: int, n_node: int, n_py: int, dim: int) -> dict[str, Any]:
    n = n_browser + n_node + n_py
    spec = {
        "kind": "histogram", "name": "bench js devices", "source": "words",
        "params": {"buckets": buckets(dim), "other_bucket": "other", "max_contributions_per_device": 2},
        "privacy": {"mechanism": "skellam", "epsilon": 2.0, "delta": 1e-6},
        "cohort": {"min_clients": n, "max_clients": n, "phase_timeout_s": 30},
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
        fresh_database(url)
        port = free_port()
        srv = Server(url, tmp / "server.log", env={"FA_DEVICE_CORS_ORIGINS": f"http://127.0.0.1:{port}", "FA_BUDGET_EPSILON": "10"}).start()
        fleets: list[Any] = []
        try:
            print(f"[bench_js] {n_browser} browser + {n_node} Node + {n_py} Python devices", file=sys.stderr, flush=True)
            if n_browser:
                fleets.append(JsFleet(srv.url, scenario_data("words", 31, n_browser), tmp, "browser", seed=7, page_port=port,
                                      pages=max(1, n_browser // 2)))
            if n_node:
                fleets.append(JsFleet(srv.url, scenario_data("words", 32, n_node), tmp, "node", seed=8))
            if n_py:
                fleets.append(Fleet(srv.url, n_py, tmp, seed=13))
            started = time.monotonic()
            qid = AnalystClient(srv.url, srv.token("analyst")).submit(spec)["id"]
            admin = AnalystClient(srv.url, srv.token("admin"))
            final = admin.wait(qid, timeout_s=600)
            wall = time.monotonic() - started
            contributors = len(admin.call("GET", f"/v1/admin/queries/{qid}/contributors")["rounds"].get("0", []))
            if final["status"] != "succeeded":
                print(f"[bench_js] query {final['status']}: {json.dumps(final)[:2000]}\n{(tmp / 'server.log').read_text()[-4000:]}",
                      file=sys.stderr)
        finally:
            stopped = {f: f.stop() for f in reversed(fleets)}
            srv.stop()
    reports = [stopped[f] or {} for f in fleets if isinstance(f, JsFleet)]
    if not n_browser:
        reports.insert(0, {})
    reports.append({})
    return {
        "devices": {"browser": n_browser, "node": n_node, "python": n_py}, "dim": dim, "mechanism": "skellam",
        "status": final["status"], "contributors": contributors, "query_wall_s": round(wall, 2),
        "browser": per_phase(reports[0]), "node": per_phase(reports[1]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--browser", type=int, default=20)
    ap.add_argument("--node", type=int, default=20)
    ap.add_argument("--python", type=int, default=60)
    ap.add_argument("--dim", type=int, default=16)
    args = ap.parse_args()
    missing = js_missing()
    if missing is None and not BUNDLE.exists():
        missing = "the bundle is not built (make js)"
    if missing:
        print(json.dumps({"error": missing}))
        return 0
    out: dict[str, Any] = {"bundle": bundle_size()}
    browser_missing = js_missing(browser=True)
    if browser_missing:
        out["cohort"] = {"error": browser_missing}
    else:
        out["cohort"] = cohort(args.browser, args.node, args.python, args.dim)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
