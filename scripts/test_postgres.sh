#!/usr/bin/env bash
# `make test-postgres`: install PostgreSQL and HAProxy (Debian packages, scripts/install_postgres.sh) if needed, start a throw-away local
# cluster, create a database, and run the PostgreSQL variants of the end-to-end tests (-m postgres) against
# it, including the many-process tests (tests/e2e/test_cluster.py, behind a real HAProxy). They run on PG_WORKERS
# pytest-xdist workers (default 2), a module at a time, each worker on a database of its own
# (devstack/pg_local.py `worker_database`); PG_WORKERS=0 runs them one at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT="${FA_PG_PORT:-54329}"

find_pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }

bash scripts/install_postgres.sh
export PATH="$PATH:/usr/sbin"
PGBIN="$(find_pgbin)"
[ -n "$PGBIN" ] || { echo "[test-postgres] PostgreSQL binaries not found after install" >&2; exit 1; }

PGDATA="$(mktemp -d /tmp/fa-pg.XXXXXX)"
AS=()
if [ "$(id -u)" -eq 0 ]; then  # initdb refuses to run as root
  chown postgres:postgres "$PGDATA"
  AS=(runuser -u postgres --)
fi
cleanup() {
  "${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$PGDATA"
}
trap cleanup EXIT

"${AS[@]}" "$PGBIN/initdb" -D "$PGDATA" -A trust -U postgres >/dev/null
"${AS[@]}" "$PGBIN/pg_ctl" -D "$PGDATA" -l "$PGDATA/server.log" -w \
  -o "-p $PORT -k $PGDATA -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off" start >/dev/null
"${AS[@]}" "$PGBIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres fa_test
echo "[test-postgres] PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT"

export FA_TEST_POSTGRES_URL="postgresql+asyncpg://postgres@127.0.0.1:$PORT/fa_test"
"$PY" -m pytest tests/e2e tests/analytics_server/test_formation_crash.py -m postgres -q -p no:cacheprovider -n "${PG_WORKERS:-2}" --dist loadfile --no-loadscope-reorder \
  --durations=10 "$@"
