#!/usr/bin/env bash
# Install PostgreSQL and HAProxy from Debian packages when missing (used by `make test-postgres` and
# `make bench`); nothing is downloaded from anywhere but the distribution's package mirror.
set -euo pipefail
find_pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
MISSING=()
[ -z "$(find_pgbin)" ] && MISSING+=(postgresql)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || MISSING+=(haproxy)
if [ "${#MISSING[@]}" -gt 0 ]; then
  echo "[install] installing ${MISSING[*]} (apt-get)…"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${MISSING[@]}" >/dev/null
fi
[ -n "$(find_pgbin)" ] || { echo "[install] PostgreSQL binaries not found after install" >&2; exit 1; }
