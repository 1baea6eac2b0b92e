"""Text for people: plain tables and printable values (used by the sweep leaderboard, the partition report
and the ``gpusched`` command)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def printable(text: str) -> str:
    """Control characters shown escaped (``\\n``), so a newline in a label cannot break a table row."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return printable(str(value))


def format_table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    """A plain text table (monospace, no dependencies)."""
    text = [[str(c) for c in header]] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in text) for i in range(len(header))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [
        line,
        "| " + " | ".join(c.ljust(w) for c, w in zip(text[0], widths, strict=True)) + " |",
        line.replace("-", "="),
    ]
    out += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in text[1:]]
    out.append(line)
    return "\n".join(out)


def cut_to_bytes(text: str, limit: int, marker: str = "\n…") -> str:
    """``text`` in at most ``limit`` bytes of UTF-8, ending with ``marker`` when cut; never half a character
    (a service that counts bytes, such as WeChat's 4,096, refuses a message that CJK text makes too long)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    room = limit - len(marker.encode())
    return data[: max(0, room)].decode("utf-8", "ignore") + marker
