"""Fixtures shared by every test module (helpers live in tests/helpers.py)."""

from __future__ import annotations

import pytest

from mismatchscope.schema import write_table


@pytest.fixture
def write(tmp_path):
    """write(columns, name="x.parquet", metadata=None) -> path, through the real schema."""

    def _write(columns: dict, name: str = "pairs.parquet", metadata: dict | None = None):
        return write_table(tmp_path / name, columns, metadata)

    return _write
