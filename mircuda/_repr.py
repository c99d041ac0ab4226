"""Rich displays for notebooks (``_repr_html_`` / ``_repr_markdown_``): tables of a result's fields
and plan descriptions. Plain text stays each class's ``__repr__``; nothing here imports IPython."""

from __future__ import annotations

import dataclasses
import html
from typing import Any

__all__ = ["Description", "dataclass_html", "html_table"]


def _format(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        return str(value)
    if name.endswith("_bytes") and value >= 1024:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value:,} ({value / size:.1f} {unit})"
    return f"{value:,}" if abs(value) >= 10_000 else str(value)


def html_table(title: str, rows: list[tuple[str, Any]]) -> str:
    """A two-column HTML table (field, value) under a bold ``title``; every cell is escaped."""
    body = "".join(f"<tr><td style='text-align:left'>{html.escape(k)}</td>"
                   f"<td style='text-align:left'><code>{html.escape(_format(k, v))}</code></td></tr>"
                   for k, v in rows)
    return f"<table><caption style='text-align:left'><b>{html.escape(title)}</b></caption>{body}</table>"


def dataclass_html(self: Any) -> str:
    """``_repr_html_`` for a dataclass: one row per field, then its ``_repr_extra_`` rows if it has some."""
    rows = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
    extra = getattr(self, "_repr_extra_", None)
    if callable(extra):
        rows += extra()
    return html_table(type(self).__name__, rows)


class Description(str):
    """A plan's ``describe()`` text: a ``str`` (compare, print, search it as before) that a notebook
    shows as Markdown, the part before the first ``": "`` in bold."""

    __slots__ = ()

    def _repr_markdown_(self) -> str:
        head, sep, rest = self.partition(": ")
        return f"**{head}**{sep}{rest}" if sep else str(self)
