"""Text views of the analyst API for `fa`: results per kind (numbers rounded to what their noise allows, with
95 % intervals), terminal bars and sparklines (`--plot`), a readable status, query lists, budgets and the
utility preview. Tables are drawn with rich; every function returns the text, the CLI decides where it goes.

Rounding rule (the console's js/format.js does the same): a value with a known 95 % half-width h is shown
to the decimal of h's second significant digit ("59 ± 13", "0.312 ± 0.041"); without one, to 4 significant
digits.
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from typing import Any

from analyst_client.client import Uncertainty, pointer, rows, uncertainty_of

PHASES = ("advertise_keys", "share_keys", "masked_input", "consistency_check", "unmasking")
SPARKS = "▁▂▃▄▅▆▇█"
BLOCKS = " ▏▎▍▌▋▊▉█"


# -- numbers ------------------------------------------------------------------------------------------


def noise_step(half: float | None) -> float | None:
    if half is None or not math.isfinite(half) or half <= 0:
        return None
    return 10.0 ** (math.floor(math.log10(half)) - 1)


def _fixed(value: float, step: float) -> str:
    if step >= 1:
        return f"{round(value / step) * step:,.0f}"
    decimals = min(12, max(0, -math.floor(math.log10(step) + 1e-9)))
    return f"{round(value / step) * step:,.{decimals}f}"


def num(x: Any, digits: int = 4) -> str:
    """A number for people: integers with separators, others to `digits` significant digits."""
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or (math.isfinite(x) and float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    if not math.isfinite(x):
        return str(x)
    a = abs(x)
    if a != 0 and (a < 1e-3 or a >= 1e7):
        return f"{x:.{digits - 1}e}"
    decimals = max(0, digits - 1 - math.floor(math.log10(a))) if a else 0
    text = f"{x:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def round_to_noise(value: float | None, half: float | None) -> tuple[str, str | None]:
    """(value, half-width) as text, rounded to the noise; without a half-width, 4 significant digits."""
    if value is None or not isinstance(value, (int, float)) or not math.isfinite(value):
        return num(value), None
    step = noise_step(half)
    if step is None:
        return num(value), None
    assert half is not None
    return _fixed(value, step), _fixed(half, step)


def with_interval(value: float | None, u: Uncertainty | None) -> str:
    text, half = round_to_noise(value, u.half if u else None)
    return text if half is None else f"{text} ± {half}"


def interval(u: Uncertainty | None) -> str:
    if u is None:
        return "–"
    lo, _ = round_to_noise(u.lo, u.half)
    hi, _ = round_to_noise(u.hi, u.half)
    return f"[{lo}, {hi}]"


def eps(x: float | None) -> str:
    return "–" if x is None else (f"{x:.3g}" if x >= 0.01 or x == 0 else f"{x:.2e}")


def delta(x: float | None) -> str:
    return "–" if x is None else ("0" if x == 0 else f"{x:.1e}")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 90:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


# -- drawing ------------------------------------------------------------------------------------------


def bar(value: float, top: float, width: int = 30) -> str:
    """A horizontal bar of `width` cells for value/top (eighth-cell resolution)."""
    if top <= 0 or value <= 0 or not math.isfinite(value):
        return ""
    eighths = round(min(1.0, value / top) * width * 8)
    return "█" * (eighths // 8) + (BLOCKS[eighths % 8] if eighths % 8 else "")


def sparkline(values: list[float | None]) -> str:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return ""
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    return "".join(" " if not (isinstance(v, (int, float)) and math.isfinite(v))
                   else SPARKS[min(7, int((v - lo) / span * 7.999))] for v in values)


def _table(title: str | None, columns: list[tuple[str, str]], data: list[list[str]], caption: str | None = None,
           width: int = 120) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in data:
        table.add_row(*row)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None, highlight=False)
    # whole ids, numbers and names: a table wider than `width` rather than cropped cells
    need = console.measure(table, options=console.options.update_width(10_000)).maximum
    if need > width:
        console = Console(file=buf, width=need, force_terminal=False, color_system=None, highlight=False)
    console.print(table)
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


# -- results ------------------------------------------------------------------------------------------


def format_result(view: dict[str, Any], fmt: str = "table", spec: dict[str, Any] | None = None, plot: bool = False,
                  width: int = 120) -> str:
    """A result view as `json` (the API's answer), `csv` (the rows of `analyst_client.client.rows`) or `table`
    (per kind, with the privacy block in words; `plot` adds terminal bars and sparklines)."""
    if fmt == "json":
        return json.dumps(view, indent=2, sort_keys=True)
    if fmt == "csv":
        columns, data = rows(view, spec)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(data)
        return buf.getvalue()
    kind = view.get("kind")
    body = {"histogram": _histogram, "heavy_hitters": _heavy_hitters, "feature_stats": _feature_stats,
            "training": _training}.get(str(kind), _generic)(view, spec, plot, width)
    warnings = [f"warning: {w.get('path') or ''} {w.get('message')}".replace("  ", " ") for w in view.get("warnings") or []]
    return "\n".join([f"{kind} result (query {view.get('id', '?')})", body, *warnings, "", privacy_words(view)])


def _histogram(view: dict[str, Any], spec: dict[str, Any] | None, plot: bool, width: int) -> str:
    res = view["result"]
    _, data = rows(view, spec)
    top = max([(r["ci95_hi"] or r["count"] or 0) for r in data] + [1])
    lines = []
    for r in data:
        u = uncertainty_of(view, pointer("counts", r["bucket"]), r["count"])
        cells = [r["bucket"], "–" if r["suppressed"] else with_interval(r["count"], u),
                 "–" if r["suppressed"] else interval(u), "suppressed" if r["suppressed"] else ""]
        if plot:
            cells.append("(below threshold)" if r["suppressed"] else bar(r["count"] or 0, top, 30))
        lines.append(cells)
    cols = [("bucket", "left"), ("count", "right"), ("95 % interval", "right"), ("", "left")] + ([("", "left")] if plot else [])
    caption = f"{num(res.get('clients'))} contributors"
    if res.get("threshold") is not None:
        caption += f"; counts below the release threshold {num(res['threshold'])} are suppressed"
    return _table(None, cols, lines, caption, width)


def _heavy_hitters(view: dict[str, Any], spec: dict[str, Any] | None, plot: bool, width: int) -> str:
    res = view["result"]
    _, data = rows(view, spec)
    if not data:
        return f"no string reached the release threshold ({res.get('rounds')} rounds)"
    top = max([(r["ci95_hi"] or r["count"] or 0) for r in data] + [1])
    index = {hh["value"]: i for i, hh in enumerate(res.get("heavy_hitters") or [])}
    lines = []
    for rank, r in enumerate(data, 1):
        u = uncertainty_of(view, pointer("heavy_hitters", index[r["value"]], "count"), r["count"])
        cells = [str(rank), str(r["value"]), with_interval(r["count"], u), interval(u)]
        if plot:
            cells.append(bar(r["count"] or 0, top, 30))
        lines.append(cells)
    cols = [("rank", "right"), ("value", "left"), ("count", "right"), ("95 % interval", "right")] + ([("", "left")] if plot else [])
    caption = f"{res.get('rounds')} rounds, mode {res.get('mode')}; the trie of prefixes: --format json"
    return _table(None, cols, lines, caption, width)


def _feature_stats(view: dict[str, Any], spec: dict[str, Any] | None, plot: bool, width: int) -> str:
    res = view["result"]
    lines = []
    for name, f in (res.get("features") or {}).items():
        def u(key: str) -> Uncertainty | None:
            return uncertainty_of(view, pointer("features", name, key), f.get(key))
        lines.append([name, with_interval(f.get("count"), u("count")), with_interval(f.get("mean"), u("mean")),
                      interval(u("mean")), with_interval(f.get("std"), u("std")), f"[{num(f.get('lower'))}, {num(f.get('upper'))}]"])
    out = [_table(None, [("feature", "left"), ("count", "right"), ("mean", "right"), ("mean 95 %", "right"),
                         ("std", "right"), ("bounds", "right")], lines,
                  f"{num(res.get('clients'))} contributors; the scaler (sklearn StandardScaler attributes): --format json", width)]
    if plot:
        for name, f in (res.get("features") or {}).items():
            hist = f.get("histogram") or {}
            edges, counts = hist.get("edges") or [], hist.get("counts") or []
            if not counts:
                continue
            top = max([max(0.0, c) for c in counts] + [1.0])
            out.append(f"\n{name}  (mean {with_interval(f.get('mean'), uncertainty_of(view, pointer('features', name, 'mean'), f.get('mean')))})")
            for i, c in enumerate(counts):
                out.append(f"  [{num(edges[i]):>9}, {num(edges[i + 1]):>9})  {bar(max(0.0, c), top, 30):<30}  {num(c)}")
    return "\n".join(out)


def _training(view: dict[str, Any], spec: dict[str, Any] | None, plot: bool, width: int) -> str:
    res = view["result"]
    columns, data = rows(view, spec)
    metrics = [c for c in columns if c not in ("round", "clients") and not c.endswith(("_ci95_lo", "_ci95_hi"))]
    lines = []
    for i, r in enumerate(data):
        cells = [str(r["round"])]
        for k in metrics:
            v = r.get(k)
            cells.append(with_interval(v, uncertainty_of(view, pointer("history", i, k), v)) if isinstance(v, (int, float)) else "–")
        cells.append(num(r.get("clients")))
        lines.append(cells)
    model = res.get("model") or {}
    head = (f"model {model.get('name')} · {num(res.get('rounds'))} updates in {num(res.get('server_rounds'))} server rounds · "
            f"stopped: {res.get('stop_reason')} · best evaluated round {res.get('best_round')} · "
            f"{len(res.get('weights') or [])} weights (--format json)")
    out = [head, _table("history, one row per evaluation round", [("round", "right")] + [(k, "right") for k in metrics]
                        + [("clients", "right")], lines, None, width)]
    if plot and data:
        for k in metrics:
            values = [r.get(k) for r in data]
            finite = [v for v in values if isinstance(v, (int, float))]
            if finite:
                out.append(f"{k:>14}  {sparkline(values)}  {num(finite[0])} → {num(finite[-1])}")
    return "\n".join(out)


def _generic(view: dict[str, Any], spec: dict[str, Any] | None, plot: bool, width: int) -> str:
    _, data = rows(view, spec)
    return _table(None, [("key", "left"), ("value", "right")], [[str(r["key"]), num(r["value"])] for r in data], None, width)


def privacy_words(view: dict[str, Any]) -> str:
    """The privacy block in a few sentences."""
    p = view.get("privacy") or {}
    contributors = p.get("contributors") or []
    t_min = p.get("t_min", p.get("min_clients"))
    if p.get("mechanism") in (None, "none"):
        words = [f"privacy: none — exact sums over at least {t_min} devices (secure aggregation hides each input, "
                 "not the totals); no epsilon bounds what they reveal."]
    else:
        words = [f"privacy: {p['mechanism']} noise added on the devices; every sum covered at least t_min = {t_min} "
                 f"devices; spent epsilon = {eps(p.get('epsilon_spent', p.get('epsilon')))} of {eps(p.get('epsilon'))}, "
                 f"delta = {delta(p.get('delta'))}."]
    if contributors:
        words.append(f"contributors per round: {', '.join(map(str, contributors))}.")
    words.append(f"validation: {p.get('validation') or 'none'}.")
    b = p.get("source_budget")
    if b:
        words.append(f"source {b['source']!r}: epsilon {eps(b['remaining_epsilon'])} of {eps(b['total_epsilon'])} left.")
    return " ".join(words)


# -- status, lists, budgets, preview ------------------------------------------------------------------


def progress_fraction(view: dict[str, Any]) -> float:
    """Share of the query's work done: rounds done plus the position in the running cohort's phases."""
    if view.get("status") == "succeeded":
        return 1.0
    p = view.get("progress") or {}
    rounds = max(1, int(p.get("rounds_upper_bound") or 1))
    within = 0.0
    cohort = p.get("cohort")
    if cohort:
        i = PHASES.index(cohort["phase"]) if cohort["phase"] in PHASES else 0
        answered = min(1.0, cohort["answered"] / cohort["expected"]) if cohort.get("expected") else 0.0
        within = (i + answered) / len(PHASES)
    return min(1.0, (int(p.get("rounds_done") or 0) + within) / rounds)


def progress_text(view: dict[str, Any], countdown: bool = True) -> str:
    """One line: round, phase, answers in the phase, time to the phase deadline (or the forming cohort)."""
    p = view.get("progress") or {}
    status = view.get("status")
    if status in ("succeeded", "failed", "cancelled"):
        return f"{status}" + (f": {view['error']}" if view.get("error") else "")
    text = f"{status} · round {int(p.get('round', 0)) + 1} of ≤ {p.get('rounds_upper_bound')}"
    cohort = p.get("cohort")
    if cohort:
        text += f" · {cohort['phase']} · {cohort['answered']}/{cohort['expected']} answered"
        if countdown:
            text += f" · closes in ≤ {math.ceil(cohort['deadline_in_s'])} s"
    elif p.get("phase") == "forming":
        elig = p.get("devices_eligible")
        text += f" · forming a cohort: {'?' if elig is None else elig} devices available, need {p.get('need')}"
    else:
        text += f" · {p.get('contributors')}/{p.get('need') or '?'} contributors"
    return text


def format_status(view: dict[str, Any]) -> str:
    p = view.get("progress") or {}
    created = _parse_time(view.get("created_at"))
    finished = _parse_time(view.get("finished_at"))
    age = (finished or time.time()) - created if created else None
    lines = [
        f"query      {view['id']}" + (f"  {view['name']!r}" if view.get("name") else ""),
        f"kind       {view['kind']} over source {view['source']!r}",
        f"status     {view['status']}" + (f" after {duration(age)}" if finished else f" for {duration(age)}" if age is not None else ""),
        f"round      {min(int(p.get('round', 0)) + 1, int(p.get('rounds_upper_bound') or 1))} of at most "
        f"{p.get('rounds_upper_bound')} ({p.get('rounds_done')} done)",
        f"contributors {p.get('contributors')} of the {p.get('need') or '?'} this round needs"
        + (f"; cohorts this round: {', '.join(f'{n} {k}' for k, n in (p.get('cohorts') or {}).items())}" if p.get("cohorts") else ""),
    ]
    cohort = p.get("cohort")
    if cohort:
        at = PHASES.index(cohort["phase"]) if cohort["phase"] in PHASES else -1
        marks = " ".join(f"{ph} ✓" if i < at else f"[{ph}]" if i == at else ph for i, ph in enumerate(PHASES))
        lines += [
            f"cohort     {cohort['id']}: {cohort['devices']} devices",
            f"phase      {cohort['phase']}: {cohort['answered']} of {cohort['expected']} expected answered; "
            f"deadline in {math.ceil(cohort['deadline_in_s'])} s",
            f"phases     {marks}",
        ]
    elif p.get("phase") == "forming":
        lines.append(f"cohort     forming: {p.get('devices_eligible', '?')} devices available, {p.get('need')} needed")
    if view.get("error"):
        lines.append(f"error      {view['error']}")
    return "\n".join(lines)


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    from datetime import datetime, timezone

    dt = datetime.fromisoformat(text)
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def format_queries(queries: list[dict[str, Any]], width: int = 120) -> str:
    if not queries:
        return "no queries"
    data = []
    for q in queries:
        p = q.get("progress") or {}
        data.append([q["id"], q.get("name") or "", q["kind"], q["source"], q["status"],
                     f"{min(int(p.get('round', 0)) + 1, int(p.get('rounds_upper_bound') or 1))}/{p.get('rounds_upper_bound')}",
                     f"{p.get('contributors')}/{p.get('need') or '–'}",
                     ((p.get("cohort") or {}).get("phase") or p.get("phase") or "") if q["status"] in ("pending", "running") else "",
                     (q.get("created_at") or "")[:19].replace("T", " ")])
    return _table(None, [("id", "left"), ("name", "left"), ("kind", "left"), ("source", "left"), ("status", "left"),
                         ("round", "right"), ("contrib/need", "right"), ("phase", "left"), ("submitted (UTC)", "left")],
                  data, None, width)


def format_budgets(data: dict[str, Any], width: int = 120) -> str:
    budgets = data.get("budgets") or []
    caption = f"sources without a set total: epsilon {eps(data.get('default_epsilon'))}, delta {delta(data.get('default_delta'))}"
    if not budgets:
        return "no source has been charged yet; " + caption
    return _table(None, [("source", "left"), ("epsilon spent / total", "right"), ("", "left"), ("left", "right"),
                         ("delta spent / total", "right"), ("queries", "right"), ("total set by", "left")],
                  [[b["source"], f"{eps(b['spent_epsilon'])} / {eps(b['total_epsilon'])}",
                    bar(b["spent_epsilon"], b["total_epsilon"], 20), eps(b["remaining_epsilon"]),
                    f"{delta(b['spent_delta'])} / {delta(b['total_delta'])}", str(b["queries_charged"]),
                    "admin" if b["configured"] else "default"] for b in budgets], caption, width)


def format_charges(data: dict[str, Any], width: int = 120) -> str:
    b = data["budget"]
    head = (f"source {data['source']!r}: epsilon {eps(b['spent_epsilon'])} spent of {eps(b['total_epsilon'])} "
            f"({eps(b['remaining_epsilon'])} left); delta {delta(b['spent_delta'])} of {delta(b['total_delta'])}; "
            f"{b['queries_charged']} queries charged")
    charges = data.get("charges") or []
    if not charges:
        return head + "\nno charges yet"
    spent, lines = 0.0, []
    for c in charges:
        if c["status"] == "charged":
            spent += c["epsilon"]
        lines.append([c["charged_at"][:19].replace("T", " "), c.get("query_id") or "(another analyst's)", c.get("kind") or "",
                      eps(c["epsilon"]), delta(c["delta"]),
                      c["status"] + (f" {c['refunded_at'][:19].replace('T', ' ')}" if c.get("refunded_at") else ""),
                      eps(spent)])
    return head + "\n" + _table("charges, oldest first", [("charged (UTC)", "left"), ("query", "left"), ("kind", "left"),
                                                         ("epsilon", "right"), ("delta", "right"), ("status", "left"),
                                                         ("epsilon kept so far", "right")], lines, None, width)


def format_preview(p: dict[str, Any], width: int = 120) -> str:
    priv = p.get("privacy") or {}
    b = p.get("budget") or {}
    lines = [
        f"kind       {p.get('kind')} over source {p.get('source')!r}",
        f"charge     epsilon {eps(priv.get('epsilon'))}, delta {delta(priv.get('delta'))} ({priv.get('mechanism')})"
        + (f", validation {priv['validation']}" if priv.get("validation") else ""),
        f"budget     source {b.get('source')!r}: epsilon {eps(b.get('remaining_epsilon'))}, delta "
        f"{delta(b.get('remaining_delta'))} left — {'fits' if b.get('fits') else 'does NOT fit'}",
        f"rounds     {p.get('rounds')}; every sum over at least t_min = {p.get('t_min')} devices",
    ]
    values = p.get("values") or []
    if values:
        lines.append(_table("expected noise of each released value", [("value", "left"), ("std", "right"),
                                                                      ("± 95 %", "right"), ("note", "left")],
                            [[v.get("path", ""), num(v.get("std"), 3), num(v.get("ci95_halfwidth"), 3), v.get("note") or ""]
                             for v in values], None, width))
    for w in p.get("warnings") or []:
        lines.append(f"warning: {(w.get('path') + ': ') if w.get('path') else ''}{w.get('message')}")
    return "\n".join(lines)
