"""Shared test machinery: local server and fleet processes (`devstack`), the JS fleet (`js_fleet`), a local
PostgreSQL (`pg_local`), the console's browser (`browser`) and the test-vector generator (`vectors`). Used by the
tests, the demo and the benchmarks; never installed."""
