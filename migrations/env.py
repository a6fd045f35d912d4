"""Alembic environment: runs migrations over the async engine (aiosqlite or asyncpg).

The URL comes from the Alembic config (`sqlalchemy.url`), set by `analytics_server.db.engine.migrate`.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from analytics_server.db.models import Base

config = context.config
target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


async def _online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None  # set by analytics_server.db.engine.migrate
    engine = create_async_engine(url)
    async with engine.connect() as conn:
        await conn.run_sync(_run)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_online())
