"""The argparse parser a console script's `main` builds, and the options in it (and its subcommands) without help:
for the tests that keep every `fa`, `fa-sim` and `fa-server` option documented in `--help`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

import pytest


def parser_of(main: Callable[[list[str]], Any], argv: list[str], monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser `main(argv)` parses its arguments with (caught at `parse_args`, before anything runs)."""
    seen: list[argparse.ArgumentParser] = []

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> NoReturn:
        seen.append(self)
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(SystemExit):
        main(argv)
    monkeypatch.undo()
    assert seen, "main did not parse its arguments"
    return seen[0]


def options_without_help(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """Every option and positional of `parser` and its subparsers (`path COMMAND`) whose help is empty; hidden
    aliases (help=argparse.SUPPRESS) count as documented."""
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                missing += options_without_help(child, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not (action.help or "").strip():
            missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
    return missing
