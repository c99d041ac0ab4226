"""Rich displays for notebooks (``_repr_html_`` / ``_repr_markdown_``): tables of a result's fields,
plan descriptions, and :class:`ResultTable` (the profiles' tables: aligned text for the command line,
HTML for Jupyter). Plain text stays each class's ``__repr__``; nothing here imports IPython."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ContractError

__all__ = ["Column", "Description", "ResultTable", "dataclass_html", "html_table"]


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


@dataclass(frozen=True)
class Column:
    """One column of a :class:`ResultTable`.

    Attributes:
        key: the key of the value in each row (a mapping).
        header: the column's heading (text and HTML).
        width: the least width of the text cell in characters; ``None`` fits the widest cell (header
            included when the header is shown). Wider values are never cut.
        align: ``">"`` (right, numbers) or ``"<"`` (left, names).
        format: a ``str.format`` pattern such as ``"{:.2f}"``, or a function of the value, for a value
            that is not ``None``.
        missing: the text of a value that is ``None`` or absent from the row.
        sep: what the text row puts before this column (ignored for the first one).
    """

    key: str
    header: str
    width: int | None = None
    align: str = ">"
    format: str | Callable[[Any], str] = "{}"
    missing: str = "-"
    sep: str = " "

    def __post_init__(self) -> None:
        if self.align not in ("<", ">"):
            raise ContractError("align", "'<' or '>'", repr(self.align))
        if self.width is not None and (type(self.width) is not int or self.width < 0):
            raise ContractError("width", "None or an int >= 0", repr(self.width))

    def text(self, row: Mapping[str, Any]) -> str:
        """The cell of ``row`` before padding."""
        value = row.get(self.key)
        if value is None:
            return self.missing
        return self.format(value) if callable(self.format) else self.format.format(value)


class ResultTable:
    """A table of measured results: ``str(table)`` is the aligned text table that ``python -m mircuda``'s
    profiles print, ``_repr_html_`` the same table for Jupyter, and :meth:`column` gives one column's
    raw values (for a plot).

    Args:
        columns: the :class:`Column` of each column, in order.
        rows: mappings from column keys to values (more keys may be present: they are kept, not shown).
        title: a line printed above the table (and its HTML caption); ``""`` for none.
        indent: put before the header and each row of the text table (not before the title).
        rule: a line of ``-`` as long as the header line under it (text only).
        header: whether the header line is shown (text and HTML).
        notes: lines printed below the rows (paragraphs under the HTML table).

    Text rows are right-stripped, so an empty last cell leaves no trailing blanks.

    Raises:
        ContractError: ``columns`` is empty or not all :class:`Column`, two columns share a key, or a
            row is not a mapping.
    """

    def __init__(self, columns: Sequence[Column], rows: Iterable[Mapping[str, Any]] = (), *, title: str = "",
                 indent: str = "", rule: bool = False, header: bool = True, notes: Sequence[str] = ()) -> None:
        cols = tuple(columns)
        if not cols or not all(isinstance(c, Column) for c in cols):
            raise ContractError("columns", "a non-empty sequence of Column", repr(columns))
        keys = [c.key for c in cols]
        if len(set(keys)) != len(keys):
            raise ContractError("columns", "columns with distinct keys", repr(keys))
        self._columns = cols
        self._rows: list[dict[str, Any]] = []
        self.title, self.indent, self.rule, self.header = title, indent, rule, header
        self.notes = list(notes)
        for r in rows:
            self.append(r)

    @property
    def columns(self) -> tuple[Column, ...]:
        return self._columns

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The rows (copies of the mappings given), in order."""
        return self._rows

    def append(self, row: Mapping[str, Any]) -> None:
        """Add one row (a mapping from column keys to values; a missing key shows its column's ``missing``).

        Raises:
            ContractError: ``row`` is not a mapping.
        """
        if not isinstance(row, Mapping):
            raise ContractError("row", "a mapping from column keys to values", type(row).__name__)
        self._rows.append(dict(row))

    def column(self, key: str) -> list[Any]:
        """The raw values of ``key`` in every row (``None`` where a row lacks it).

        Raises:
            ContractError: no row and no column has ``key``.
        """
        if key not in (c.key for c in self._columns) and not any(key in r for r in self._rows):
            raise ContractError("key", f"one of {[c.key for c in self._columns]}", repr(key))
        return [r.get(key) for r in self._rows]

    def __len__(self) -> int:
        return len(self._rows)

    def _widths(self, cells: list[list[str]]) -> list[int]:
        out = []
        for i, c in enumerate(self._columns):
            if c.width is not None:
                out.append(c.width)
                continue
            texts = [row[i] for row in cells] + ([c.header] if self.header else [])
            out.append(max((len(t) for t in texts), default=0))
        return out

    def _line(self, texts: list[str], widths: list[int]) -> str:
        parts = []
        for i, (c, text, width) in enumerate(zip(self._columns, texts, widths)):
            parts.append(("" if i == 0 else c.sep) + f"{text:{c.align}{width}}")
        return (self.indent + "".join(parts)).rstrip()

    def __str__(self) -> str:
        cells = [[c.text(r) for c in self._columns] for r in self._rows]
        widths = self._widths(cells)
        lines = [self.title] if self.title else []
        if self.header:
            head = self._line([c.header for c in self._columns], widths)
            lines.append(head)
            if self.rule:
                lines.append("-" * len(head))
        lines += [self._line(row, widths) for row in cells]
        lines += self.notes
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        def td(tag: str, c: Column, text: str) -> str:
            side = "right" if c.align == ">" else "left"
            return f"<{tag} style='text-align:{side}'>{html.escape(text)}</{tag}>"

        caption = f"<caption style='text-align:left'><b>{html.escape(self.title)}</b></caption>" if self.title else ""
        head = ("<thead><tr>" + "".join(td("th", c, c.header) for c in self._columns) + "</tr></thead>"
                if self.header else "")
        body = "".join("<tr>" + "".join(td("td", c, c.text(r)) for c in self._columns) + "</tr>" for r in self._rows)
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        return f"<table>{caption}{head}<tbody>{body}</tbody></table>{notes}"

    def __repr__(self) -> str:
        return f"ResultTable({len(self._columns)} columns, {len(self._rows)} rows, title={self.title!r})"
