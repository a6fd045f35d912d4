""""Did you mean …?" for a misspelt spec field: the nearest allowed field name of the model that refused it.

Used wherever a pydantic `extra_forbidden` error becomes a message — the server's 422 body (`validation_message`,
here) and `fa validate`/`fa submit`'s local check (`analyst_client.cli`) — so both say the same thing.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

CUTOFF = 0.6
"""Least `difflib` similarity ratio for a suggestion ("privcy" → "privacy", "bucket" → "buckets")."""


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, unions, lists and dict values)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    out: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        out += _models(arg)
    return out


def model_at(model: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The model that holds the field at `path` inside `model` (list indices and union tags skipped); None when
    the path leaves the models."""
    candidates: list[type[BaseModel]] = [model]
    for part in path:
        if isinstance(part, int):
            continue  # an index into a list of models: the same candidates
        named = [m for m in candidates if m.__name__ == part]
        if named:
            candidates = named  # a union member's tag in the location
            continue
        holder = next((m for m in candidates if part in m.model_fields), None)
        if holder is None:
            return None
        candidates = _models(holder.model_fields[part].annotation)
        if not candidates:
            return None
    return candidates[0] if len(candidates) == 1 else None


def did_you_mean(model: type[BaseModel], loc: Sequence[str | int]) -> str | None:
    """The allowed field name closest to the unknown one at `loc` (an `extra_forbidden` error's location, relative
    to `model`), or None when none is close enough."""
    if not loc or not isinstance(loc[-1], str):
        return None
    holder = model_at(model, loc[:-1])
    if holder is None:
        return None
    names = [f.alias or name for name, f in holder.model_fields.items()]
    match = difflib.get_close_matches(loc[-1], names, n=1, cutoff=CUTOFF)
    return match[0] if match else None


def error_text(err: ErrorDetails, model: type[BaseModel] | None) -> str:
    """A pydantic error's message, with "did you mean 'x'?" for an unknown field close to an allowed one."""
    msg = err["msg"]
    if model is not None and err["type"] == "extra_forbidden":
        hint = did_you_mean(model, err["loc"])
        if hint is not None:
            msg += f"; did you mean {hint!r}?"
    return msg


def validation_message(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The message and the field-by-field detail of a pydantic error (`[{"field": path, "message": text}]`, the
    paths under `prefix`); given the `model` that raised it, an unknown field gets "did you mean 'x'?"."""
    details: list[dict[str, Any]] = []
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = ".".join(str(x) for x in ((prefix,) if prefix else ()) + tuple(err["loc"]))
        msg = error_text(err, model)
        details.append({"field": loc, "message": msg})
        parts.append(f"{loc or 'body'}: {msg}")
    return "; ".join(parts), details
