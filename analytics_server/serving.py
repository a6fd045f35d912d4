"""How `fa-server serve` runs the app on the open internet: the open-file limit, connection timeouts, logs that
cannot flood, and garbage collection tuned for a server's heap.

- The open-file soft limit is raised to the hard limit at startup (each connection holds a descriptor;
  the common default of 1,024 is exhausted by a thousand idle connections).
- `FA_IDLE_TIMEOUT_S` is aiohttp's keep-alive timeout. aiohttp (3.14) arms it when a connection is made
  and again after every answer, and closes the connection if the next request head has not arrived
  completely by then — also while bytes are still trickling in — so it is the header-read timeout as well
  (slow-loris and half-open connections). Bodies have their own deadline (`FA_BODY_READ_TIMEOUT_S`,
  `http.common.read_body`).
- Event-loop errors (e.g. `socket.accept() out of system resource`, which asyncio reports on every accept
  attempt while descriptors are exhausted) and WARNING-or-worse log records are rate-limited per message:
  a few per interval, then one line saying how many were suppressed.
- The event loop is uvloop's where installed unless `FA_EVENT_LOOP=asyncio` (`new_event_loop`). When descriptors
  run out, libuv accepts each pending connection on a reserved descriptor and closes it at once, silently.
- Once startup is complete (the accountant's imports included) the heap is frozen out of garbage collection
  (`gc.freeze`) and young collections run every GC_GEN0_THRESHOLD allocations: collections then traverse only
  what serving allocates, not the ~180,000 objects of the loaded libraries, and do so rarely.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import importlib
import logging
import resource
import socket
import time
from collections import Counter
from typing import Any

from aiohttp import web

from analytics_server.settings import Settings

log = logging.getLogger(__name__)
LOG_INTERVAL_S = 10.0
LOG_BURST = 5
"""At most this many records of one message per interval (WARNING and above)."""
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
NOFILE_CAP = 1 << 20
"""Soft limit used when the hard limit is unlimited."""


GC_GEN0_THRESHOLD = 100_000
"""Allocations between young-generation collections (CPython's default is 700): a round allocates millions of
short-lived objects (parsed messages, requests); collecting every 700 allocations cost ~10 % of a masked round's
server CPU."""


def freeze_startup_heap() -> None:
    """Move everything allocated so far (modules, the app, the accountant's imports) to the permanent
    generation, so full collections traverse only what serving allocates; called once startup is complete."""
    gc.collect()
    gc.freeze()
    _, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)
    log.info("startup heap frozen: %d objects outside garbage collection", gc.get_freeze_count())


def new_event_loop(kind: str = "uvloop") -> asyncio.AbstractEventLoop:
    """uvloop's event loop (libuv) where it is installed (the `server` extra, not on Windows) and `kind` is
    "uvloop", else asyncio's: a request that arrives alone, as a device's does, costs the process ~25 % less CPU
    in the loop's own polling and scheduling (measured on bare aiohttp: ~160 µs instead of ~210 µs)."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            log.info("uvloop is not installed; using asyncio's event loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


async def _freeze_once_loaded(app: web.Application) -> None:
    """After the app's own startup: freeze the heap once the accountant, which startup loads in the executor, is
    imported (importing it again there waits for that load, then returns at once)."""
    from analytics_server.app import ACCOUNTANT_MODULE
    from analytics_server.state import STATE

    loading = app[STATE].executor.submit(importlib.import_module, ACCOUNTANT_MODULE)
    loading.add_done_callback(lambda _done: freeze_startup_heap())


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns (before, after) and logs the change."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CAP if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
        log.info("open-file limit raised from %d to %d", soft, target)
        return soft, target
    log.info("open-file limit is %s", "unlimited" if soft == resource.RLIM_INFINITY else soft)
    return soft, soft


class _Window:
    """Per-key counter: allows `burst` events per `interval`, counts the rest."""

    def __init__(self, interval: float, burst: int) -> None:
        self.interval, self.burst = interval, burst
        self._start: dict[Any, float] = {}
        self._seen: Counter[Any] = Counter()

    def admit(self, key: Any, now: float) -> tuple[bool, int]:
        """(log this one?, how many were suppressed in the window that just ended)."""
        start = self._start.get(key)
        suppressed = 0
        if start is None or now - start >= self.interval:
            if start is not None:
                suppressed = max(0, self._seen[key] - self.burst)
            if len(self._start) > 10_000:  # bounded: forget every key at once
                self._start.clear()
                self._seen.clear()
            self._start[key], self._seen[key] = now, 0
        self._seen[key] += 1
        return self._seen[key] <= self.burst, suppressed


class RateLimitFilter(logging.Filter):
    """Drops WARNING-or-worse records beyond LOG_BURST per (logger, message) and interval."""

    def __init__(self, interval: float = LOG_INTERVAL_S, burst: int = LOG_BURST) -> None:
        super().__init__()
        self._window = _Window(interval, burst)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        ok, suppressed = self._window.admit((record.name, record.msg), time.monotonic())
        if ok and suppressed:
            record.msg = f"{record.msg} [{suppressed} similar messages suppressed in the last {self._window.interval:g} s]"
        return ok


class LoopErrorHandler:
    """Event-loop exception handler: resource exhaustion is one warning line without a traceback, and
    every kind of loop error is rate-limited."""

    def __init__(self, interval: float = LOG_INTERVAL_S, burst: int = LOG_BURST) -> None:
        self._window = _Window(interval, burst)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        ok, suppressed = self._window.admit((message, type(exc).__name__), time.monotonic())
        if not ok:
            return
        note = f" [{suppressed} similar suppressed in the last {self._window.interval:g} s]" if suppressed else ""
        if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS:
            log.warning("%s: %s%s", message, exc.strerror or exc, note)
        elif "_start_serving" in repr(context.get("handle")):
            # asyncio schedules one accept retry per failed accept() (up to the backlog per wake-up); those
            # still pending when the listener closes fail on its closed descriptor: harmless
            log.warning("accept retry after descriptor exhaustion failed: %s%s", exc, note)
        elif isinstance(exc, (ConnectionError, TimeoutError)):
            log.info("%s: %s%s", message, exc, note)
        else:
            loop.default_exception_handler({**context, "message": message + note})


class BadRequestLogFilter(logging.Filter):
    """On aiohttp's `aiohttp.server` logger: a malformed request (a NUL or other invalid byte in a header, a bad
    request line: aiohttp's HttpProcessingError, answered 400 and closed by aiohttp) is one WARNING line naming
    the error, not an ERROR with a traceback. Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            reason = str(exc.message).splitlines()[0] if exc.message else type(exc).__name__
            remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg, record.args = "bad request from %s: %s (%s)", (remote, reason, type(exc).__name__)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def quiet_bad_requests() -> None:
    """Install BadRequestLogFilter on aiohttp's server logger (once)."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, BadRequestLogFilter) for f in server_log.filters):
        server_log.addFilter(BadRequestLogFilter())


def install_log_limits() -> None:
    """Attach the rate-limit filter to every handler of the root logger (call after logging is set up)."""
    flt = RateLimitFilter()
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A bound, listening TCP socket; with `reuse_port` (SO_REUSEPORT) several processes share the port and
    the kernel spreads connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def run(settings: Settings, shared_port: bool = False, private_port: int | None = None) -> None:
    """Serve until SIGINT/SIGTERM. A worker of `fa-server serve --workers N` listens on the shared port
    (`shared_port`: SO_REUSEPORT) and on its own `private_port`, which it advertises to devices."""
    from analytics_server.app import create_app
    from secagg.plain import bench_unmasked

    raise_open_file_limit()
    install_log_limits()
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    quiet_bad_requests()
    loop = new_event_loop(settings.event_loop)
    log.info("event loop: %s", type(loop).__module__.split(".")[0])
    loop.set_exception_handler(LoopErrorHandler())
    socks = [listening_socket(settings.host, settings.port, reuse_port=shared_port)]
    if private_port is not None:
        socks.append(listening_socket(settings.host, private_port))
    app = create_app(settings, unmasked=bench_unmasked())  # make bench's switch of this process, never a query's
    app.on_startup.append(_freeze_once_loaded)
    web.run_app(
        app, sock=socks, shutdown_timeout=3.0,
        keepalive_timeout=settings.idle_timeout_s, loop=loop, print=lambda m: print(m, flush=True),
    )
