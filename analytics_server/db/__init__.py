"""Storage: SQLAlchemy 2 async models, engine setup and the migration check."""
