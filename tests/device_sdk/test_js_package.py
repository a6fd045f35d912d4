"""The JS device SDK as an npm tarball (`make js` → device_sdk/js/dist-pack/*.tgz): `npm pack` of the built SDK
installs into an empty project and its entry points import under Node.

Runs when Node, npm and the built SDK are here (devstack/js_fleet.py `js_missing`); under CI (CI set) their
absence is a failure. The SDK's runtime dependencies come from npm's cache when it has them (`--prefer-offline`):
a first run on a machine whose cache lacks their metadata needs the registry.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path


from devstack.js_fleet import JS, js_missing
from tests.support.toolchain import require


def _require_npm() -> None:
    missing = js_missing() or (None if shutil.which("npm") else "npm not found (scripts/install_node.sh installs it)")
    require(missing, "the JS SDK's toolchain (make js)")


def _npm(*args: str, cwd: Path) -> str:
    out = subprocess.run(["npm", *args, "--loglevel=error"], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"npm {' '.join(args)} failed ({out.returncode}): {out.stderr[-2000:]}"
    return out.stdout


def test_npm_pack_installs_into_an_empty_project_and_imports(tmp_path: Path) -> None:
    _require_npm()
    version = json.loads((JS / "package.json").read_text())["version"]
    packed = tmp_path / "pack"
    packed.mkdir()
    name = _npm("pack", "--pack-destination", str(packed), cwd=JS).strip().splitlines()[-1]
    tgz = packed / name
    assert name == f"fa-device-sdk-{version}.tgz" and tgz.is_file()

    listing = subprocess.run(["tar", "-tzf", str(tgz)], capture_output=True, text=True, check=True).stdout.split()
    for built in ("package/dist/src/index.js", "package/dist/src/index.d.ts", "package/dist/src/node.js",
                  "package/dist/fa-device-sdk.min.js", "package/examples/page/app.js"):
        assert built in listing, f"{built} not in the tarball"
    assert not [f for f in listing if f.startswith(("package/dist/test/", "package/node_modules/"))]

    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "version": "1.0.0", "private": True, "type": "module"}))
    _npm("install", "--prefer-offline", "--no-audit", "--no-fund", str(tgz), cwd=app)
    check = ("Promise.all([import('fa-device-sdk'), import('fa-device-sdk/node')]).then(([m, n]) => "
             "console.log(JSON.stringify({client: typeof m.DeviceClient, policy: typeof m.DevicePolicy, "
             "store: typeof m.LocalStore, fileStore: typeof n.fileStore})))")
    out = subprocess.run(["node", "-e", check], cwd=app, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {"client": "function", "policy": "function", "store": "function",
                                      "fileStore": "function"}
