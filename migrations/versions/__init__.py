"""Alembic revision scripts, applied in order."""
