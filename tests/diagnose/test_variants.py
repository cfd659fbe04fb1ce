"""Variant matrices: a file that cannot be read as the matrix it claims to be is refused in one line."""

from __future__ import annotations

import pytest

from mismatchscope.errors import UsageError


def test_a_matrix_file_that_is_not_utf8(tmp_path):
    from mismatchscope.diagnose.variants import load_matrix

    path = tmp_path / "m.toml"
    path.write_bytes(b'[variant.a]\n"sampler.dtype" = "\xff"\n')
    with pytest.raises(UsageError, match=r"m.toml is not UTF-8 text \(byte 0xff at offset 31\)"):
        load_matrix(path)
