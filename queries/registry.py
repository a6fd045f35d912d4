"""One line per query kind: importing this module registers every kind the service offers."""
