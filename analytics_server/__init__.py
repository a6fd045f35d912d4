"""The aiohttp analytics server: analyst API, device API, orchestration of rounds and cohorts, storage.

Entry point: `fa-server` (analytics_server.cli). See docs/server.md and docs/protocol.md.
"""
