"""Screenshots of the console for the README (docs/img/): the histogram result, the training result and the budget
page, made with the browser-test machinery (devstack/browser.py: Playwright driving the system's Chromium) against
a live server and simulated fleets (devstack/processes.py).

    .venv/bin/python scripts/console_screenshots.py [--out docs/img]

Order: 50 breast-cancer devices first (feature statistics, then the DP model, as in the README), then 200 more
devices for two histograms of typed words and a third that cannot form and is cancelled (a refund on the
budget timeline). About a minute.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
from analyst_client.client import AnalystClient
from analyst_client.cli import apply_set
from devstack.browser import chromium_available, console_page
from devstack.processes import Fleet, Server, fresh_database
from fleet_sim.scenarios.datasets import breast_cancer_train_size

WIDTH = 1100


def _example(name: str) -> dict:
    return json.loads((ROOT / "examples" / f"{name}.json").read_text())


def _clip(page, first: str, last: str, pad: int = 8) -> dict:  # type: ignore[no-untyped-def]
    a, b = page.locator(first).bounding_box(), page.locator(last).bounding_box()
    top = a["y"] - pad
    return {"x": 0, "y": top, "width": WIDTH, "height": b["y"] + b["height"] + pad - top}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args(argv)
    missing = chromium_available()
    if missing:
        print(f"console_screenshots: {missing}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        url = f"sqlite+aiosqlite:///{tmp / 'fa.db'}"
        fresh_database(url)
        server = Server(url, tmp / "server.log").start()
        fleets = []
        try:
            token = server.token("analyst")
            api = AnalystClient(server.url, token)
            fleets.append(Fleet(server.url, breast_cancer_train_size(), tmp, scenario="breast_cancer_patient", seed=2,
                                extra=["--processes", "2"]))  # the README's DP pipeline: one record per device
            stats = api.submit(_example("breast_cancer_stats"))["id"]
            assert api.wait(stats, timeout_s=300)["status"] == "succeeded"
            (tmp / "bc_stats.json").write_text(json.dumps(api.result(stats)))
            train = _example("breast_cancer_train_dp")  # the README's DP training, scaled by the statistics
            apply_set(train, f"params.scaling=@{tmp / 'bc_stats.json'}")
            trained = api.submit(train)["id"]
            assert api.wait(trained, timeout_s=300)["status"] == "succeeded"
            fleets.append(Fleet(server.url, 200, tmp, scenario="mixed", seed=1))
            hist = _example("histogram")
            first = api.submit(hist)["id"]
            assert api.wait(first, timeout_s=300)["status"] == "succeeded"
            second = api.submit({**hist, "name": "words typed, again"})["id"]
            assert api.wait(second, timeout_s=300)["status"] == "succeeded"
            stuck = api.submit({**hist, "name": "too many devices asked", "cohort": {"min_clients": 900, "max_clients": 1000}})["id"]
            time.sleep(2)
            api.cancel(stuck)
            with console_page(server.url, token, viewport=(WIDTH, 900)) as s:
                page = s.page
                s.goto(f"#/q/{first}")
                page.wait_for_selector("[data-testid=result] canvas")
                page.screenshot(path=str(out / "console-histogram.png"),
                                clip=_clip(page, "[data-testid=result]", "[data-testid=privacy] > .privacy > p:last-of-type"),
                                full_page=True)
                s.goto(f"#/q/{trained}")
                page.wait_for_selector("[data-testid=history]")
                page.screenshot(path=str(out / "console-training.png"),
                                clip=_clip(page, "[data-testid=result]", "[data-testid=download-model]"), full_page=True)
                s.goto("#/budgets/words")
                page.wait_for_selector("[data-testid=charges] canvas")
                page.screenshot(path=str(out / "console-budget.png"), full_page=True)
                if s.problems:
                    print("console_screenshots: the pages logged problems:", *s.problems, sep="\n  ", file=sys.stderr)
                    return 1
        finally:
            for fleet in fleets:
                fleet.stop()
            server.stop()
    for name in ("console-histogram.png", "console-training.png", "console-budget.png"):
        print(f"{out / name}: {(out / name).stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
