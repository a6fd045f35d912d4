"""The public transparency log's pure parts, shared by the server, the device SDK and auditors (no network or
database I/O; `translog.keyfile` reads and writes key files).

- `translog.merkle`: RFC 9162 tree hashing, inclusion and consistency proofs (building and checking);
- `translog.heads`: signed tree heads and witness cosignatures (Ed25519);
- `translog.entries`: what the log records (queries, cohort tasks, privacy charges and refunds, budgets,
  releases) and the canonical bytes of each leaf;
- `translog.wire`: the JSON shapes of the routes and of a device's proof bundle;
- `translog.check`: the device's check of its task against the log.

docs/transparency.md describes the log, its routes and who must be trusted for what.
"""
