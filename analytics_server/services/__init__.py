"""The server's service layer: each function is one unit of work over the `Store`'s repositories, applying the
pure rules (`queries.dp.limits`, `queries.dp.ledger.Budget.check`, `analytics_server.blame`) and appending the
transparency log's entries in the same transaction as the rows they describe."""
