"""Key files of the log and of witnesses: an Ed25519 seed, 32 bytes in base64 on one line, readable by its owner
only. (The one module of `translog` that touches the file system.)"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from translog.heads import Signer


class KeyFileError(ValueError):
    """A key file that cannot be read or written; the message names the file."""


def read_seed(path: str | os.PathLike[str]) -> bytes:
    try:
        text = Path(path).read_text(encoding="ascii").strip()
        seed = base64.b64decode(text, validate=True)
    except (OSError, ValueError, UnicodeDecodeError, binascii.Error) as exc:
        raise KeyFileError(f"key file {path}: cannot read a base64 key ({exc})") from None
    if len(seed) != 32:
        raise KeyFileError(f"key file {path}: holds {len(seed)} bytes, an Ed25519 seed is 32")
    return seed


def new_key_file(path: str | os.PathLike[str]) -> Signer:
    """Write a fresh seed (os.urandom) to a new file of mode 0600; refuses to overwrite one."""
    p = Path(path)
    seed = os.urandom(32)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise KeyFileError(f"key file {p} exists; not overwriting a key") from None
    except OSError as exc:
        raise KeyFileError(f"key file {p}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(base64.b64encode(seed).decode("ascii") + "\n")
    return Signer(seed)


__all__ = ["KeyFileError", "new_key_file", "read_seed"]
