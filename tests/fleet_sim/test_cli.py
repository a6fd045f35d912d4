"""`fa-sim`'s command line: every option documented in --help, and one clear line with exit code 2 — no
traceback, no endless retries — when no server answers at start."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet_sim import cli
from tests.support.cli_help import options_without_help, parser_of


def test_every_fa_sim_option_has_help(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of(cli.main, [], monkeypatch)
    assert not options_without_help(parser, "fa-sim")
    assert "--connect-timeout" in parser.format_help() and "exit codes" in parser.format_help()


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.timeout(60)
def test_an_unreachable_server_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    code = cli.main(["--server", url, "--devices", "1", "--connect-timeout", "1.5"])
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    assert code == cli.EXIT_UNREACHABLE == 2
    assert out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fa-sim: cannot reach the server at {url} after 1.5 s"), err
    assert 1.5 <= elapsed < 30, elapsed  # it retried for --connect-timeout, then gave up


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(503 if self.path == "/healthz" else 404)  # up, if unwell: reachable all the same
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(60)
def test_one_answering_url_of_several_is_enough(answering_url: str) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"
    assert cli.unreachable([dead, answering_url], 5.0) is None
    why = cli.unreachable([dead], 0.0)
    assert why is not None and why.startswith(dead)
    with socket.socket() as busy:  # accepts connections but never answers: a busy server, not a missing one
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        assert cli.unreachable([f"http://127.0.0.1:{busy.getsockname()[1]}"], 1.0) is None
