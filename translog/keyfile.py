"""Key files of the log and of witnesses: an Ed25519 seed in a seed file of `fa_common.keyfile` (32 bytes in base64
on one line, mode 0600). (The one module of `translog` that touches the file system.)"""

from __future__ import annotations

import os

from fa_common.keyfile import KeyFileError, read_seed, write_seed
from translog.heads import Signer


def new_key_file(path: str | os.PathLike[str]) -> Signer:
    """Write a fresh seed (os.urandom) to a new file of mode 0600; refuses to overwrite one."""
    seed = os.urandom(32)
    write_seed(path, seed)
    return Signer(seed)


# read_seed and KeyFileError are fa_common.keyfile's, named here for the log's key-file users
__all__ = ["KeyFileError", "new_key_file", "read_seed"]
