"""JSON with comments: `//` line comments and `/* … */` block comments outside strings, as in the starter specs
`fa init KIND` writes. `strip_comments` turns such a text into plain JSON (comments become spaces, so line
and column numbers of JSON errors stay those of the file); `loads` parses it."""

from __future__ import annotations

import json
from typing import Any


class CommentError(ValueError):
    """An unterminated block comment (line and column given)."""


def strip_comments(text: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_string = False
            i += 1
        elif c == '"':
            in_string = True
            out.append(c)
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                line = text.count("\n", 0, i) + 1
                col = i - (text.rfind("\n", 0, i) + 1) + 1
                raise CommentError(f"unterminated /* comment starting at line {line} column {col}")
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:end + 2]))
            i = end + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """Parse JSON that may contain comments (json.JSONDecodeError / CommentError on bad input)."""
    return json.loads(strip_comments(text))
