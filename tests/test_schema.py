"""How a token shard is written: float32 values as float32, LZ4, floats without a dictionary, ids with one."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mismatchscope.schema import write_table
from tests.inputs import report_json


def test_float32_values_are_stored_as_float32_and_read_as_the_same_numbers(tmp_path):
    # -0.5 and -0.25 are float32 values; -0.1 is not (float32's nearest is -0.100000001490116...)
    cols = {
        "sequence_id": [1, 1],
        "position": [0, 1],
        "token_id": [7, 8],
        "sampler_logprob": [-0.5, -0.25],
        "trainer_logprob": [-0.1, -0.25],
        "sampler_topk_ids": [[7, 9], [8, 3]],
        "sampler_topk_logprobs": [[-0.5, -2.0], [-0.25, -np.inf]],
        "trainer_logprobs_at_sampler_topk": [[-0.5, -2.0], [-0.25, -3.0]],
    }
    path = write_table(tmp_path / "t.parquet", cols, {})
    schema = pq.read_schema(path)
    assert schema.field("sampler_logprob").type == pa.float32()
    assert schema.field("trainer_logprob").type == pa.float64()  # one value float32 cannot hold: kept whole
    assert schema.field("sampler_topk_logprobs").type == pa.list_(pa.float32())
    assert pq.read_table(path).column("trainer_logprob").to_pylist() == [-0.1, -0.25]
    as_float64 = tmp_path / "wide.parquet"
    pq.write_table(pa.table({k: pa.array(v) for k, v in cols.items()}), as_float64)
    assert report_json(path)["metrics"] == report_json(as_float64)["metrics"]


def test_columns_are_lz4_floats_without_a_dictionary_ids_with_one(tmp_path):
    cols = {
        "sequence_id": [1, 1],
        "position": [0, 1],
        "token_id": [7, 8],
        "sampler_logprob": [-0.5, -0.25],
        "trainer_logprob": [-0.5, -0.25],
        "sampler_topk_ids": [[7], [8]],
        "sampler_topk_logprobs": [[-0.5], [-0.25]],
    }
    md = pq.ParquetFile(write_table(tmp_path / "t.parquet", cols, {})).metadata.row_group(0)
    chunks = {md.column(i).path_in_schema: md.column(i) for i in range(md.num_columns)}
    for name in ("sampler_logprob", "trainer_logprob", "sampler_topk_logprobs.list.element"):
        assert chunks[name].compression == "LZ4" and "RLE_DICTIONARY" not in chunks[name].encodings, name
    for name in ("sequence_id", "position", "token_id", "sampler_topk_ids.list.element"):
        assert chunks[name].compression == "LZ4" and "RLE_DICTIONARY" in chunks[name].encodings, name
