"""The public transparency log's pure parts, shared by the server, the device SDK and auditors (no I/O).

- `translog.merkle`: RFC 9162 tree hashing, inclusion and consistency proofs (building and checking);
- `translog.heads`: signed tree heads and witness cosignatures (Ed25519);
- `translog.entries`: what the log records (queries, cohort tasks, privacy charges and refunds, budgets,
  releases) and the canonical bytes of each leaf.

docs/transparency.md describes the log, its routes and who must be trusted for what.
"""
