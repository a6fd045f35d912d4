#!/usr/bin/env bash
# Install Chromium from Debian packages when missing (used by `make test` for the console's browser tests and by
# scripts/console_screenshots.py); nothing is downloaded from anywhere but the distribution's package mirror.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
echo "[install] installing chromium (apt-get)…"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
[ -x /usr/bin/chromium ] || { echo "[install] /usr/bin/chromium not found after install" >&2; exit 1; }
