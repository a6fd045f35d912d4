"""Key files: created exclusively with mode 0600 (readable by their owner only), never overwritten.

`write_private` writes any secret (the issuer's PEM key); `write_seed` and `read_seed` are the one format of the
Ed25519 seeds — the log's and a witness's signing keys, an app backend's credential key: 32 bytes in base64 on one
line.
"""

from __future__ import annotations

import os
from pathlib import Path

from fa_common.b64 import b64d, b64e

SEED_BYTES = 32


class KeyFileError(ValueError):
    """A key file that cannot be written or read; the message names the file and why."""


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Create `path`, which must not exist, with mode 0600 (whatever the umask) and write `data` to it."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(f"key file {p} exists; refusing to overwrite a key (move it away first)") from None
    except OSError as exc:
        raise KeyFileError(f"cannot create key file {p}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(data)


def write_seed(path: str | os.PathLike[str], seed: bytes) -> None:
    """A new seed file: the seed in base64 on one line, mode 0600."""
    write_private(path, (b64e(seed) + "\n").encode("ascii"))


def read_seed(path: str | os.PathLike[str], length: int = SEED_BYTES) -> bytes:
    """The seed in a file `write_seed` wrote; KeyFileError naming the file when it is unreadable or not `length`
    bytes of base64."""
    try:
        text = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"key file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        return b64d(text, f"key file {path}", length)
    except ValueError as exc:
        raise KeyFileError(str(exc)) from None


__all__ = ["SEED_BYTES", "KeyFileError", "read_seed", "write_private", "write_seed"]
