"""Fixtures shared by every test module (helpers live in tests/helpers.py), and how tests are sorted.

* Every test that needs a real vLLM engine (marker ``vllm``) is also ``slow``: an engine takes 15-30 s to
  start on two cores. ``pytest -m "not slow"`` is the fast lane.
* Under pytest-xdist with ``--dist loadgroup``, tests that share an expensive fixture stay on one worker:
  the in-process engines and the vLLM server (``vllm_sampler``, ``vllm_server``) form one group, and a
  module whose tests share a module-scoped fixture of its own is one group. Everything else spreads test
  by test.
"""

from __future__ import annotations

import pytest

from mismatchscope.schema import write_table

ENGINE_FIXTURES = frozenset({"vllm_sampler", "vllm_server"})
"""Session fixtures holding real engines: one set per worker, so their tests go to one worker."""


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module- or session-scoped fixture its own module declares (not a conftest's)."""
    info = getattr(item, "_fixtureinfo", None)
    module = getattr(item, "module", None)
    if info is None or module is None:
        return False
    for defs in info.name2fixturedefs.values():
        fixturedef = defs[-1]
        if fixturedef.scope in ("module", "session") and getattr(fixturedef.func, "__module__", None) == module.__name__:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("vllm") is not None and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("xdist_group") is not None:
            continue
        if ENGINE_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.xdist_group("vllm-engines"))
        elif _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture
def write(tmp_path):
    """write(columns, name="x.parquet", metadata=None) -> path, through the real schema."""

    def _write(columns: dict, name: str = "pairs.parquet", metadata: dict | None = None):
        return write_table(tmp_path / name, columns, metadata)

    return _write
