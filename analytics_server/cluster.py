"""This server process's identity among the processes sharing one database (docs/scaling.md)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

from analytics_server.settings import Settings

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class ProcessIdentity:
    id: str
    """Random per start: a restarted process is a new process (its old leases lapse or were released)."""
    name: str
    url: str
    """Advertised base URL (`FA_ADVERTISE_URL`), shown in /v1/cluster."""
    assignment_url: str | None
    """What assignments name as `server_url`: the advertised URL on a shared database; None on SQLite (one
    process: devices keep the URL they checked in with)."""
    host: str
    pid: int
    single: bool
    """SQLite: the only process there can be, so at startup it takes over every lease at once."""


def identity_for(settings: Settings) -> ProcessIdentity:
    host = socket.gethostname()
    bind = settings.host if settings.host not in WILDCARD_HOSTS else host
    if ":" in bind and not bind.startswith("["):
        bind = f"[{bind}]"
    url = (settings.advertise_url or f"http://{bind}:{settings.port}").rstrip("/")
    single = settings.db_url.startswith("sqlite")
    return ProcessIdentity(
        id=secrets.token_hex(8),
        name=settings.process_name or f"{host}:{os.getpid()}",
        url=url,
        assignment_url=settings.advertise_url.rstrip("/") if settings.advertise_url else (None if single else url),
        host=host,
        pid=os.getpid(),
        single=single,
    )
