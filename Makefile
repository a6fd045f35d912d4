# Every target creates .venv and installs into it when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
E2E_WORKERS ?= 3

.PHONY: venv test test-fast test-loaded test-fast-loaded typecheck in-process demo bench test-postgres clean chromium screenshots node js js-test

venv: $(STAMP)

# pip's own output and warnings go to $(PIP_LOG), whose path is printed only when the install fails.
PIP_LOG := $(VENV)/pip-install.log
PIP := $(PY) -m pip --quiet --disable-pip-version-check

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	@{ $(PIP) install --upgrade pip==24.3.1 && \
	   $(PIP) install -c constraints.txt -e ".[device,server,issuer,analyst,sim,dev]"; } >$(PIP_LOG) 2>&1 || \
	 { echo "[venv] pip install failed; its output is in $(PIP_LOG)" >&2; tail -n 20 $(PIP_LOG) >&2; exit 1; }
	touch $(STAMP)

# The whole suite: the in-process tiers (two pytest-xdist workers, started first: they take longest) beside the JS unit
# tests, then mypy; then the end-to-end
# tier (tests/e2e and the issuer's real-process tests in tests/fa_issuer) on three workers, a module at a time,
# longest modules first (tests/e2e/conftest.py). An end-to-end test
# spends part of its time waiting (cohort formation, phase deadlines, restarts), so three at once keep both cores
# busy; the tests' deadlines leave room for two neighbours. `make test E2E_WORKERS=0` runs them one at a time.
test: $(STAMP) chromium js
	@$(MAKE) --no-print-directory -j2 --output-sync=target in-process js-test typecheck
	$(PY) -m pytest -q -n $(E2E_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15 -m e2e tests/e2e tests/fa_issuer $(PYTEST_ARGS)

# mypy over the packages and the test machinery ([tool.mypy] in pyproject.toml: strict on secagg/ and queries/).
typecheck: $(STAMP)
	$(PY) -m mypy

# The in-process tiers alone (what test-fast runs after the JS unit tests).
in-process: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not e2e" $(PYTEST_ARGS)

# The console's browser tests drive Debian's Chromium (never a browser downloaded by Playwright). Where it cannot
# be installed (no apt) they are skipped with the reason; under CI (CI set) that is an error.
chromium:
	@bash scripts/install_chromium.sh || { [ -z "$$CI" ] && echo "[test] Chromium not installed: the console's browser tests will be skipped"; }

# The JavaScript device SDK (device_sdk/js): Node and npm from Debian packages (scripts/install_node.sh), `npm ci` from
# the lockfile when it changes, the TypeScript build and the minified bundle when a source changes (stamp files).
# Without Node the JS unit tests and the JS devices' end-to-end tests are skipped with the reason; under CI that is
# an error. Node 18 (Debian 12's) exposes WebCrypto globally only behind a flag.
JS_DIR := device_sdk/js
JS_DEPS := $(JS_DIR)/node_modules/.fa-installed
JS_BUILT := $(JS_DIR)/dist/.fa-built
JS_PACK := $(JS_DIR)/dist-pack/.fa-packed
JS_SRC := $(JS_DIR)/tsconfig.json $(JS_DIR)/scripts/bundle.mjs $(shell find $(JS_DIR)/src $(JS_DIR)/test -type f 2>/dev/null)
HAVE_NODE = command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1
ifeq ($(shell node -p 'process.versions.node.split(".")[0]' 2>/dev/null),18)
export NODE_OPTIONS := --experimental-global-webcrypto $(NODE_OPTIONS)
endif

node:
	@bash scripts/install_node.sh || { [ -z "$$CI" ] && echo "[test] Node.js not installed: the JS device SDK's tests will be skipped"; }

js: node
	@if $(HAVE_NODE); then $(MAKE) --no-print-directory $(JS_BUILT) $(JS_PACK); \
	elif [ -n "$$CI" ]; then echo "[test] CI needs Node.js and npm for the JS device SDK" >&2; exit 1; fi

$(JS_DEPS): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(JS_BUILT): $(JS_DEPS) $(JS_SRC)
	rm -rf $(JS_DIR)/dist  # no compiled leftovers of deleted sources
	cd $(JS_DIR) && npm run --silent bundle
	touch $@

# The SDK as an npm tarball (package.json `files`: the built SDK, its sources, the examples): `npm install <tgz>`.
$(JS_PACK): $(JS_BUILT) $(JS_DIR)/package.json $(shell find $(JS_DIR)/examples -type f 2>/dev/null)
	rm -rf $(JS_DIR)/dist-pack && mkdir -p $(JS_DIR)/dist-pack
	cd $(JS_DIR) && f=$$(npm pack --pack-destination dist-pack --loglevel=error) && echo "[js] tarball: $(JS_DIR)/dist-pack/$$f"
	touch $@

# The JS unit tests (Node's test runner over the compiled tests), when Node is here; a hung test fails the run
# after 15 minutes instead of stalling it (about a minute on two idle cores, over five at load 13).
js-test: js
	@if $(HAVE_NODE); then cd $(JS_DIR) && timeout 900 node --test dist/test/; \
	else echo "[test] Node.js not installed: JS unit tests skipped"; fi

# Screenshots of the console for the README (docs/img/), with the browser-test machinery.
screenshots: $(STAMP) chromium
	$(PY) -m scripts.console_screenshots

# The whole suite and the demo beside two CPU busy loops (load >= 4 on a 2-core machine): proves the deadlines survive
# a busy machine. Prints each step's duration and the load averages at the end (scripts/test_loaded.sh; ~30 min).
test-loaded: $(STAMP)
	MAKE="$(MAKE)" bash scripts/test_loaded.sh 2

# `make test-fast` three times in a row beside two CPU busy loops: the in-process tiers hold on a busy machine.
test-fast-loaded: $(STAMP)
	MAKE="$(MAKE)" bash scripts/test_loaded.sh 2 test-fast test-fast test-fast

# Everything but the end-to-end tier (real server processes and fleets): under a minute.
test-fast: js-test typecheck in-process

demo: $(STAMP)
	$(PY) -m scripts.demo

bench: $(STAMP) chromium js
	bash scripts/install_postgres.sh
	$(PY) -m scripts.bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

test-postgres: $(STAMP)
	bash scripts/test_postgres.sh
