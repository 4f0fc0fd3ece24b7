"""Reading the documentation's markdown for the doc tests: pages, tables, links, option cells.

Imported by basename (tests/docs is on sys.path in the tests of this folder). Stdlib only.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_SEPARATOR = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: ``[text](target)`` and ``![alt](target)``; the target ends at whitespace or ``)``.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"""(?:href|src)\s*=\s*["']([^"']+)["']""")
_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
_EXTERNAL = ("http://", "https://", "mailto:")


def doc_pages() -> list[Path]:
    """README.md and every page under docs/, in all its folders (the user-facing markdown)."""
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@dataclass(frozen=True)
class Row:
    """One body row of a markdown table: its cells (stripped) and its line number (1-based)."""

    cells: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class Table:
    """A markdown table of ``path``: header cells (lower case, backticks removed) and body rows."""

    path: Path
    line: int
    header: tuple[str, ...]
    rows: tuple[Row, ...]

    def where(self, row: Row | None = None) -> str:
        return f"{rel(self.path)}:{row.line if row else self.line}"


def split_cells(line: str) -> tuple[str, ...]:
    """The cells of a table line; ``\\|`` is a literal pipe (kept as ``|``)."""
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return tuple(c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(text))


def _outside_code_blocks(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line that is not inside a fenced code block."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def tables(path: Path) -> list[Table]:
    """Every markdown table of ``path`` (outside code blocks)."""
    found: list[Table] = []
    lines = _outside_code_blocks(path.read_text(encoding="utf-8"))
    i = 0
    while i < len(lines) - 1:
        number, line = lines[i]
        if line.lstrip().startswith("|") and _SEPARATOR.match(lines[i + 1][1].strip()):
            header = tuple(c.replace("`", "").strip().lower() for c in split_cells(line))
            rows = []
            j = i + 2
            while j < len(lines) and lines[j][1].lstrip().startswith("|"):
                rows.append(Row(split_cells(lines[j][1]), lines[j][0]))
                j += 1
            found.append(Table(path, number, header, tuple(rows)))
            i = j
        else:
            i += 1
    return found


def all_tables() -> list[Table]:
    return [t for page in doc_pages() for t in tables(page)]


def flags_in(cell: str) -> list[str]:
    """The option strings written in a cell, e.g. ``--samples`` from ```--samples N```."""
    return _FLAG.findall(cell)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every markdown or HTML link of ``path`` outside code blocks and code spans."""
    found = []
    for number, line in _outside_code_blocks(path.read_text(encoding="utf-8")):
        prose = re.sub(r"`[^`]*`", "", line)
        for pattern in (_LINK, _HTML_LINK):
            found.extend((number, m.group(1)) for m in pattern.finditer(prose))
    return found


def is_external(target: str) -> bool:
    return target.startswith(_EXTERNAL)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Anchors of the headings of ``path`` (duplicates get ``-1``, ``-2``... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _outside_code_blocks(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = github_anchor(m.group(1))
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out


def run_commented_prints(block: str, source: Path) -> tuple[list[str], list[str]]:
    """Run an example ``block``; return (what its ``print(...)  # comment`` lines say it prints,
    the first as many lines it printed), for the docs tests that check an example's comments."""
    expected = [m.group(1).strip() for line in block.splitlines()
                if line.lstrip().startswith("print(") and (m := re.search(r"\)\s*#\s*(.+)$", line))]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(source), "exec"), {})
    return expected, out.getvalue().split("\n")[: len(expected)]
