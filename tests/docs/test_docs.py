"""Docs that cannot drift: option tables against the real parsers, links inside the repository.

Option tables are markdown tables whose first header cell names what they document:

- ``| `speceq run` option | default | meaning |`` (one per subcommand; ``| `speceq` option |``
  for the options every subcommand has, such as ``--debug``), checked against
  :func:`speceq.faces.cli.build_parser`;
- ``| pytest option | ini | default | meaning |``, checked against
  :data:`speceq.faces.pytest_support.options.OPTIONS` (the plugin's options and ini mirrors);
- ``| marker | meaning |``, checked against :data:`speceq.faces.plugin.MARKERS`;
- ``| field | type | default | meaning |`` (docs/reference/cases.md), checked against the cases-file fields.

A default cell holds the value first (a number, or a value in backticks) and may explain it
after; ``—`` means "no value" (the option's default is None or empty); ``on``/``off`` is
whether a flag's effect is the default. Every option must be documented exactly once, with
its default. A failure names the file and line, or the exact row to add.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from docs_support import (
    DOCS,
    REPO,
    Table,
    all_tables,
    anchors,
    doc_pages,
    flags_in,
    is_external,
    links,
    rel,
)

NO_VALUE = object()  #: a default cell that says "no value" (``—``, ``none``)
CLI_PAGE = "docs/reference/cli.md"  #: where a missing `speceq` subcommand table goes
PYTEST_PAGE = "docs/how-to/ci-with-pytest.md"


@dataclass(frozen=True)
class Documented:
    """An option as the parser defines it: its strings, default and a suggested table row."""

    strings: tuple[str, ...]
    default: Any  # NO_VALUE, "on"/"off" (flags), or the value
    row: str


def documented_default(cell: str) -> Any:
    """The value a default cell states: NO_VALUE, or its first token (backticks removed)."""
    text = cell.strip()
    if not text or text.startswith("—") or re.match(r"(?i)none\b", text):
        return NO_VALUE
    m = re.match(r"`([^`]*)`", text)
    return m.group(1).strip() if m else re.split(r"[\s,;(]", text, maxsplit=1)[0]


def same_default(stated: Any, actual: Any) -> bool:
    if actual is NO_VALUE or stated is NO_VALUE:
        return stated is actual
    if isinstance(actual, bool) or actual in ("on", "off"):
        return str(stated).lower() == str(actual).lower()
    if isinstance(actual, (int, float)):
        try:
            return float(str(stated).replace(" ", "")) == float(actual)
        except ValueError:
            return False
    return str(stated) == str(actual)


def default_text(value: Any) -> str:
    if value is NO_VALUE:
        return "—"
    if value in ("on", "off") or isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return f"`{value}`"


def _help(text: str | None) -> str:
    text = re.sub(r"\s*\(?[Dd]efault:?\s*%\([^)]*\)\w\)?\.?", "", text or "")
    return re.sub(r"\s*Default:.*$", "", text).replace("%%", "%").strip() or "…"


# ----- the `speceq` command line ----------------------------------------------------------
def _subcommands() -> dict[str, argparse.ArgumentParser]:
    from speceq.faces.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _cli_option(parser: argparse.ArgumentParser, action: argparse.Action) -> Documented:
    if isinstance(action, argparse.BooleanOptionalAction):  # --x / --no-x: "on" when --x is the default
        default: Any = "on" if parser.get_default(action.dest) is True else "off"
    elif action.nargs == 0:  # a flag: "on" when its effect is the default of its destination
        default = "on" if action.const == parser.get_default(action.dest) else "off"
    else:
        default = NO_VALUE if action.default in (None, [], ()) else action.default
    metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
    cell = ", ".join(f"`{s}{metavar}`" for s in action.option_strings)
    return Documented(tuple(action.option_strings), default, f"| {cell} | {default_text(default)} | {_help(action.help)} |")


def cli_options() -> dict[str, list[Documented]]:
    """Options per table: ``speceq <command>`` for each subcommand, ``speceq`` for the shared ones."""
    per_command = {
        name: [_cli_option(p, a) for a in p._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]
        for name, p in _subcommands().items()
    }
    shared = set.intersection(*({o.strings for o in opts} for opts in per_command.values()))
    tables: dict[str, list[Documented]] = {"speceq": []}
    for name, opts in per_command.items():
        for o in opts:
            if o.strings in shared:
                if o.strings not in {s.strings for s in tables["speceq"]}:
                    tables["speceq"].append(o)
            else:
                tables.setdefault(f"speceq {name}", []).append(o)
    return tables


def _table_kind(table: Table) -> str | None:
    m = re.fullmatch(r"(speceq(?: [\w-]+)?) option", table.header[0])
    if m and table.header[1:2] == ("default",):
        return m.group(1)
    return None


def check_option_tables(
    expected: dict[str, list[Documented]], kind_of, *, extra_columns: dict[str, dict[str, str]] | None = None,
    default_page: str,
) -> list[str]:
    """Every documented option exists with its default; every option is documented once."""
    errors: list[str] = []
    seen: dict[tuple[str, tuple[str, ...]], str] = {}
    pages: dict[str, str] = {}
    for table in all_tables():
        kind = kind_of(table)
        if kind is None:
            continue
        pages.setdefault(kind, rel(table.path))
        if kind not in expected:
            errors.append(f"{table.where()}: table of {kind!r}, which does not exist (known: {sorted(expected)})")
            continue
        by_string = {s: o for o in expected[kind] for s in o.strings}
        col = {name: i for i, name in enumerate(table.header)}
        for row in table.rows:
            if len(row.cells) != len(table.header):
                errors.append(f"{table.where(row)}: {len(row.cells)} cells, the header has {len(table.header)}")
                continue
            flags = flags_in(row.cells[0])
            if not flags:
                errors.append(f"{table.where(row)}: no option in the first cell {row.cells[0]!r}")
                continue
            options = {by_string.get(f) for f in flags}
            if None in options:
                unknown = [f for f in flags if f not in by_string]
                errors.append(f"{table.where(row)}: {kind} has no option {', '.join(unknown)}; "
                              "fix its name or remove the row")
                continue
            if len(options) != 1:
                errors.append(f"{table.where(row)}: one option per row, got {flags}")
                continue
            option = options.pop()
            key = (kind, option.strings)
            if key in seen:
                errors.append(f"{table.where(row)}: {kind} option {option.strings[-1]} is documented twice "
                              f"(also {seen[key]}); keep one row")
            seen[key] = table.where(row)
            stated = documented_default(row.cells[col["default"]])
            if not same_default(stated, option.default):
                shown = "no value (—)" if stated is NO_VALUE else repr(stated)
                errors.append(f"{table.where(row)}: {kind} option {option.strings[-1]}: the docs say default "
                              f"{shown}, the code says {default_text(option.default)}. Row:\n    {option.row}")
            for column, want in (extra_columns or {}).get(option.strings[-1], {}).items():
                got = row.cells[col[column]].replace("`", "").split()[0] if row.cells[col[column]] else ""
                if got != want:
                    errors.append(f"{table.where(row)}: {kind} option {option.strings[-1]}: {column} {got!r}, "
                                  f"expected {want!r}")
    for kind, options in expected.items():
        missing = [o for o in options if (kind, o.strings) not in seen]
        if not missing:
            continue
        if kind in pages:
            rows = "\n    ".join(o.row for o in missing)
            errors.append(f"{kind}: undocumented option(s); add these rows to the `{kind}` option table in "
                          f"{pages[kind]}:\n    {rows}")
        else:
            rows = "\n    ".join(o.row for o in missing)
            errors.append(f"{kind}: no option table; add to {default_page}:\n    | `{kind}` option | default | "
                          f"meaning |\n    |---|---|---|\n    {rows}")
    return errors


def test_every_command_line_option_is_documented_with_its_default() -> None:
    expected = {k: v for k, v in cli_options().items() if v}
    errors = check_option_tables(expected, _table_kind, default_page=CLI_PAGE)
    assert not errors, "\n".join(errors)


# ----- the pytest plugin --------------------------------------------------------------------
def pytest_options() -> tuple[dict[str, list[Documented]], dict[str, dict[str, str]]]:
    from speceq.faces.pytest_support.options import OPTIONS

    documented, ini = [], {}
    for o in OPTIONS:
        default = NO_VALUE if o.repeatable or o.builtin().value is None else o.builtin().value
        row = f"| `{o.flag} {o.metavar}` | `{o.ini}` | {default_text(default)} | {o.help} |"
        documented.append(Documented((o.flag,), default, row))
        ini[o.flag] = {"ini": o.ini}
    return {"pytest": documented}, ini


def test_every_pytest_option_is_documented_with_its_default_and_ini_name() -> None:
    expected, ini = pytest_options()

    def kind_of(table: Table) -> str | None:
        if table.header[0] != "pytest option":
            return None
        assert table.header[1:3] == ("ini", "default"), f"{table.where()}: expected | pytest option | ini | default |"
        return "pytest"

    errors = check_option_tables(expected, kind_of, extra_columns=ini, default_page=PYTEST_PAGE)
    assert not errors, "\n".join(errors)


def test_every_marker_is_documented() -> None:
    from speceq.faces.plugin import MARKERS

    names = {line.split("(", 1)[0].split(":", 1)[0].strip() for line in MARKERS}
    documented: dict[str, str] = {}
    errors = []
    for table in all_tables():
        if table.header[0] != "marker":
            continue
        for row in table.rows:
            m = re.match(r"`(?:@pytest\.mark\.)?(\w+)", row.cells[0])
            name = m.group(1) if m else row.cells[0]
            if name not in names:
                errors.append(f"{table.where(row)}: the plugin has no marker {name!r} (it has {sorted(names)})")
            elif name in documented:
                errors.append(f"{table.where(row)}: marker {name} is documented twice (also {documented[name]})")
            documented[name] = table.where(row)
    for name in sorted(names - set(documented)):
        errors.append(f"marker {name} is undocumented; add a row `| `@pytest.mark.{name}(...)` | meaning |` to the "
                      f"marker table of {PYTEST_PAGE}")
    assert not errors, "\n".join(errors)


def test_every_cases_file_field_is_documented_with_its_default() -> None:
    import dataclasses

    from speceq.core.params import SamplingParams
    from speceq.inputs.cases import CASE_FIELDS, Case

    # every SamplingParams default (the stored form leaves the unset request fields out); logit_bias is written {}
    params = {f.name: f.default for f in dataclasses.fields(SamplingParams)}
    # stop is written []; the params' tokenizer is set by the parser from the case's (checked elsewhere)
    params.pop("tokenizer")
    defaults = {**{k: NO_VALUE if v is None else v for k, v in params.items()}, "logit_bias": "{}", "stop": "[]",
                "batch_size": Case.__dataclass_fields__["batch_size"].default}
    found = [t for t in all_tables() if t.header[:3] == ("field", "type", "default")]
    assert [rel(t.path) for t in found] == ["docs/reference/cases.md"], "expected one field table, in docs/reference/cases.md"
    table = found[0]
    fields = {}
    for row in table.rows:
        name = row.cells[0].strip("`")
        assert name in CASE_FIELDS, f"{table.where(row)}: cases files have no field {name!r}"
        fields[name] = row
        if name in defaults:
            value = defaults[name]
            stated = documented_default(row.cells[2])
            ok = stated.lower() == str(value).lower() if isinstance(value, bool) else same_default(stated, value)
            assert ok, f"{table.where(row)}: field {name}: the docs say default {stated!r}, the code says {value!r}"
    assert sorted(fields) == sorted(CASE_FIELDS), f"undocumented fields: {sorted(set(CASE_FIELDS) - set(fields))}"


# ----- links ------------------------------------------------------------------------------
def markdown_files() -> list[Path]:
    """Every markdown file of the repository (not virtual environments or build outputs)."""
    skip = {".git", "build", "dist", "node_modules"}
    return sorted(
        p for p in REPO.rglob("*.md")
        if not any(part in skip or part.startswith(".venv") or part.endswith(".egg-info")
                   for part in p.relative_to(REPO).parts[:-1])
    )


def _inside(path: Path) -> bool:
    return path == REPO or REPO in path.parents


@pytest.mark.parametrize("page", markdown_files(), ids=rel)
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    errors = []
    for line, target in links(page):
        if is_external(target):
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{rel(page)}:{line}: link {target!r}"
        if not _inside(dest):
            errors.append(f"{where} points outside the repository")
        elif not dest.exists():
            errors.append(f"{where}: {rel(dest)} does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            errors.append(f"{where}: {rel(dest)} has no heading with anchor #{anchor}")
    assert not errors, "\n".join(errors)


def test_the_front_page_and_the_docs_pages_exist() -> None:
    assert (REPO / "README.md").is_file() and DOCS.is_dir()
    assert len(doc_pages()) > 5


#: A path into the parent folder of the repository: two dots, a slash, a name.
_PARENT_PATH = re.compile(r"\.\.[/\\][\w.-]+")
#: Mentions of documentation files in code: a path ending in .md, or an upper-case name ending in .md.
_DOC_MENTION = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[A-Z][A-Z0-9_-]*\.md|(?:[\w.-]+/)+[\w.-]+\.md)\b")


def source_files() -> list[Path]:
    skip = {".git", "build", "dist", "node_modules"}
    suffixes = {".py", ".sh", ".toml", ".cfg", ".yml", ".yaml", ".html", ".j2", ".txt"}
    return sorted(
        p for p in REPO.rglob("*")
        if p.suffix in suffixes and p.is_file()
        and not any(part in skip or part.startswith(".venv") or part.endswith(".egg-info")
                    for part in p.relative_to(REPO).parts[:-1])
    )


def test_no_file_refers_to_files_outside_the_repository() -> None:
    """Code and docs name only files a user of the repository has (no parent-folder paths)."""
    errors = []
    for path in [*source_files(), *markdown_files()]:
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            # tests may hold parent paths as data (path-traversal inputs); their doc mentions are checked
            for c in _PARENT_PATH.findall(line) if rel(path).split("/")[0] != "tests" else ():
                if not any(_inside(p) and p.exists() for p in ((path.parent / c).resolve(), (REPO / c).resolve())):
                    errors.append(f"{rel(path)}:{number}: {c!r} is not a path inside the repository")
            if path.suffix != ".md":
                for mention in _DOC_MENTION.findall(line):
                    found = [(root / mention).resolve() for root in (REPO, REPO / "docs", path.parent)]
                    if not any(_inside(p) and p.is_file() for p in found):
                        errors.append(f"{rel(path)}:{number}: names {mention!r}, which is not a file of the "
                                      "repository")
    assert not errors, "\n".join(errors)


_REPO_PATH_SPAN = re.compile(r"`((?:harness|reports|suites|tests|benchmarks|scripts|examples|docs)/[\w./-]*)`")


@pytest.mark.parametrize("page", markdown_files(), ids=rel)
def test_repository_paths_named_in_the_docs_exist(page: Path) -> None:
    """A file or folder named in a code span (``harness/core/processing.py``) exists, from the root or the page."""
    errors = []
    text = page.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        for path in _REPO_PATH_SPAN.findall(line):
            if not any((root / path.rstrip("/")).exists() for root in (REPO, page.parent)):
                errors.append(f"{rel(page)}:{number}: `{path}` is not a file or folder of the repository")
    assert not errors, "\n".join(errors)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """.ci/run calls the README's test command (step 2 of "Install and run") verbatim."""
    readme = (REPO / "README.md").read_text()
    marker = "# 2. run the tests (exactly what CI runs)\n"
    assert marker in readme
    command = readme.split(marker, 1)[1].splitlines()[0].strip()
    assert command.startswith("python -m pip install") and command.endswith("python -m pytest")
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert command in ci, f".ci/run does not run the README's test command {command!r}"
