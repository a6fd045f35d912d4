"""Text views of the analyst API for `fa`: results as the tables their kind builds (numbers rounded to what their noise allows, with
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

from analyst_client.client import Uncertainty, rows, tables, uncertainty_of

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


ASYMMETRY = 0.1
"""An interval whose ends differ in distance from the value by more than this share of its half-width is shown as
[lo, hi], not ± (a clamped value, a count released above a threshold): "0.00 ± 0.99" would claim negative values."""


def with_interval(value: float | None, u: Uncertainty | None) -> str:
    text, half = round_to_noise(value, u.half if u else None)
    if half is None or u is None or value is None:
        return text
    if abs((u.hi - value) - (value - u.lo)) > ASYMMETRY * u.half:
        lo, _ = round_to_noise(u.lo, u.half)
        hi, _ = round_to_noise(u.hi, u.half)
        return f"{text} [{lo}, {hi}]"
    return f"{text} ± {half}"


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
    """A result view as `json` (the API's answer), `csv` (the rows of `analyst_client.client.rows`: the main table) or
    `table` (the result's tables, `render_table`, with the warnings and the privacy block in words; `plot` adds the
    bars and sparklines of each table's chart hint and the charted sections after the main one)."""
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
    main, *more = tables(view)
    parts = [render_table(view, main, plot, width)]
    for t in more:
        if plot and t.get("chart"):
            parts.append("\n" + render_table(view, t, plot, width))
        else:
            parts.append(f"{t.get('title') or t.get('name')}: {len(t.get('rows') or [])} rows (--format json)")
    trust = [f"WARNING — {w.get('message')}" for w in view.get("warnings") or [] if is_trust_warning(w)]
    warnings = [f"warning: {w.get('path') or ''} {w.get('message')}".replace("  ", " ")
                for w in view.get("warnings") or [] if not is_trust_warning(w)]
    return "\n".join([f"{kind} result (query {view.get('id', '?')})", *trust, *parts, *warnings, "", privacy_words(view)])


def is_trust_warning(warning: dict[str, Any]) -> bool:
    """A warning about what the result can be trusted for (`privacy.validation`: no validity proofs), shown above
    the values rather than among the per-value warnings."""
    return str(warning.get("path") or "").startswith("privacy.")


def _cell_text(view: dict[str, Any], column: dict[str, Any], cell: dict[str, Any]) -> str:
    value = cell.get("value")
    role = column.get("role")
    if role == "value":
        return with_interval(value, uncertainty_of(view, cell.get("path"), value)) if value is not None else "–"
    if role == "interval" and isinstance(value, list) and len(value) == 2:
        return f"[{num(value[0])}, {num(value[1])}]"
    if isinstance(value, bool):
        return str(column.get("label") or column["name"]) if value else ""
    return "" if value is None else num(value) if isinstance(value, (int, float)) else str(value)


def render_table(view: dict[str, Any], table: dict[str, Any], plot: bool = False, width: int = 120) -> str:
    """One result table as text: values rounded to their noise ("value ± h"), a 95 % interval column when the table
    has a single noisy value column (one whose values have an uncertainty in the view), and under `plot` its chart hint — a bar per row after a "bar" chart's value,
    a sparkline per value column after a "line" chart's table."""
    columns = table.get("columns") or []
    data = table.get("rows") or []
    if not data and table.get("empty"):
        return str(table["empty"])
    known = view.get("uncertainty") or {}
    noisy = [c["name"] for c in columns if c.get("role") == "value"
             and any((r.get(c["name"]) or {}).get("path") in known for r in data)]
    chart = table.get("chart") or {}
    bar_of = (chart.get("y") or [None])[0] if plot and chart.get("type") == "bar" else None
    heads: list[tuple[str, str]] = []
    for c in columns:
        heads.append((str(c.get("label") or c["name"]), "right" if c.get("role") in ("value", "interval") else "left"))
        if len(noisy) == 1 and c["name"] == noisy[0]:
            heads.append(("95 % interval", "right"))
    if bar_of:
        heads.append(("", "left"))
        tops = [1.0]
        for r in data:
            cell = r.get(bar_of) or {}
            u = uncertainty_of(view, cell.get("path"), cell.get("value"))
            v = cell.get("value")
            tops.append(u.hi if u else float(v) if isinstance(v, (int, float)) else 0.0)
        top = max(tops)
    lines = []
    for r in data:
        cells = []
        for c in columns:
            cell = r.get(c["name"]) or {}
            cells.append(_cell_text(view, c, cell))
            if len(noisy) == 1 and c["name"] == noisy[0]:
                cells.append(interval(uncertainty_of(view, cell.get("path"), cell.get("value"))))
        if bar_of:
            v = (r.get(bar_of) or {}).get("value")
            cells.append(bar(max(0.0, float(v)), top, 30) if isinstance(v, (int, float)) else "–")
        lines.append(cells)
    out = [_table(table.get("title"), heads, lines, table.get("caption"), width)]
    if plot and chart.get("type") == "line":
        for k in chart.get("y") or []:
            values = [(r.get(k) or {}).get("value") for r in data]
            finite = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if finite:
                out.append(f"{k:>14}  {sparkline(values)}  {num(finite[0])} → {num(finite[-1])}")
    return "\n".join(out)


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
                 f"devices; epsilon = {eps(p.get('epsilon'))} (guaranteed and charged), delta = {delta(p.get('delta'))}."]
        if p.get("epsilon_note"):
            words.append(f"({p['epsilon_note']}.)")
    if contributors:
        words.append(f"contributors per round: {', '.join(map(str, contributors))}.")
    words.append(f"validation: {p.get('validation') or 'none'}.")
    if p.get("identities") == "open":
        words.append("identities: OPEN registration — this server has no identity issuer, so anyone could have "
                     "registered many of the contributing devices (docs/identities.md).")
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
        def spread(v: dict[str, Any]) -> str:
            r = v.get("std_range")
            return f"{num(r[0], 3)} – {num(r[1], 3)}" if r else ""

        lines.append(_table("expected noise of each released value (std at min_clients; range over cohort sizes and data)",
                            [("value", "left"), ("std", "right"), ("± 95 %", "right"), ("std range", "right"),
                             ("note", "left")],
                            [[v.get("path", ""), num(v.get("std"), 3), num(v.get("ci95_halfwidth"), 3), spread(v),
                              v.get("note") or ""] for v in values], None, width))
    for w in p.get("warnings") or []:
        lines.append(f"warning: {(w.get('path') + ': ') if w.get('path') else ''}{w.get('message')}")
    return "\n".join(lines)


# -- the transparency log -----------------------------------------------------------------------------


def format_audit(report: dict[str, Any], width: int = 120) -> str:
    """An audit report (`analyst_client.audit.AuditReport.to_json()`): the head, the entries by type, each source's
    spend from the log against its budget, and the findings with their entry index."""
    head = report.get("head")
    lines = [f"log        {report.get('server')}"]
    if head:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(head["timestamp_ms"] / 1000))
        lines.append(f"head       size {head['size']:,}, root {head['root']}, signed {when} UTC by key {head['key_id']}"
                     f"{', ' + str(head['cosignatures']) + ' witness cosignature(s)' if head.get('cosignatures') else ''}")
    else:
        lines.append("head       none (the log is empty)")
    lines.append(f"key        {report.get('key_id')} "
                 + ("(pinned)" if report.get("key_pinned") else "(served by the server, not pinned: pass --log-key)"))
    by_type = report.get("entries_by_type") or {}
    lines.append(f"entries    {report.get('entries', 0):,}"
                 + (": " + ", ".join(f"{n:,} {t}" for t, n in by_type.items()) if by_type else ""))
    lines.append(f"checked    {report.get('heads_checked', 0):,} signed heads"
                 + (f"; {report.get('queries_checked', 0)} queries, {report.get('results_checked', 0)} results, "
                    f"{report.get('charges_checked', 0)} ledger charges against the log" if report.get("with_token")
                    else "; no token: the server's queries, results and ledger were not compared")
                 + (f"; extends the last audit's head (size {report['state_size']:,})"
                    if report.get("state_size") is not None else ""))
    sources = report.get("sources") or []
    if sources:
        rows = []
        for s in sources:
            total = s.get("total_epsilon")
            rows.append([s["source"], f"{eps(s['spent_epsilon'])} / {eps(total)}", bar(s["spent_epsilon"], total or 0, 16),
                         f"{delta(s['spent_delta'])} / {delta(s.get('total_delta'))}",
                         {None: "none logged", "*": "default (*)"}.get(s.get("budget_from"), "set for the source"),
                         str(s["charges"]), str(s["refunds"]), "OVER" if s.get("over") else "ok"])
        lines.append(_table("spend per source, from the log's charges and refunds (basic composition)",
                            [("source", "left"), ("epsilon spent / budget", "right"), ("", "left"),
                             ("delta spent / budget", "right"), ("budget", "left"), ("charges", "right"),
                             ("refunds", "right"), ("", "left")], rows, None, width))
    findings = report.get("findings") or []
    if findings:
        lines.append(f"{len(findings)} finding(s):")
        for f in findings:
            where = "" if f.get("index") is None else f"entry {f['index']}: "
            lines.append(f"  [{f['code']}] {where}{f['message']}")
    else:
        lines.append("findings   none")
    return "\n".join(lines)
