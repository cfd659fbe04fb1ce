"""Docs that cannot drift: the CLI reference is generated from ``--help``, the
format doc names exactly the schema's columns, and the README's example
commands run on the bundled data."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pyarrow as pa
import pytest

from mismatchscope import schema
from tests.helpers import REPO, cli


def test_cli_reference_is_generated_from_help():
    r = subprocess.run([sys.executable, str(REPO / "docs" / "generate_cli.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


_NAMES = {pa.float64(): "float64", pa.float32(): "float32", pa.int64(): "int64", pa.int32(): "int32", pa.string(): "string"}


def _type_name(t: pa.DataType) -> str:
    return f"list<{_type_name(t.value_type)}>" if pa.types.is_list(t) else _NAMES.get(t, str(t))


def test_format_doc_lists_exactly_the_schema_columns():
    text = (REPO / "docs" / "format.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M))
    assert set(rows) == set(schema.COLUMNS), (set(rows) ^ set(schema.COLUMNS))
    for name, col in schema.COLUMNS.items():
        if name in schema.REQUIRED_NAMES and pa.types.is_floating(col.type):
            assert rows[name].strip() == "float32/float64", name  # readers accept both widths
        else:
            assert rows[name].strip() == _type_name(col.type), name


def _readme_examples() -> list[str]:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"<!-- example -->\s*```bash\n(.+?)\n```", text, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_has_examples():
    assert len(_readme_examples()) >= 2


@pytest.mark.parametrize("line", _readme_examples())
def test_readme_example_runs(line, tmp_path):
    args = shlex.split(line)
    assert args[0] == "mismatchscope"
    args = [str(REPO / a) if (REPO / a).exists() and "/" in a else a for a in args[1:]]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "printed nothing"
