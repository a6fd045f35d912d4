"""What the server, the identity issuer, the device SDK and the analyst client share: small helpers each of them
would otherwise write again.

- `fa_common.errors`: the typed errors a service's core raises for a request it refuses (the HTTP edge maps them);
- `fa_common.http_errors`: `HttpError`, an answer other than 200 at an HTTP edge, and the one mapping of the typed
  errors to status codes;
- `fa_common.ratelimit`: per-client-address token buckets;
- `fa_common.keyfile`: key files readable by their owner only (mode 0600, never overwritten);
- `fa_common.b64`: strict standard and URL-safe base64;
- `fa_common.canonical`: RFC 8785 canonical JSON;
- `fa_common.clock`: the injectable clock.

A leaf package: it imports no other package of the project, and nothing beyond the standard library and the base
dependencies (`rfc8785`), so a device install carries it at no cost (tests/test_import_set.py); aiohttp, SQLAlchemy
and the like stay in the services that use them.
"""
