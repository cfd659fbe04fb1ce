"""A run's MoE route shards as one Arrow table, read through the same checked path as the tokens."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .streaming import _guard, _record_batches


def read_routes(run_dir: Path, columns: list[str] | None = None) -> pa.Table:
    """All of a run's route shards as one table (empty with the layout's columns when there are none).

    Read the way every command reads them: held against the run's index
    (``routing.io.route_shards``), each page's checksum verified, a damaged page an
    error naming the shard and its row group, and a route row written twice
    refused (``routing.io.check_unique_rows``), never counted twice or settled by the last copy.
    """
    from ..routing import layout
    from ..routing.io import KEY_COLUMNS, check_unique_rows, read_meta, route_shards

    paths = route_shards(run_dir)
    if not paths:
        meta = read_meta(run_dir)
        schema = layout.routes_schema(meta.num_experts if meta else 2)
        return schema.empty_table() if columns is None else schema.empty_table().select(columns)
    names = columns if columns is not None else _shard_columns(paths[0])
    read = list(dict.fromkeys([*KEY_COLUMNS, *names]))
    batches = [rb for _, rb in _record_batches(paths, read, 1 << 16)]
    if not batches:  # shards without a row: their own (empty) columns
        return _empty(paths[0], read).select(names)
    table = pa.Table.from_batches(batches)
    check_unique_rows(
        Path(run_dir) / layout.ROUTES,
        [table.column("sequence_id").to_numpy()],
        [table.column("input_position").to_numpy()],
    )
    return table.select(names)


def _empty(path: Path, columns: list[str]) -> pa.Table:
    return _guard(path, lambda: pq.read_schema(path)).empty_table().select(columns)


def _shard_columns(path: Path) -> list[str]:
    return _guard(path, lambda: pq.read_schema(path)).names
