"""`fa-sim`'s command line: every option documented in --help."""

from __future__ import annotations

import pytest

from fleet_sim import cli
from tests.support.cli_help import options_without_help, parser_of


def test_every_fa_sim_option_has_help(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of(cli.main, [], monkeypatch)
    assert not options_without_help(parser, "fa-sim")
