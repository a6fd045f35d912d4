"""A query result as tables: what every client (the browser console, `fa`, the Python client's `rows`/`frame`)
renders without knowing the query kind.

A kind's `tabulate(result)` (`queries.kind.QueryKind.tabulate`) returns a list of `ResultTable`s — one per
section of its result (feature_stats: the per-feature statistics, then one histogram per feature; training: the
per-round metrics, then the final weights). A table has typed columns (`Column`: a `key` identifies the row, a
`value` is a released number, an `interval` a pair [lo, hi] that is not noise (e.g. declared bounds), `text`
anything else) and rows of `Cell`s. A numeric cell carries the JSON Pointer (RFC 6901) of its value in the
result, so a client takes its noise std and 95 % interval from the result view's `uncertainty[path]`; a cell
without a path is exact (or not released: value None). `chart` says how the table is best drawn (bars of one
value column over the key column, or lines of value columns over a step column).

Pure: no I/O, JSON types only (`to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["key", "value", "interval", "text"]
ChartType = Literal["bar", "line"]


@dataclass(frozen=True)
class Column:
    name: str
    """Identifier of the column (the key of its cells in every row; the DataFrame/CSV column name)."""
    label: str
    """Header shown to people."""
    role: Role = "value"
    unit: str | None = None


@dataclass(frozen=True)
class Cell:
    value: Any
    """The value as released (None: not released, e.g. a suppressed bucket)."""
    path: str | None = None
    """JSON Pointer of the value in the result (numbers only): where its uncertainty is found."""

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value} if self.path is None else {"value": self.value, "path": self.path}


@dataclass(frozen=True)
class Chart:
    type: ChartType
    """"bar": one bar per row of `y` (a single column) over the key column `x`; "line": one line per `y` column
    over the step column `x`."""
    x: str
    y: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "x": self.x, "y": list(self.y)}


@dataclass(frozen=True)
class ResultTable:
    name: str
    """Identifier of the section (unique within a result's tables)."""
    title: str | None
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Cell], ...] = ()
    """One mapping column name → cell per row; a column missing from a row is an empty cell."""
    chart: Chart | None = None
    caption: str | None = None
    """A sentence under the table (contributors, thresholds, where the rest of the result is)."""
    empty: str | None = None
    """What to say instead of the table when it has no rows."""

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "title": self.title,
            "columns": [{"name": c.name, "label": c.label, "role": c.role, "unit": c.unit} for c in self.columns],
            "rows": [{k: cell.to_json() for k, cell in row.items()} for row in self.rows],
            "chart": self.chart.to_json() if self.chart else None,
            "caption": self.caption,
        }
        if self.empty is not None:
            out["empty"] = self.empty
        return out


@dataclass
class _Rows:
    """Builder: rows appended as keyword cells."""

    rows: list[dict[str, Cell]] = field(default_factory=list)

    def add(self, **cells: Cell) -> None:
        self.rows.append(cells)


def pointer(*parts: str | int) -> str:
    """JSON Pointer of a value: `pointer("counts", "a/b")` → "/counts/a~1b"."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def num_cell(value: Any, *parts: str | int) -> Cell:
    """A cell for the value at `parts`: with its pointer when it is a number."""
    return Cell(value, pointer(*parts) if is_number(value) else None)


def flatten(result: dict[str, Any]) -> ResultTable:
    """Any result as one key/value table: every scalar leaf with its dotted key ("a.b[0].c") and its pointer;
    lists of scalars joined with commas."""
    out = _Rows()

    def walk(obj: Any, key: str, path: tuple[str | int, ...]) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{key}.{k}" if key else str(k), (*path, k))
        elif isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
            for i, v in enumerate(obj):
                walk(v, f"{key}[{i}]", (*path, i))
        elif isinstance(obj, list):
            out.add(key=Cell(key), value=Cell(", ".join(str(x) for x in obj)))
        else:
            out.add(key=Cell(key), value=num_cell(obj, *path))

    walk(result, "", ())
    return ResultTable("result", None, (Column("key", "key", "key"), Column("value", "value", "value")),
                       tuple(out.rows))


def tables_to_json(tables: list[ResultTable]) -> list[dict[str, Any]]:
    return [t.to_json() for t in tables]
