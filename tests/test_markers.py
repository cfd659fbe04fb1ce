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
