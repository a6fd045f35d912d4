"""The issuer's smaller parts: settings, key files, the CLI's commands (in process), and the product boundary
(fa_issuer imports neither the server nor the device SDK). Its address limiter is fa_common's (tests/fa_common)."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from nacl.signing import SigningKey

from fa_issuer import cli, keys
from fa_issuer.attesters import AppBackendAttester
from fa_issuer.settings import IssuerSettings, SettingsError, parse_app_key
from tests.support.cli_help import options_without_help, parser_of

ROOT = Path(__file__).resolve().parents[2]


def test_app_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = base64.b64encode(bytes(32)).decode(), base64.b64encode(b"\x01" * 32).decode()
    monkeypatch.setenv("FA_ISSUER_APP_KEYS", f"notes={a}, calendar={b}")
    monkeypatch.setenv("FA_ISSUER_TOKENS_PER_DAY", "3")
    s = IssuerSettings()
    assert s.app_public_keys() == {"notes": bytes(32), "calendar": b"\x01" * 32}
    assert s.tokens_per_day == 3


@pytest.mark.parametrize("entry, message", [
    ("notes", "expected NAME=BASE64_PUBLIC_KEY"),
    ("=AAAA", "expected NAME=BASE64_PUBLIC_KEY"),
    ("notes=%%%", "not valid base64"),
    ("notes=" + base64.b64encode(bytes(31)).decode(), "32 bytes, got 31"),
])
def test_bad_app_keys(entry: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse_app_key(entry)


def test_keygen_writes_a_private_file_and_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "k.pem"
    assert cli.main(["keygen", "--key", str(path)]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    key = keys.load(path)
    assert base64.b64encode(key.token_key_id).decode() in capsys.readouterr().out
    assert cli.main(["public-key", "--key", str(path)]) == 0
    assert base64.b64decode(capsys.readouterr().out.strip()) == key.public_der
    before = path.read_bytes()
    assert cli.main(["keygen", "--key", str(path)]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert path.read_bytes() == before
    os.chmod(path, 0o644)
    with pytest.raises(keys.KeyFileError, match="accessible to other users"):
        keys.load(path)
    with pytest.raises(keys.KeyFileError, match="cannot read"):
        keys.load(tmp_path / "missing.pem")


def test_app_key_and_credential_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key_file = tmp_path / "app.key"
    assert cli.main(["app-key", "--out", str(key_file)]) == 0
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    public = base64.b64decode(capsys.readouterr().out.split("public_key ")[1].strip())
    assert cli.main(["credential", "--app-key", str(key_file), "--app", "notes", "--install", "i-1"]) == 0
    cred = capsys.readouterr().out.strip()
    admission = AppBackendAttester({"notes": public}).admit(cred, now=0)
    assert (admission.app, admission.install) == ("notes", "i-1")
    assert cli.main(["public-key", "--app-key", str(key_file)]) == 0
    assert base64.b64decode(capsys.readouterr().out.strip()) == public
    assert cli.main(["app-key"]) == 0
    printed = capsys.readouterr().out
    seed = base64.b64decode(printed.split("private_key ")[1].split()[0])
    assert base64.b64encode(bytes(SigningKey(seed).verify_key)).decode() in printed


def test_serve_refuses_bad_configuration_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "k.pem"
    assert cli.main(["keygen", "--key", str(key)]) == 0
    capsys.readouterr()
    assert cli.main(["serve", "--key", str(key), "--db", str(tmp_path / "i.db")]) == 2
    assert "no app backend keys" in capsys.readouterr().err
    assert cli.main(["serve", "--key", str(key), "--app", "notes=xx"]) == 2
    assert "invalid setting" in capsys.readouterr().err
    assert cli.main(["serve", "--key", str(tmp_path / "none.pem"), "--app", "a=" + "A" * 43 + "="]) == 2
    assert "fa-issuer keygen" in capsys.readouterr().err
    assert cli.main(["serve", "--key", str(key), "--tokens-per-day", "0", "--app", "a=" + "A" * 43 + "="]) == 2
    assert "tokens_per_day" in capsys.readouterr().err


def test_the_console_script_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["fa-issuer"] == "fa_issuer.cli:main"


def test_fa_issuer_imports_neither_the_server_nor_the_device_sdk() -> None:
    code = ("import sys, fa_issuer.cli, fa_issuer.app; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('analytics_server', 'device_sdk', "
            "'analyst_client', 'fleet_sim', 'sqlalchemy')); print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_fa_issuer_option_has_help(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of(cli.main, [], monkeypatch)
    assert not options_without_help(parser, "fa-issuer")
    assert "exit codes" in parser.format_help()
