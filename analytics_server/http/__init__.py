"""HTTP layer: analyst routes, device routes, shared request parsing and error rendering."""
