"""The import direction of docs/ARCHITECTURE.md, checked on the source files with ast.

Every import counts, also those inside functions and ``if TYPE_CHECKING:`` blocks: a lazy
import is still a dependency. The checks read the repository's folders (``harness/`` is
``speceq``, ``reports/`` is ``speceq.reports``, ``suites/`` is ``speceq.suites``) and import
nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Repository folder -> import name of the package it installs as.
PACKAGE_DIRS: dict[str, str] = {"harness": "speceq", "reports": "speceq.reports", "suites": "speceq.suites"}

#: Layers, lowest first. A module may import its own layer and the layers below, never above.
#: Prefixes match a module and its submodules. ``speceq`` itself (the lazy public API) is the top.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("speceq.errors", "speceq.defaults", "speceq.params", "speceq.processing", "speceq.greedy",
                    "speceq.http_json")),
    ("models", ("speceq.models",)),
    ("inputs", ("speceq.cases", "speceq.provenance")),
    (
        "engines, store, stats, oracle, verdicts",
        ("speceq.engines", "speceq.store", "speceq.stats", "speceq.kernels", "speceq.oracle", "speceq.server_oracle",
         "speceq.server_laws", "speceq.verdicts", "speceq.reasons"),
    ),
    ("run", ("speceq.analysis", "speceq.collect", "speceq.pictures", "speceq.run", "speceq.sequential")),
    (
        "faces",
        (
            "speceq.calibrate",
            "speceq.cli",
            "speceq.cli_calibrate",
            "speceq.plugin",
            "speceq.hookspec",
            "speceq.pytest_support",
            "speceq.reports",
            "speceq.suites",
            "speceq.__main__",
        ),
    ),
)


@dataclass(frozen=True)
class Import:
    importer: str  # module name, e.g. "speceq.engines.reference"
    imported: str  # absolute module name (or the package, for ``from pkg import name``)
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line} ({self.importer} imports {self.imported})"


def _modules() -> dict[str, Path]:
    """Import name -> source file of every module of the speceq package."""
    modules: dict[str, Path] = {}
    for folder, package in PACKAGE_DIRS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(REPO / folder).with_suffix("").parts if p != "__init__"]
            modules[".".join([package, *parts])] = path
    return modules


MODULES = _modules()


def _imports_of(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, path, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield Import(module, sub if sub in MODULES else base, path, node.lineno)


IMPORTS: list[Import] = [imp for module, path in MODULES.items() for imp in _imports_of(module, path)]


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer index): the longest prefix wins
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if _within(module, prefix) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _speceq_imports() -> list[Import]:
    return [imp for imp in IMPORTS if _within(imp.imported, "speceq")]


def test_the_source_tree_is_found() -> None:
    assert "speceq.engines.reference" in MODULES and "speceq.stats.tv" in MODULES
    assert "speceq.reports.render" in MODULES
    assert len(_speceq_imports()) > 100


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(m for m in MODULES if m != "speceq" and _layer(m) is None)
    assert not unplaced, f"add these modules to a layer of LAYERS (and docs/ARCHITECTURE.md): {unplaced}"


def _upward_imports() -> list[str]:
    upward = []
    for imp in _speceq_imports():
        if imp.imported == "speceq":  # the top package: __version__ and the lazy public API
            continue
        low, high = _layer(imp.imported), _layer(imp.importer)
        if imp.importer != "speceq" and low is not None and high is not None and low > high:
            upward.append(f"{imp.where()}: layer {LAYERS[high][0]!r} imports layer {LAYERS[low][0]!r}")
    return upward


def test_imports_point_down_the_layers() -> None:
    upward = _upward_imports()
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_the_layer_check_finds_an_upward_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a made-up import of speceq.run by an engine is found."""
    mutants = MODULES["speceq.engines.mutants"]
    extra = Import("speceq.engines.mutants", "speceq.run", mutants, 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert [u for u in _upward_imports() if "speceq.engines.mutants imports speceq.run" in u]


def test_stats_is_pure() -> None:
    """speceq.stats takes arrays: no torch, no I/O layers, nothing of speceq outside stats."""
    bad = [
        imp.where()
        for imp in IMPORTS
        if _within(imp.importer, "speceq.stats")
        and (
            (_within(imp.imported, "speceq") and not _within(imp.imported, "speceq.stats"))
            or imp.imported.split(".")[0] in ("torch", "transformers")
        )
    ]
    assert not bad, "speceq.stats must stay pure:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("importer", "forbidden"),
    [
        ("speceq.engines", ("speceq.calibrate", "speceq.run", "speceq.analysis", "speceq.verdicts", "speceq.oracle")),
        ("speceq.models", ("speceq.engines", "speceq.oracle", "speceq.run", "speceq.analysis", "speceq.calibrate")),
        ("speceq.reports", ("speceq.engines", "speceq.run", "speceq.analysis", "speceq.oracle", "speceq.calibrate")),
    ],
)
def test_layer_never_imports(importer: str, forbidden: tuple[str, ...]) -> None:
    bad = [
        imp.where()
        for imp in IMPORTS
        if _within(imp.importer, importer) and any(_within(imp.imported, f) for f in forbidden)
    ]
    assert not bad, f"{importer} must not import {forbidden}:\n" + "\n".join(bad)


def test_reports_import_no_torch() -> None:
    """The report renders a saved result: it runs where torch is not installed."""
    bad = [
        imp.where()
        for imp in IMPORTS
        if _within(imp.importer, "speceq.reports") and imp.imported.split(".")[0] in ("torch", "transformers")
    ]
    assert not bad, "\n".join(bad)


def test_private_modules_stay_inside_their_package() -> None:
    """``pkg._name`` is imported only by modules of ``pkg`` (tests and benchmarks may reach in)."""
    bad = []
    for imp in _speceq_imports():
        parts = imp.imported.split(".")
        private = [i for i, part in enumerate(parts) if part.startswith("_") and part != "__main__"]
        if private:
            owner = ".".join(parts[: private[0]])
            if not _within(imp.importer, owner):
                bad.append(imp.where())
    assert not bad, "private modules imported from outside their package:\n" + "\n".join(bad)


def _cycles(prefix: str) -> list[list[str]]:
    """Strongly connected components (size > 1, or a self-import) of the import graph inside ``prefix``."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES if _within(m, prefix)}
    for imp in IMPORTS:
        if imp.importer in graph and imp.imported in graph:
            graph[imp.importer].add(imp.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["speceq.engines", "speceq.stats", "speceq.models", "speceq.calibrate"])
def test_no_import_cycles(package: str) -> None:
    assert _cycles(package) == []


def test_the_cycle_finder_finds_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a made-up import reference -> _speculative_loop -> reference is found."""
    loop = MODULES["speceq.engines._speculative_loop"]
    extra = Import("speceq.engines._speculative_loop", "speceq.engines.reference", loop, 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert ["speceq.engines._speculative_loop", "speceq.engines.reference"] in _cycles("speceq.engines")
