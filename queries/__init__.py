"""Per-query math shared by the server and the device SDK: query kinds, envelopes, DP noise and accounting.

Nothing here does I/O; the server and the SDK import this package, never each other.
"""
