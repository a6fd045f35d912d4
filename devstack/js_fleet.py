"""JavaScript device fleets for the end-to-end tests and the benchmark: Node devices (device_sdk/js/scripts/fleet.mjs) and browser
devices in headless Chromium pages (scripts/browser_fleet.mjs, playwright-core driving Debian's Chromium), as
subprocesses next to fa-sim fleets. `js_missing()` says why they cannot run (no Node, no built bundle, no Chromium);
under CI (CI set) the tests turn that into a failure instead of a skip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

from devstack.browser import CHROMIUM
from devstack.processes import terminate
from fa_common.keyfile import read_seed
from fa_issuer.attesters import mint_credential
from fleet_sim.enrolment import issuer_keys
from fleet_sim.scenarios import generate

JS = Path(os.environ.get("FA_JS_SDK_DIR") or Path(__file__).resolve().parents[1] / "device_sdk" / "js")
"""The built JS SDK (FA_JS_SDK_DIR: another build of it, e.g. a deliberately broken one to see these tests fail)."""


def js_missing(browser: bool = False) -> str | None:
    """None when the JS fleets can run, else why not (`make js` builds the SDK, `make chromium` installs the browser)."""
    if shutil.which("node") is None:
        return "Node.js not found (scripts/install_node.sh installs it)"
    for built in ("dist/src/node.js", "dist/fa-device-sdk.min.js", "node_modules/playwright-core/package.json"):
        if not (JS / built).exists():
            return f"device_sdk/js/{built} missing (run `make js`)"
    if browser and not os.access(CHROMIUM, os.X_OK):
        return f"Chromium not found at {CHROMIUM} (scripts/install_chromium.sh)"
    return None


def scenario_data(scenario: str, seed: int, n: int) -> list[dict[str, list[Any]]]:
    """The local data of `n` devices of an fa-sim scenario (seeded: other seeds than the Python fleet's, other data)."""
    return [generate(scenario, seed, i) for i in range(n)]


class JsFleet:
    """`fleet.mjs` (Node) or, with `page_port`, `browser_fleet.mjs` (Chromium pages served from that port; the server
    must list http://127.0.0.1:PORT in FA_DEVICE_CORS_ORIGINS). `stop()` returns the fleet's JSON report."""

    def __init__(self, server_url: str, data: list[dict[str, list[Any]]], tmp: Path, name: str, dropout: float = 0.0,
                 seed: int = 1, checkin_wait: float = 3.0, page_port: int | None = None, pages: int = 10,
                 issuer: str | None = None, app_key: Path | None = None, policy: dict[str, Any] | None = None) -> None:
        """`issuer` with `app_key` (the app backend's key file): every device enrols with that `fa-issuer`, its
        credential minted here as the app's backend would (install `js-NAME-i`), the issuer's keys pinned in its
        policy (docs/identities.md); `policy`: more policy fields (the JS names, e.g. `minCohort`)."""
        self.truth_path = tmp / f"truth-{name}.json"
        data_path = tmp / f"data-{name}.json"
        data_path.write_text(json.dumps(data))
        self.log_path = tmp / f"{name}.log"
        self.out_path = tmp / f"{name}.json"
        args = ["--server", server_url, "--data", str(data_path), "--truth", str(self.truth_path), "--dropout", str(dropout),
                "--seed", str(seed), "--checkin-wait", str(checkin_wait)]
        if issuer is not None:
            assert app_key is not None and page_port is None, "enrolment: Node fleets with an app key"
            key, not_after = SigningKey(read_seed(app_key)), int(time.time()) + 30 * 86400
            creds = tmp / f"credentials-{name}.json"
            creds.write_text(json.dumps([mint_credential(key, "fa-sim", f"js-{name}-{i}", not_after) for i in range(len(data))]))
            policy = {"issuerKeys": issuer_keys(issuer), **(policy or {})}
            args += ["--issuer", issuer, "--credentials", str(creds)]
        if policy:
            args += ["--policy", json.dumps(policy)]
        script = "fleet.mjs"
        if page_port is not None:
            script = "browser_fleet.mjs"
            args += ["--page-port", str(page_port), "--pages", str(pages), "--chromium", CHROMIUM]
        self._log = open(self.log_path, "ab")
        self._out = open(self.out_path, "wb")
        self.proc = subprocess.Popen(["node", str(JS / "scripts" / script), *args], stdout=self._out, stderr=self._log, cwd=JS)
        deadline = time.monotonic() + 120
        while not self.truth_path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{script} did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def truth(self) -> dict[str, dict[str, list[Any]]]:
        devices: dict[str, dict[str, list[Any]]] = json.loads(self.truth_path.read_text())["devices"]
        return devices

    def stop(self) -> dict[str, Any]:
        terminate(self.proc, 60)
        for f in (self._log, self._out):
            if not f.closed:
                f.close()
        text = self.out_path.read_text()
        return json.loads(text) if text.strip() else {}
