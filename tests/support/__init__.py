"""Machinery only the tests use: fitted deadlines (`deadlines`), CLI help checks (`cli_help`), toolchain checks
(`toolchain`), the log's test cases (`translog_cases`) and the test-vector generator (`vectors`). Never installed; what
the demo and the benchmarks share with the tests is the top-level `devstack` package."""
