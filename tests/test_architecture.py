"""The import direction of docs/explanation/architecture.md, checked on the source files with ast.

Every import counts, also those inside functions and ``if TYPE_CHECKING:`` blocks: a lazy
import is still a dependency. The checks read the repository's folders (``harness/`` is
``speceq``, ``reports/`` is ``speceq.reports``, ``suites/`` is ``speceq.suites``) and import
nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Repository folder -> import name of the package it installs as.
PACKAGE_DIRS: dict[str, str] = {"harness": "speceq", "reports": "speceq.reports", "suites": "speceq.suites"}

#: Layers, lowest first. A module may import its own layer and the layers below, never above.
#: Prefixes match a module and its submodules. ``speceq`` itself (the lazy public API) is the top.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("speceq.errors", "speceq.core")),
    ("models", ("speceq.models",)),
    ("inputs", ("speceq.inputs",)),
    ("engines, store, stats, oracles, verdicts, kernels",
     ("speceq.engines", "speceq.store", "speceq.stats", "speceq.oracles", "speceq.verdicts", "speceq.kernels")),
    ("pipeline", ("speceq.pipeline",)),
    ("reports", ("speceq.reports",)),
    ("power", ("speceq.power",)),
    ("faces", ("speceq.faces", "speceq.suites", "speceq.__main__")),
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
    assert not unplaced, f"add these modules to a layer of LAYERS (and docs/explanation/architecture.md): {unplaced}"


def _upward_imports() -> list[str]:
    upward = []
    for imp in _speceq_imports():
        if imp.imported == "speceq" and imp.importer != "speceq":  # the top package is above every layer
            upward.append(f"{imp.where()}: the top package (the lazy public API) is above every layer; "
                          "import the module that defines the name (speceq.core.package for __version__)")
            continue
        low, high = _layer(imp.imported), _layer(imp.importer)
        if imp.importer != "speceq" and low is not None and high is not None and low > high:
            upward.append(f"{imp.where()}: layer {LAYERS[high][0]!r} imports layer {LAYERS[low][0]!r}")
    return upward


def test_imports_point_down_the_layers() -> None:
    upward = _upward_imports()
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_the_layer_check_finds_an_upward_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a made-up import of the runner by an engine is found."""
    mutants = MODULES["speceq.engines.mutants"]
    extra = Import("speceq.engines.mutants", "speceq.pipeline.runner", mutants, 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert [u for u in _upward_imports() if "speceq.engines.mutants imports speceq.pipeline.runner" in u]


def test_the_layer_check_finds_an_import_of_the_top_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """``from speceq import __version__`` in a layer is upward: the check above sees it."""
    provenance = MODULES["speceq.core.provenance"]
    extra = Import("speceq.core.provenance", "speceq", provenance, 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert [u for u in _upward_imports() if "speceq.core.provenance imports speceq)" in u]


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
        ("speceq.engines", ("speceq.power", "speceq.pipeline", "speceq.verdicts", "speceq.oracles")),
        ("speceq.models", ("speceq.engines", "speceq.oracles", "speceq.pipeline", "speceq.power")),
        ("speceq.reports", ("speceq.engines", "speceq.pipeline", "speceq.oracles", "speceq.power")),
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


def _cycles(prefix: str, *, skip: frozenset[str] | set[str] = frozenset(),
            node: Callable[[str], str] = lambda m: m) -> list[list[str]]:
    """Strongly connected components (size > 1, or a self-import) of the import graph inside ``prefix``.

    ``skip``: modules left out (the lazy top package); ``node``: what a module counts as (itself, or its package).
    """
    graph: dict[str, set[str]] = {node(m): set() for m in MODULES if _within(m, prefix) and m not in skip}
    for imp in IMPORTS:
        if imp.importer in skip or imp.imported in skip or imp.imported not in MODULES:
            continue
        a, b = node(imp.importer), node(imp.imported)
        if a in graph and b in graph and (a != b or imp.importer == imp.imported):
            graph[a].add(b)
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


def _package(module: str) -> str:
    """The top-level subpackage a module belongs to (``speceq.pipeline.collect.worker`` -> ``speceq.pipeline``)."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycles_between_modules() -> None:
    """No module of speceq imports itself through others (``import speceq`` for the version or the lazy API aside)."""
    assert _cycles("speceq", skip={"speceq"}) == []


def test_no_import_cycles_between_packages() -> None:
    """The top-level packages form a directed acyclic graph (so each can be read, tested and moved on its own)."""
    assert _cycles("speceq", skip={"speceq"}, node=_package) == []


def _private_uses() -> list[str]:
    """``from pkg.mod import _name`` and ``mod._name`` where ``mod`` is a speceq module of another package."""
    bad = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if _within(a.name, "speceq") and a.asname:
                        aliases[a.asname] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module and _within(node.module, "speceq"):
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    if target in MODULES:
                        aliases[a.asname or a.name] = target
                    elif a.name.startswith("_") and not a.name.startswith("__") \
                            and _package(node.module) != _package(module):
                        bad.append(f"{path.relative_to(REPO)}:{node.lineno}: imports {node.module}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                    and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = aliases[node.value.id]
                if _package(owner) != _package(module):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: uses {owner}.{node.attr}")
    return bad


def test_no_private_names_across_packages() -> None:
    """A ``_name`` is private to its package: no other package imports it or reads it off a module."""
    bad = _private_uses()
    assert not bad, "private names used from another package:\n" + "\n".join(bad)


def test_the_cycle_finder_finds_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a made-up import reference -> _speculative_loop -> reference is found."""
    loop = MODULES["speceq.engines._speculative_loop"]
    extra = Import("speceq.engines._speculative_loop", "speceq.engines.reference", loop, 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert ["speceq.engines._speculative_loop", "speceq.engines.reference"] in _cycles("speceq.engines")


def test_the_package_cycle_check_finds_a_planted_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package-level check can fail: stats importing the pipeline (which imports stats) is a cycle."""
    extra = Import("speceq.stats.tv", "speceq.pipeline.runner", MODULES["speceq.stats.tv"], 1)
    monkeypatch.setattr(f"{__name__}.IMPORTS", [*IMPORTS, extra])
    assert any("speceq.stats" in c and "speceq.pipeline" in c for c in _cycles("speceq", skip={"speceq"}, node=_package))


def test_the_private_name_check_finds_a_planted_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both forms are found: ``from speceq.oracles.hf import _x`` and ``hf._x`` from another package."""
    planted = tmp_path / "planted.py"
    planted.write_text("from speceq.oracles.hf import _top2_margin\nfrom speceq.oracles import hf\nhf._row_slices\n")
    monkeypatch.setitem(MODULES, "speceq.pipeline.planted", planted)
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    bad = _private_uses()
    assert any("imports speceq.oracles.hf._top2_margin" in b for b in bad)
    assert any("uses speceq.oracles.hf._row_slices" in b for b in bad)


def test_the_kernel_wing_shares_no_module_name_with_the_run_wing() -> None:
    """``kernels/result.py`` beside ``verdicts/result.py`` read as one thing: each name means one thing."""
    kernel_names = {m.rsplit(".", 1)[-1] for m in MODULES if _within(m, "speceq.kernels") and m != "speceq.kernels"}
    other_names = {part for m in MODULES if not _within(m, "speceq.kernels") for part in m.split(".")[1:]}
    shared = sorted(kernel_names & other_names)
    assert not shared, f"kernel-wing modules named like run-wing modules or packages: {shared}"
