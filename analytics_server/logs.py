"""Server log setup: plain text lines (the default) or JSON lines (`FA_LOG_FORMAT=json`), at `FA_LOG_LEVEL`.

What the server logs at INFO (docs/server.md, "Logs"): queries submitted (kind, source, the analyst's token
id, the privacy charge and what remains of the source's budget) and ended (status, duration, error),
cohorts formed (size, round, need) and ended (finished with contributors, or aborted with the reason and
phase), refunds and kept charges. Those records carry structured fields (`extra=fields(...)`): the JSON
formatter writes them as keys of the line, the text formatter leaves them in the message.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from typing import Any

FIELDS = "fa_fields"
"""LogRecord attribute holding a record's structured fields."""
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def fields(**values: Any) -> dict[str, Any]:
    """`log.info(msg, *args, extra=fields(query_id=…, event=…))`: structured fields of one record."""
    return {FIELDS: values}


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: `ts` (UTC ISO 8601), `level`, `logger`, `message`, the record's structured
    fields, and `exc` (the formatted traceback) when there is one. Values JSON cannot hold become strings."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in (getattr(record, FIELDS, None) or {}).items():
            line.setdefault(key, value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def setup(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger once (replacing its handlers): stderr, `fmt` "text" or "json"."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLinesFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
