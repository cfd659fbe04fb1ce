"""The package's layers, checked on the source: which module imports which (imports inside functions count:
a lazy import is still a dependency, only a later one).

* Nothing outside ``mismatchscope/cli/`` imports from it: the command line is the top layer, and library
  code that needs one of its helpers means the helper belongs lower down.
* No import runs up the layers of :data:`LAYERS` (docs/architecture.md draws the same table): a package
  imports its own layer or lower ones. A new package takes its place in the table first.
* No circle of imports between packages (``analysis``, ``gate``, ``probe``, ...), nor between the modules of
  one package.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "mismatchscope"
FACADES = {"mismatchscope", "mismatchscope.api", "mismatchscope.__main__"}
"""The top-level names (``__init__``: lazy re-exports, ``api``, ``python -m``) sit above everything: they may
import any layer, and no module of a layer may import them (the version is ``_version``, layer 0)."""


LAYERS: dict[str, int] = {
    # 0: the vocabulary: errors, the file formats, the one divergence primitive
    **dict.fromkeys(
        (
            "_version",
            "errors",
            "checks",
            "redact",
            "rundir",
            "arrow",
            "schema",
            "divergence",
            "bundled",
            "routing",
            "metrics",
            "documents",
            "formatting",
            "progress",
            "terminal",
            "turns",
        ),
        0,
    ),
    # 1: reading inputs, judging output paths, the masking rules, what each side of a run ran
    **dict.fromkeys(("reader", "outputs", "rules", "execution"), 1),
    # 2: the streaming analysis
    "analysis": 2,
    # 3: what the commands compute, each from the analysis or from an engine
    **dict.fromkeys(("gate", "timeline", "importers", "live", "probe", "certify", "doctor", "audit", "view"), 3),
    # 4: experiments that drive several of the above; report's and compare-masks' documents (an analysis with
    # doctor's verdict, the token view and the audit beside it)
    **dict.fromkeys(("diagnose", "reporting"), 4),
    # 5: every output format of the results above: tables, Markdown, JUnit, pictures, pages
    "render": 5,
    # 6: the command line
    "cli": 6,
}
"""package (or top-level module) of ``mismatchscope`` -> its layer."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports (``from .x import y`` is module ``x.y`` when that is one)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # an attribute of a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items() if name not in FACADES}


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def cli_imports() -> set[str]:
    """``importer -> cli module`` for every import of ``mismatchscope.cli`` from outside it."""
    return {
        f"{m} -> {t}" for m, ts in import_graph().items() if _package(m) != "cli" for t in ts if _package(t) == "cli"
    }


def package_cycles() -> list[list[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for m, ts in import_graph().items():
        graph[_package(m)] |= {_package(t) for t in ts if _package(t) != _package(m)}
    return _cycles(graph)


def module_cycles() -> list[list[str]]:
    """Circles of modules inside one package (a circle across packages shows in ``package_cycles``)."""
    graph = import_graph()
    inside = {m: {t for t in ts if _package(t) == _package(m)} for m, ts in graph.items()}
    return _cycles(inside)


def upward_imports() -> set[str]:
    """``importer -> imported`` for every import of a module in a higher layer."""
    graph = import_graph()
    return {
        f"{m} -> {t}"
        for m, ts in graph.items()
        for t in ts
        if LAYERS.get(_package(t), -1) > LAYERS.get(_package(m), 99)
    }


def test_the_graph_sees_the_imports():
    """A check that reads nothing passes forever: the parser must find imports we know are there."""
    graph = import_graph()
    assert "mismatchscope.divergence" in graph["mismatchscope.analysis.engine"]
    assert "mismatchscope.cli.analyse" in graph["mismatchscope.cli.main"]
    assert "mismatchscope.rules.base" in graph["mismatchscope.rules"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_has_a_layer():
    missing = {_package(m) for m in import_graph()} - set(LAYERS)
    assert not missing, f"place {sorted(missing)} in LAYERS (and in docs/architecture.md)"


def test_nothing_outside_cli_imports_it_at_all():
    assert not cli_imports(), sorted(cli_imports())


def facade_imports() -> set[str]:
    """``importer -> face`` for every import of the package face (``mismatchscope``, its ``api``) by a layer."""
    return {f"{m} -> {t}" for m, ts in import_graph().items() for t in ts if t in FACADES}


def test_no_layer_imports_the_package_face():
    assert not facade_imports(), sorted(facade_imports())


def test_no_import_up_the_layers_at_all():
    assert not upward_imports(), sorted(upward_imports())


def test_no_cycle_between_packages_at_all():
    assert not package_cycles(), package_cycles()


def test_no_cycle_between_modules_at_all():
    assert not module_cycles(), module_cycles()
