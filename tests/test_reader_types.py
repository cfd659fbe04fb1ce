"""The reader takes each column's kind from the schema: every integer column comes back as int64, and a file
holding floats in one is refused, whichever column it is (``rank`` included)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import InputError
from mismatchscope.reader import Hygiene, iter_batches, open_source
from mismatchscope.schema import COLUMNS
from tests.helpers import cli, pairs

INTEGER_COLUMNS = [name for name, col in COLUMNS.items() if pa.types.is_integer(col.type)]


def test_the_schema_has_the_integer_columns_we_expect():
    assert {"sequence_id", "position", "token_id", "step", "rank"} <= set(INTEGER_COLUMNS)


def test_every_integer_column_is_read_as_int64(write):
    cols = pairs([(1, 0, 0.5, 0.4), (1, 1, 0.6, 0.6), (2, 0, 0.9, 0.8)])
    cols.update({name: [3, 4, 5] for name in INTEGER_COLUMNS if name not in cols})
    source = open_source(write(cols))
    (batch,) = iter_batches(source, INTEGER_COLUMNS, Hygiene())
    for name in INTEGER_COLUMNS:
        assert batch[name].dtype == np.int64, name
    assert batch["rank"].tolist() == [3, 4, 5]


def test_a_float_rank_column_is_refused(tmp_path):
    table = pa.table({**pairs([(1, 0, 0.5, 0.4), (1, 1, 0.6, 0.6)]), "step": [0, 1], "rank": [0.0, 1.5]})
    path = tmp_path / "float-rank.parquet"
    pq.write_table(table, path)
    with pytest.raises(InputError, match="column 'rank' must hold integers, found double"):
        list(iter_batches(open_source(path), ["rank"], Hygiene()))
    # the commands say it in one line, exit 2: before, timeline --by rank truncated 1.5 to rank 1
    r = cli("timeline", str(path), "--by", "rank")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "'rank' must hold integers" in r.stderr, r.stderr
