"""`fa` and the Python analyst client against the in-process server: the result alone on stdout (valid JSON), progress
on stderr, the readable status, lists and budgets, `init`, `validate` with and without a server preview, `--set`,
and rounding (the result tables: test_results.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics_server.state import STATE
from analyst_client import cli as analyst_cli
from analyst_client.client import AnalystClient
from analyst_client.view import format_result, round_to_noise, sparkline
from device_sdk.client import DeviceClient
from device_sdk.options import ClientOptions, NetworkOptions
from device_sdk.store import LocalStore
from queries import jsonc
from queries.templates import TEMPLATES
from tests.support.cli_help import options_without_help, parser_of

SPEC = {"kind": "histogram", "name": "cli words", "source": "words", "params": {"buckets": ["moon", "sun", "star"]},
        "cohort": {"min_clients": 4, "max_clients": 10, "phase_timeout_s": 5}}
WORDS = ["moon", "sun", "moon", "moon", "star", "sun"]


async def _fleet(url: str, http: aiohttp.ClientSession, stop: asyncio.Event) -> list[asyncio.Task[Any]]:
    devices = []
    for word in WORDS:
        store = LocalStore()
        store.add("words", word)
        devices.append(DeviceClient(url, store, ClientOptions(network=NetworkOptions(session=http, checkin_wait_s=1))))
    return [asyncio.create_task(d.run_forever(stop)) for d in devices]


def _fa(*args: str) -> int:
    return analyst_cli.main(list(args))


async def test_submit_wait_json_is_valid_json_on_stdout_and_progress_on_stderr(
    app_server: TestServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(app_server.make_url("")).rstrip("/")
    token = await app_server.app[STATE].store.tokens.create("analyst")
    spec_file = tmp_path / "spec.jsonc"
    spec_file.write_text("// words\n" + json.dumps(SPEC, indent=2).replace('"cli words",', '"cli words", /* a label */'))
    stop = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        fleet = await _fleet(url, http, stop)
        code = await asyncio.to_thread(_fa, "--server", url, "--token", token, "submit", str(spec_file), "--wait",
                                       "--format", "json")
        out, err = capsys.readouterr()
        assert code == 0, err
        view = json.loads(out)  # stdout holds the result and nothing else
        qid = view["id"]
        assert view["kind"] == "histogram" and view["result"]["counts"] == {"moon": 3, "sun": 2, "star": 1}
        assert f"submitted query {qid}" in err and f"query {qid}: succeeded" in err and "round 1 of ≤ 1" in err

        # the same query through the other commands
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "status", qid) == 0
        out, _ = capsys.readouterr()
        assert f"query      {qid}  'cli words'" in out and "status     succeeded after" in out
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "result", qid, "--plot") == 0
        out, _ = capsys.readouterr()
        assert "moon" in out and "█" in out and "privacy: none" in out
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "result", qid, "--format", "csv") == 0
        out, _ = capsys.readouterr()
        assert out.splitlines()[:2] == ["bucket,count,std,ci95_lo,ci95_hi,suppressed", "moon,3,,,,False"]
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "ls") == 0
        out, _ = capsys.readouterr()
        assert qid in out and "succeeded" in out
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "ls", "--status", "active", "--format", "json") == 0
        assert json.loads(capsys.readouterr().out) == []
        noisy = {**SPEC, "privacy": {"mechanism": "skellam", "epsilon": 0.5, "delta": 1e-6}, "cohort": {"min_clients": 100}}
        client = AnalystClient(url, token)
        other = await asyncio.to_thread(client.submit, noisy)
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "cancel", other["id"]) == 0
        assert capsys.readouterr().out.strip() == f"{other['id']} cancelled"
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "budget") == 0
        out, _ = capsys.readouterr()
        assert "words" in out and "default" in out
        assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "budget", "words") == 0
        out, _ = capsys.readouterr()
        assert other["id"] in out and "refunded" in out
        stop.set()
        await asyncio.gather(*fleet)


async def test_errors_go_to_stderr_with_exit_codes(app_server: TestServer, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = str(app_server.make_url("")).rstrip("/")
    token = await app_server.app[STATE].store.tokens.create("analyst")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**SPEC, "cohort": {"min_clients": 1}}))
    assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "submit", str(bad)) == 2
    out, err = capsys.readouterr()
    assert out == "" and "cohort.min_clients" in err
    params = tmp_path / "params.json"
    params.write_text(json.dumps({**SPEC, "params": {"buckets": []}}))
    assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "submit", str(params)) == 2
    assert "params.buckets" in capsys.readouterr().err
    assert await asyncio.to_thread(_fa, "--server", url, "--token", "fa_wrong", "ls") == 1
    out, err = capsys.readouterr()
    assert out == "" and "HTTP 401" in err
    assert await asyncio.to_thread(_fa, "--server", url, "--token", token, "status", "nope") == 1
    assert "unknown query id" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text('{"kind": "histogram",')
    assert await asyncio.to_thread(_fa, "--token", token, "submit", str(tmp_path / "broken.json")) == 2
    assert "not valid JSON" in capsys.readouterr().err


def _stub(answer: web.Response) -> web.Application:
    async def preview(request: web.Request) -> web.Response:
        return answer

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "queries_running": 0, "process": {"name": "stub"}})

    app = web.Application()
    if answer.status != 404:
        app.router.add_post("/v1/queries/preview", preview)
    app.router.add_get("/healthz", health)
    return app


PREVIEW = {"kind": "histogram", "source": "words", "privacy": {"epsilon": 1.0, "delta": 1e-6, "mechanism": "skellam"},
           "rounds": 1, "t_min": 100, "budget": {"source": "words", "remaining_epsilon": 0.5, "remaining_delta": 1e-5, "fits": False},
           "values": [{"path": "/counts/moon", "std": 6.46, "ci95_halfwidth": 12.7}],
           "warnings": [{"message": "source 'words' has ε=0.5 left"}]}


@pytest.mark.parametrize("answer, code, text", [
    (web.json_response(PREVIEW), 1, "does NOT fit"),
    (web.json_response({**PREVIEW, "budget": {**PREVIEW["budget"], "fits": True}}), 0, "/counts/moon"),
    (web.json_response({"error": "cohort.min_clients: below t_min", "detail": [{"field": "cohort.min_clients", "message": "x"}]},
                       status=422), 1, "HTTP 422: cohort.min_clients"),
    (web.json_response({"error": "no route"}, status=404), 3, "does not offer a preview"),
])
async def test_validate_prints_the_preview_or_says_why_not(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          answer: web.Response, code: int, text: str) -> None:
    server = TestServer(_stub(answer))
    await server.start_server()
    try:
        spec = tmp_path / "h.json"
        spec.write_text(TEMPLATES["histogram"].text())
        got = await asyncio.to_thread(_fa, "--server", str(server.make_url("")), "--token", "t", "validate", str(spec))
        out, err = capsys.readouterr()
        assert got == code, (out, err)
        assert text in out + err
        if code == 0:
            assert "charge     epsilon 1, delta 1.0e-06 (skellam)" in out and "fits" in out
        assert await asyncio.to_thread(_fa, "--server", str(server.make_url("")), "ping") == 0
        assert "ok: process stub" in capsys.readouterr().out
    finally:
        await server.close()


def test_init_writes_commented_specs_that_parse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kind in TEMPLATES:
        assert _fa("init", kind) == 0
        text = capsys.readouterr().out
        assert text.startswith("// ") and jsonc.loads(text) == TEMPLATES[kind].spec
        analyst_cli.check_spec(jsonc.loads(text))
    out = tmp_path / "f.json"
    assert _fa("init", "feature_stats", "-o", str(out)) == 0
    assert "fa validate" in capsys.readouterr().err
    assert _fa("init", "feature_stats", "-o", str(out)) == 2  # no overwrite without --force
    assert _fa("init", "nope") == 2
    assert "known kinds" in capsys.readouterr().err


def test_init_without_a_kind_lists_the_kinds_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    from queries.registry import KINDS

    assert _fa("init") == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [kind.name for kind in KINDS]
    histogram = next(line for line in lines if line.startswith("histogram "))
    assert "how many devices hold each value" in histogram and "histogram:" not in histogram
    assert "fa init KIND" in err


def test_validate_suggests_the_nearest_field_for_a_typo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "typo.json"
    spec.write_text(json.dumps({**SPEC, "privcy": {"mechanism": "none"}, "cohort": {"min_clientz": 4}}))
    assert _fa("--token", "t", "validate", str(spec)) == 2  # refused locally: nothing is sent
    out, err = capsys.readouterr()
    assert out == ""
    assert "privcy: Extra inputs are not permitted; did you mean 'privacy'?" in err
    assert "cohort.min_clientz: Extra inputs are not permitted; did you mean 'min_clients'?" in err
    spec.write_text(json.dumps({**SPEC, "params": {"bucket": ["a"], "zzzzzz": 1}}))
    assert _fa("--token", "t", "validate", str(spec)) == 2
    err = capsys.readouterr().err
    assert "params.bucket: Extra inputs are not permitted; did you mean 'buckets'?" in err
    assert "params.zzzzzz: Extra inputs are not permitted\n" in err + "\n"  # nothing close: no guess
    stats = {"kind": "feature_stats", "source": "f", "params": {"features": [{"name": "a", "lower": 0, "uper": 1}]}}
    with pytest.raises(analyst_cli.SpecError, match=r"params.features.0.uper: .*did you mean 'upper'\?"):
        analyst_cli.check_spec(stats)


def test_every_wait_is_bounded_by_wait_timeout_and_old_spellings_are_hidden_aliases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = analyst_cli.build_parser()
    assert parser.parse_args(["submit", "s.json", "--wait", "--wait-timeout", "7"]).wait_timeout == 7
    assert parser.parse_args(["wait", "q1", "--wait-timeout", "8"]).wait_timeout == 8
    assert parser.parse_args(["wait", "q1", "--timeout-s", "9"]).wait_timeout == 9
    assert parser.parse_args(["wait", "q1"]).wait_timeout == 3600
    assert parser.parse_args(["ping", "--wait-timeout", "2"]).wait_timeout == 2
    assert parser.parse_args(["ping", "--wait", "3"]).wait_timeout == 3
    assert parser.parse_args(["ping"]).wait_timeout == 0
    for cmd, old in (("submit", None), ("wait", "--timeout-s"), ("ping", "--wait ")):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--help"])
        text = capsys.readouterr().out
        assert "--wait-timeout SECONDS" in text
        assert old is None or old not in text


def test_every_fa_option_has_help(monkeypatch: pytest.MonkeyPatch) -> None:
    parser = parser_of(analyst_cli.main, ["ls"], monkeypatch)
    assert not options_without_help(parser, "fa")


def test_set_overrides_fields_from_values_and_files(tmp_path: Path) -> None:
    (tmp_path / "stats.json").write_text(json.dumps({"kind": "feature_stats", "result": {"features": {"a": {"mean": 1}}}}))
    spec: dict[str, Any] = {"kind": "training", "cohort": {"min_clients": 10}}
    analyst_cli.apply_set(spec, "cohort.min_clients=45")
    analyst_cli.apply_set(spec, "name=plain text")
    analyst_cli.apply_set(spec, f"params.scaling=@{tmp_path / 'stats.json'}#/result")
    analyst_cli.apply_set(spec, 'privacy={"mechanism": "none"}')
    assert spec == {"kind": "training", "cohort": {"min_clients": 45}, "name": "plain text",
                    "params": {"scaling": {"features": {"a": {"mean": 1}}}}, "privacy": {"mechanism": "none"}}
    for bad in ("novalue", f"x=@{tmp_path / 'missing.json'}", f"x=@{tmp_path / 'stats.json'}#/nothing", "kind.sub=1"):
        with pytest.raises(analyst_cli.SpecError):
            analyst_cli.apply_set(dict(spec), bad)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.sampled_from(["a", "/", "*", '"', "\\", " ", "\n", "//", "/*", "*/"]), max_size=8).map("".join),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_jsonc_leaves_json_alone_and_drops_comments(value: Any) -> None:
    text = json.dumps(value, indent=1)
    assert jsonc.strip_comments(text) == text
    commented = "/* head */\n" + text.replace("\n", " // note\n", 1) + "\n// tail"
    assert jsonc.loads(commented) == value


def test_rounding_to_noise_and_sparklines() -> None:
    assert round_to_noise(59.13, 12.67) == ("59", "13")
    assert round_to_noise(0.31234, 0.0412) == ("0.312", "0.041")
    assert round_to_noise(1234567.0, 45678.0) == ("1,235,000", "46,000")
    assert round_to_noise(22.5523, None) == ("22.55", None)
    assert sparkline([1, 2, 3, None, 8]) == "▁▂▃ █"


