# Every target creates .venv and installs into it when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test test-fast demo bench test-postgres clean chromium screenshots

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==24.3.1
	$(PY) -m pip install --quiet -c constraints.txt -e ".[server,analyst,sim,dev]"
	touch $(STAMP)

# The whole suite: the in-process tiers on two workers (pytest-xdist), then the end-to-end tier one test at a
# time (its fleets use every core; run side by side, their phase deadlines would measure contention).
test: $(STAMP) chromium
	$(PY) -m pytest -q -n 2 -m "not e2e" $(PYTEST_ARGS)
	$(PY) -m pytest -q -m e2e $(PYTEST_ARGS)

# The console's browser tests drive Debian's Chromium (never a browser downloaded by Playwright). Where it cannot
# be installed (no apt) they are skipped with the reason; under CI (CI set) that is an error.
chromium:
	@bash scripts/install_chromium.sh || { [ -z "$$CI" ] && echo "[test] Chromium not installed: the console's browser tests will be skipped"; }

# Screenshots of the console for the README (docs/img/), with the browser-test machinery.
screenshots: $(STAMP) chromium
	$(PY) scripts/console_screenshots.py

# Everything but the end-to-end tier (real server processes and fleets): under a minute.
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not e2e" $(PYTEST_ARGS)

demo: $(STAMP)
	$(PY) scripts/demo.py

bench: $(STAMP)
	bash scripts/install_postgres.sh
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis

test-postgres: $(STAMP)
	bash scripts/test_postgres.sh
