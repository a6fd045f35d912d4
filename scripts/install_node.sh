#!/usr/bin/env bash
# Install Node.js and npm from Debian packages when missing (used by `make js` for the JavaScript device SDK's build,
# unit tests and the JS devices of the end-to-end tests); nothing is downloaded from anywhere but the distribution's
# package mirror. The SDK needs Node >= 20 (@cloudflare/blindrsa-ts, identity tokens; the machine images ship 20).
set -euo pipefail
if command -v node >/dev/null && command -v npm >/dev/null; then exit 0; fi
echo "[install] installing nodejs and npm (apt-get)…"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
missing=""
command -v node >/dev/null || missing="nodejs"
command -v npm >/dev/null || missing="$missing npm"
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
command -v node >/dev/null && command -v npm >/dev/null || { echo "[install] node or npm not found after install" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "[install] Node $(node --version) is too old: the JS device SDK needs Node >= 20" >&2; exit 1; }
