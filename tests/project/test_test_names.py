"""Every test file is named after the module it tests, so a module's tests are found by its name.

``tests/<package>/test_<module>.py`` tests ``mismatchscope/<package>/<module>.py`` (a private ``_<module>.py``
too) or the package ``mismatchscope/<package>/<module>/``; ``tests/test_<module>.py`` a top-level module. A module
with several test files names each ``test_<module>_<what>.py`` (``test_routes_vllm.py``: ``probe/routes.py`` with
the real engine). ``tests/benchmarks/test_<script>.py`` tests ``benchmarks/<script>.py``.

The allow-list is one folder: ``tests/project/``, whose subject is the project itself (docs, README, layers,
wheel, the test markers, these names) and the promises every command keeps (exit codes, nothing left behind, one
read path, tables at 80 columns, the golden lock), which no single module owns. Helpers (``conftest.py``,
``helpers.py``, ``layouts.py``, ...) are not ``test_*.py`` and are not collected, so they need no entry.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO

TESTS = REPO / "tests"
PROJECT_LEVEL = "project"
"""The one folder of tests whose subject is no module (see the module docstring)."""


def _modules(root: Path) -> set[str]:
    """The names a test file may start with in this folder: each module (``_`` of a private one dropped) and each
    sub-package."""
    if not root.is_dir():
        return set()
    names = {p.stem.lstrip("_") for p in root.glob("*.py") if p.stem != "__init__"}
    return names | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}


def _subject(test_file: Path, package: Path) -> str | None:
    """The module ``test_file`` (relative to ``tests/``) names in ``package``, or None."""
    parts = test_file.parent.parts
    root = (
        package.parent.joinpath("benchmarks", *parts[1:]) if parts[:1] == ("benchmarks",) else package.joinpath(*parts)
    )
    name = test_file.stem.removeprefix("test_")
    return next((m for m in sorted(_modules(root)) if name == m or name.startswith(m + "_")), None)


def unnamed_tests(tests: Path = TESTS, package: Path = REPO / "mismatchscope") -> list[str]:
    """The test files under ``tests`` (relative to it) that name no module of ``package``."""
    files = (p.relative_to(tests) for p in tests.rglob("test_*.py"))
    return sorted(str(f) for f in files if f.parts[0] != PROJECT_LEVEL and _subject(f, package) is None)


def test_every_test_file_names_the_module_it_tests():
    unnamed = unnamed_tests()
    assert not unnamed, (
        "test files under tests/ that name no module (tests/<package>/test_<module>[_<what>].py tests "
        "mismatchscope/<package>/<module>.py; a test of the project itself goes to tests/project/):\n  "
        + "\n  ".join(unnamed)
    )


def test_a_file_that_names_no_module_is_found(tmp_path):
    # A stand-in tests/ tree read against the real package: one good name per rule, and three that match nothing.
    for rel in (
        "test_schema.py",  # a top-level module
        "probe/test_routes_vllm.py",  # a module and a qualifier
        "importers/test_jsonl.py",  # the private importers/_jsonl.py
        "probe/test_samplers.py",  # a sub-package
        "diagnose/locate/test_vllm_capture.py",  # a module of a sub-package
        "project/test_anything.py",  # the allow-listed folder
        "probe/test_sampling.py",  # no probe/sampling.py
        "analysis/test_routing.py",  # routing is a top-level package, not analysis/routing
        "probe/test_routesfamilies.py",  # a qualifier needs its underscore
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert unnamed_tests(tmp_path) == [
        "analysis/test_routing.py",
        "probe/test_routesfamilies.py",
        "probe/test_sampling.py",
    ]
