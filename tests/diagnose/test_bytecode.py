"""The sampler processes' shared bytecode cache: only where each would compile from source, gone afterwards.

A stand-in package in a temporary folder plays vLLM (its installed bytecode, or the lack of it, decides).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import sys

import pytest

from mismatchscope.diagnose import bytecode


@pytest.fixture
def package(tmp_path, monkeypatch):
    """An importable package without compiled bytecode, as the decisive module."""
    pkg = tmp_path / "src" / "standin_engine"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    monkeypatch.setattr(bytecode, "PROBE_MODULES", ("not_installed_anywhere", "standin_engine"))
    return pkg


def test_only_where_a_new_interpreter_would_compile_from_source(package):
    env = {"PYTHONDONTWRITEBYTECODE": "1"}
    assert bytecode.compiles_each_time(env)
    assert not bytecode.compiles_each_time({})  # Python writes bytecode: the first process leaves it
    assert not bytecode.compiles_each_time({**env, "PYTHONPYCACHEPREFIX": "elsewhere"})  # the caller's own cache
    compileall.compile_dir(str(package), quiet=1)
    assert not bytecode.compiles_each_time(env)  # installed with its bytecode


def test_the_cache_is_shared_by_child_processes_and_removed_afterwards(package, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    own = sys.pycache_prefix, sys.dont_write_bytecode
    with bytecode.shared_bytecode():
        folder = os.environ["PYTHONPYCACHEPREFIX"]
        assert "PYTHONDONTWRITEBYTECODE" not in os.environ and sys.pycache_prefix == folder
        code = "import standin_engine"
        env = {**os.environ, "PYTHONPATH": str(package.parent)}
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        written = [name for _, _, names in os.walk(folder) for name in names]
        assert any(name.startswith("__init__.") and name.endswith(".pyc") for name in written)
        assert not (package / "__pycache__").exists()  # nothing beside the sources
    assert not os.path.exists(folder)
    assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1" and "PYTHONPYCACHEPREFIX" not in os.environ
    assert (sys.pycache_prefix, sys.dont_write_bytecode) == own


def test_an_error_inside_still_removes_the_cache(package, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    with pytest.raises(KeyboardInterrupt), bytecode.shared_bytecode():
        folder = os.environ["PYTHONPYCACHEPREFIX"]
        raise KeyboardInterrupt
    assert not os.path.exists(folder) and os.environ["PYTHONDONTWRITEBYTECODE"] == "1"


def test_nothing_changes_where_bytecode_is_written(package, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    before = dict(os.environ)
    with bytecode.shared_bytecode():
        assert dict(os.environ) == before
