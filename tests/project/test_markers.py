"""The fast lane's list of slow tests names tests that exist (a renamed test would silently join the fast lane)."""

from __future__ import annotations

import re

from tests.conftest import SLOW_FIXTURES, SLOW_TESTS
from tests.helpers import REPO


def test_every_listed_slow_test_exists():
    for test_id in SLOW_TESTS:
        path, _, name = test_id.split("[")[0].partition("::")
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), test_id


def test_every_listed_slow_fixture_exists():
    text = "\n".join(p.read_text() for p in (REPO / "tests").rglob("*.py"))
    for name in SLOW_FIXTURES:
        assert re.search(rf"^def {name}\(", text, re.M), name


def test_ci_stops_when_an_engine_is_missing(tmp_path):
    """Under CI=true a broken torch stops the run before any test (exit 1), naming it; without CI it would only
    skip the tests that need it. torch is shadowed by a module that fails to import, as a bad install would."""
    import os
    import subprocess
    import sys

    (tmp_path / "torch.py").write_text('raise ImportError("shadowed")\n')
    env = {**os.environ, "CI": "true", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/project/test_markers.py::test_every_listed_slow_fixture_exists",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "install is incomplete: torch (ImportError: shadowed)" in out.stdout + out.stderr
