"""The analytics server: aiohttp analyst and device APIs, orchestration, SQLAlchemy storage."""
