"""The local development stack the tests, the demo and the benchmarks share (never installed: it is not in the
wheel's packages, and nothing the product ships imports it).

- `devstack.processes`: a real `fa-server`, `fa-sim` fleets and `fa-issuer` as subprocesses, tokens, app key files;
- `devstack.js_fleet`: JavaScript device fleets (Node and headless Chromium);
- `devstack.browser`: Playwright driving the system's Chromium (the console's tests and screenshots);
- `devstack.pg_local`: a throw-away local PostgreSQL;
- `devstack.proving`: what a simulated fleet can prove in time;
- `devstack.readme_pipeline`: the README's DP pipeline in process.

It may import every product package; no product package and no script imports `tests` (tests/test_layering.py).
"""
