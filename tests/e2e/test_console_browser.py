"""The analyst console in a real browser: headless Chromium (Debian's package, scripts/install_chromium.sh)
driven by Playwright against a live server and simulated fleets.

One test, in the order an analyst works: a wrong token is refused and the right one signs in; the new-query
page shows the server's field error inline and the preview; a histogram submitted from the form is watched
while its progress changes; the plotted values, read back from the table beside the chart, equal the API's
result; every page (queries with cancel, each kind's result, budgets, fleet) opens without a console error,
a failed request or a Content-Security-Policy violation. Screenshots of every page are kept as artefacts in
$FA_TEST_ARTIFACTS/console (default test-artifacts/console). Skipped, with the reason, only where Chromium or
Playwright is absent; `make test` installs Chromium first.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from analyst_client.client import AnalystClient, pointer, uncertainty_of
from devstack.browser import chromium_available, console_page
from queries.templates import TEMPLATES
from tests.e2e.harness import Fleet, audit_clean, server_on_fresh_sqlite
from tests.readme_blocks import ROOT
from tests.support.toolchain import require

pytestmark = pytest.mark.e2e
MISSING = chromium_available()
ARTIFACTS = Path(os.environ.get("FA_TEST_ARTIFACTS", ROOT / "test-artifacts")) / "console"
MIXED, TRAINERS = 120, 50


def _spec(kind: str, **cohort: Any) -> dict[str, Any]:
    spec = json.loads(json.dumps(TEMPLATES[kind].spec))
    spec["cohort"].update(cohort)
    return spec


@pytest.mark.timeout(900)  # the training query alone may take its 450 s budget on a busy machine
def test_console_end_to_end(tmp_path: Path) -> None:
    require(MISSING, "Chromium for the console tests (make chromium)")
    started = time.monotonic()
    with server_on_fresh_sqlite(tmp_path) as srv:
        token = srv.token("analyst")
        api = AnalystClient(srv.url, token)
        fleet = Fleet(srv.url, MIXED, tmp_path, scenario="mixed", seed=3, checkin_wait=2.0)
        trainers = Fleet(srv.url, TRAINERS, tmp_path, scenario="breast_cancer_train", seed=4, checkin_wait=2.0)
        try:
            _run(srv.url, token, api, tmp_path)
        finally:
            fleet.stop()
            trainers.stop()
    print(f"console browser test: {time.monotonic() - started:.0f} s")


def _train(api: AnalystClient) -> str:
    """The README's training: the breast-cancer features' statistics, then the model scaled with them. Every device
    takes part (the mixed fleet's hold neither collection: missing features, zero-weight updates)."""
    stats = json.loads((ROOT / "examples" / "breast_cancer_stats.json").read_text())
    stats["cohort"] = {"min_clients": 45, "max_clients": 1000}
    # without noise: these trainers hold 8 rows each, where a DP feature_stats is noise (README, "Training")
    stats["params"].pop("max_examples_per_device")
    stats["privacy"] = {"mechanism": "none", "validation": "none"}
    sid = api.submit(stats)["id"]
    assert api.wait(sid, timeout_s=300)["status"] == "succeeded"
    train = _spec("training", min_clients=45, max_clients=1000)
    train["params"]["scaling"] = api.result(sid)["result"]
    return api.submit(train)["id"]


def _expect_only(s: Any, statuses: list[int]) -> None:
    """The problems logged so far are only the browser's lines for these expected error statuses; then forget them."""
    for line in s.problems:
        assert any(f"status of {code}" in line for code in statuses), s.problems
    s.problems.clear()


def _run(url: str, token: str, api: AnalystClient, tmp_path: Path) -> None:
    shots = ARTIFACTS
    with console_page(url, None) as s:
        page = s.page
        # -- sign in: the page's security headers, a refused token, then the right one --------------------
        response = page.goto(f"{url}/ui/#/signin")
        assert response is not None and response.status == 200
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        s.wait_ready()
        page.fill("#token", "fa_not_a_token")
        page.click("form.signin button[type=submit]")
        page.wait_for_selector("[data-testid=signin-error]:not([hidden])")
        assert "unknown or revoked" in page.inner_text("[data-testid=signin-error]")
        _expect_only(s, [401])  # the browser's own line for the refused token's 401
        page.fill("#token", token)
        page.click("form.signin button[type=submit]")
        page.wait_for_selector("[data-testid=who]")
        assert page.evaluate("sessionStorage.getItem('fa.console.session')") is not None
        assert page.evaluate("localStorage.length") == 0 and page.context.cookies() == []

        # -- the new-query page: an inline field error from the server, the preview, a submit -------------
        s.goto("#/new/histogram")
        s.shot(shots / "new-query.png")
        spec = _spec("histogram", min_clients=80)
        bad = json.loads(json.dumps(spec))
        bad["params"]["max_contributions_per_device"] = 0
        page.fill("[data-testid=editor]", json.dumps(bad, indent=2))
        page.click("[data-testid=submit]")
        page.wait_for_selector("[data-testid=errors] li")
        err = page.locator("[data-testid=errors] li").first
        assert "max_contributions_per_device" in err.get_attribute("data-field")
        line = int(err.get_attribute("data-line"))
        assert '"max_contributions_per_device": 0' in json.dumps(bad, indent=2).split("\n")[line - 1]
        assert page.locator(".gutter .mark").count() == 1
        s.shot(shots / "new-query-error.png")
        _expect_only(s, [422])  # Chromium logs every error status it receives: here the deliberate 422 alone
        page.fill("[data-testid=editor]", json.dumps(spec, indent=2))
        page.click("[data-testid=preview-button]")
        page.wait_for_selector("[data-testid=preview] h3, [data-testid=no-preview]")
        if page.locator("[data-testid=no-preview]").count():
            preview_shown = False  # this server has no POST /v1/queries/preview: the page says so
            _expect_only(s, [404, 405])
        else:
            preview_shown = True
            assert "ε = 1" in page.inner_text("[data-testid=preview-facts]")
        s.shot(shots / "new-query-preview.png")
        page.click("[data-testid=submit]")
        page.wait_for_url("**/ui/#/q/*")
        qid = page.url.rsplit("/", 1)[-1]
        s.wait_ready()

        # -- other kinds and a cancellable query, through the API while the browser watches ----------------
        # (cohorts of at most 85 of the 170 devices, so two queries run at once)
        hh = _spec("heavy_hitters", min_clients=60, max_clients=85)
        hh["privacy"] = {"mechanism": "none"}  # exact counts: the common words are found
        hh["params"]["max_length"] = 6
        others = {
            "feature_stats": api.submit(_spec("feature_stats", min_clients=60, max_clients=85))["id"],
            "heavy_hitters": api.submit(hh)["id"],
        }

        # -- watch the histogram's progress change until it succeeds ------------------------------------
        seen: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = page.inner_text("[data-testid=progress-text]")
            if not seen or seen[-1] != text:
                seen.append(text)
            if page.locator("[data-testid=result] [data-testid=values]").count():
                break
            time.sleep(0.1)
        assert page.inner_text(".pagehead [data-testid=status]") == "succeeded", seen
        assert len(seen) >= 3, f"progress did not visibly change: {seen}"
        assert any("answered" in t for t in seen) or any("forming" in t for t in seen), seen
        s.shot(shots / "histogram.png")

        # -- the plotted values equal the API's result --------------------------------------------------
        view = api.result(qid)
        rows = page.eval_on_selector_all(
            "[data-testid=values] tbody tr",
            "rows => rows.map(r => ({...r.dataset}))")
        counts, suppressed = view["result"]["counts"], set(view["result"]["suppressed"])
        assert {r["key"] for r in rows} == set(counts) | suppressed
        for r in rows:
            if r["suppressed"] == "1":
                assert r["key"] in suppressed and r["value"] == ""
                continue
            assert float(r["value"]) == counts[r["key"]]
            u = uncertainty_of(view, pointer("counts", r["key"]), counts[r["key"]])
            assert u is not None, "a DP histogram count has a 95 % interval"
            assert abs(float(r["lo"]) - u.lo) < 1e-6 and abs(float(r["hi"]) - u.hi) < 1e-6
        assert page.locator("[data-testid=result] canvas").count() >= 1
        assert "Skellam" in page.inner_text("[data-testid=privacy]")

        # -- each kind's result page --------------------------------------------------------------------
        others["training"] = _train(api)
        for kind, other in others.items():
            # training: 10 rounds and 2 evaluations of 170 devices (stretched for the load like every other wait)
            final = api.wait(other, timeout_s=450 if kind == "training" else 150)
            assert final["status"] == "succeeded", final
            s.goto(f"#/q/{other}")
            page.wait_for_selector("[data-testid=result] .result")
            s.shot(shots / f"{kind}.png")
            trust = page.locator("[data-testid=trust-warning]")  # no proofs: said above the values, never folded
            if api.result(other)["privacy"]["validation"] == "proofs":
                assert trust.count() == 0, kind
            else:
                assert trust.count() == 1 and "no device proved" in trust.inner_text(), kind
        res = api.result(others["feature_stats"])["result"]
        s.goto(f"#/q/{others['feature_stats']}")
        page.wait_for_selector("[data-testid=values]")
        feats = page.eval_on_selector_all("[data-testid=values] tbody tr", "rows => rows.map(r => r.dataset.key)")
        assert feats == list(res["features"])
        # one histogram section per feature, each with its chart
        assert page.locator("[data-section^='histogram:'] canvas").count() == len(res["features"])
        s.goto(f"#/q/{others['heavy_hitters']}")
        page.wait_for_selector("[data-testid=table-trie]")  # exact counts (no noise): the common words are found
        hh = api.result(others["heavy_hitters"])
        found = [x["value"] for x in sorted(hh["result"]["heavy_hitters"], key=lambda x: -x["count"])]
        assert found and page.eval_on_selector_all("[data-testid=values] tbody tr", "rows => rows.map(r => r.dataset.key)") == found
        prefixes = page.eval_on_selector_all("[data-testid=table-trie] tbody tr", "rows => rows.map(r => r.dataset.key)")
        assert prefixes == sorted(hh["result"]["trie"])
        s.goto(f"#/q/{others['training']}")
        page.wait_for_selector("[data-section=history] [data-testid=values]")
        hist = api.result(others["training"])["result"]["history"]
        assert page.locator("[data-testid=values] tbody tr").count() == len(hist)
        assert page.locator("[data-section=history] canvas").count() == 1  # the loss curve
        assert page.locator("[data-testid=table-weights] tbody tr").count() == len(api.result(others["training"])["result"]["weights"])

        # -- queries (live, with cancel), budgets, fleet --------------------------------------------------
        stuck = api.submit(_spec("histogram", min_clients=900, max_clients=1000))["id"]  # cannot form: cancel it
        s.goto("#/queries")
        row = page.locator(f"[data-testid=queries] tr[data-id='{stuck}']")
        row.locator("[data-testid=cancel]").click()
        page.wait_for_selector(f"[data-testid=queries] tr[data-id='{stuck}'][data-status=cancelled]", timeout=15_000)
        assert api.status(stuck)["status"] == "cancelled"
        s.shot(shots / "queries.png")
        s.goto("#/budgets/words")
        page.wait_for_selector("[data-testid=charges] canvas")
        spent = page.get_attribute("[data-testid=budgets] tr[data-source=words]", "data-spent")
        assert float(spent) == api.budget("words")["spent_epsilon"]
        s.shot(shots / "budgets.png")
        s.goto("#/fleet")
        page.wait_for_function("() => document.querySelector('[data-stat=rate] .value').textContent !== 'measuring…'",
                               timeout=10_000)  # (an arrow function: the page's CSP forbids eval of a string)
        registered = page.inner_text("[data-stat=registered] .value").replace(",", "")
        assert int(registered) == MIXED + TRAINERS
        assert page.locator("[data-testid=phases] tbody tr").count() >= 4
        s.shot(shots / "fleet.png")
        # -- the transparency log: the browser's own audit of the real log (every kind's entries) finds nothing --
        s.goto("#/log")
        page.wait_for_selector("[data-testid=log-verdict]", timeout=60_000)
        assert page.get_attribute("[data-testid=log-verdict]", "data-findings") == "0", page.inner_text("main")
        shown = int(page.get_attribute("[data-testid=log-head]", "data-size") or -1)
        audited = audit_clean(url).head
        assert audited is not None and 0 < shown <= audited.size
        assert int(page.get_attribute("[data-testid=log-types] tr[data-type=task]", "data-count") or 0) >= 4
        s.shot(shots / "log.png")
        assert not s.problems, s.problems
        if not preview_shown:
            print("note: the server offers no preview; the page said so")
