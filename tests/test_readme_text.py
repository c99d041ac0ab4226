"""README.md as text: every paragraph, list item and heading closes the parentheses it opens (code spans and
fenced blocks aside), so an inserted clause cannot leave the rest of an item inside an aside (the FP4 row_warps
sentence once left ``(the CUDA-core kernel also ...`` open to the end of its item)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def blocks(text: str) -> list[str]:
    """Paragraphs, list items and headings of ``text`` (fenced code and table rows dropped)."""
    out: list[str] = []
    current: list[str] = []
    for line in re.sub(r"```.*?```", "", text, flags=re.S).split("\n"):
        if not line.strip() or re.match(r"(- |#|\|)", line) or re.match(r"\s*\d+\. ", line):
            if current:
                out.append("\n".join(current))
            current = [line] if line.strip() and not line.startswith("|") else []
        else:
            current.append(line)
    if current:
        out.append("\n".join(current))
    return out


def unbalanced(block: str) -> bool:
    depth = 0
    for ch in re.sub(r"`[^`]*`", "", block):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return True
    return depth != 0


def test_unbalanced_finds_an_open_aside() -> None:
    assert unbalanced("a (b (c) d") and unbalanced("a) (b") and not unbalanced("a (b `(` c) `)`")
    assert blocks("- one (two\n  three)\n- four (\n\n```\n(\n```\ntext") == ["- one (two\n  three)", "- four (", "text"]


def test_the_readme_closes_every_parenthesis() -> None:
    bad = [block[:120] for block in blocks(README.read_text(encoding="utf-8")) if unbalanced(block)]
    assert not bad
