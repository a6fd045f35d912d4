"""Alembic migrations of the analytics server schema (`fa-server migrate`)."""
