"""Key files: created with mode 0600 whatever the umask, never overwritten; seed files read back strictly."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fa_common.keyfile import KeyFileError, read_seed, write_private, write_seed


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)  # a umask that would leave a plain file world-readable
    yield
    os.umask(old)


def test_a_private_file_is_owner_only_and_never_overwritten(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "k.pem"
    write_private(path, b"secret")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_bytes() == b"secret"
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_private(path, b"other")
    assert path.read_bytes() == b"secret"
    with pytest.raises(KeyFileError, match="cannot create"):
        write_private(tmp_path / "missing-dir" / "k", b"x")


def test_a_seed_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "seed.key"
    write_seed(path, bytes(range(32)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_seed(path) == bytes(range(32))


@pytest.mark.parametrize("text, message", [("%%%", "not valid base64"), ("AAAA", "expected 32 bytes, got 3")])
def test_a_bad_seed_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.key"
    path.write_text(text + "\n")
    with pytest.raises(KeyFileError, match=message) as info:
        read_seed(path)
    assert str(path) in str(info.value)
    with pytest.raises(KeyFileError, match="cannot read"):
        read_seed(tmp_path / "none.key")
