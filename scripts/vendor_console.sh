#!/usr/bin/env bash
# Re-vendor the console's third-party JavaScript: Chart.js from the npm registry at the pinned version, checked
# against the registry's integrity hash. Writes analytics_server/console/vendor/{chart.umd.min.js,
# chart.js.LICENSE.md,manifest.json}. Needs npm and python3; run it only to change the pinned version (the
# files are committed: nothing is downloaded at install, test or run time).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=chart.js
VERSION=4.6.1
INTEGRITY=sha512-hJyniucsFmq//EvXYvJ6c6mahPoI3kaxdjVH8awTaJ/fDNWeSqqqArixMJWkWNN6fcYvPU3HneSANFNYtRi61g==
DEST=analytics_server/console/vendor

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tgz="$tmp/$PACKAGE-$VERSION.tgz"
actual="sha512-$(python3 -c 'import base64,hashlib,sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1],"rb").read()).digest()).decode())' "$tgz")"
if [ "$actual" != "$INTEGRITY" ]; then
  echo "[vendor] $PACKAGE@$VERSION: integrity $actual does not match the pinned $INTEGRITY" >&2
  exit 1
fi
tar -xzf "$tgz" -C "$tmp"
mkdir -p "$DEST"
cp "$tmp/package/dist/chart.umd.min.js" "$DEST/chart.umd.min.js"
cp "$tmp/package/LICENSE.md" "$DEST/chart.js.LICENSE.md"
python3 - "$DEST" "$PACKAGE" "$VERSION" "$INTEGRITY" <<'PY'
import hashlib, json, sys
from pathlib import Path
dest, package, version, integrity = sys.argv[1:]
files = {name: hashlib.sha256((Path(dest) / name).read_bytes()).hexdigest()
         for name in ("chart.umd.min.js", "chart.js.LICENSE.md")}
manifest = {"package": package, "version": version, "integrity": integrity, "license": "MIT",
            "source": {"chart.umd.min.js": "package/dist/chart.umd.min.js", "chart.js.LICENSE.md": "package/LICENSE.md"},
            "sha256": files}
(Path(dest) / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
PY
echo "[vendor] $PACKAGE@$VERSION → $DEST"
