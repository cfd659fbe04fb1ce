"""The shared shard writer, and imported output read back by the project's reader."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.errors import ImportFormatError
from mismatchscope.importers import IMPORTERS, import_run, importer_class
from mismatchscope.importers._writer import ShardWriter
from mismatchscope.reader import Hygiene, iter_batches, open_source
from mismatchscope.schema import decode_metadata

from .layouts import nemo_sample, prime_record, write_nemo_step, write_prime_step


def seq(n, start=0.0):
    return {
        "token_id": np.arange(n),
        "sampler_logprob": np.full(n, start - 0.5),
        "trainer_logprob": np.full(n, start - 0.25),
        "step": 1,
    }


def test_shards_flush_at_the_budget_and_sequences_may_straddle_them(tmp_path):
    w = ShardWriter(tmp_path, ("step",), {"source": {"format": "x"}}, flush_tokens=4)
    assert w.add_sequence("a.jsonl", seq(3)) == 0
    assert w.add_sequence("b.jsonl", seq(3)) == 1  # 1 token in shard 0, 2 in shard 1
    assert w.add_sequence("b.jsonl", seq(1)) == 2
    shards = w.close()
    assert [p.name for p in shards] == ["part-00000.parquet", "part-00001.parquet"]
    first, second = (pq.read_table(p).to_pydict() for p in shards)
    assert first["sequence_id"] == [0, 0, 0, 1] and first["position"] == [0, 1, 2, 0]
    assert second["sequence_id"] == [1, 1, 2] and second["position"] == [1, 2, 0]
    metas = [decode_metadata(pq.read_schema(p).metadata) for p in shards]
    assert metas[0]["source"] == {"format": "x", "files": ["a.jsonl", "b.jsonl"]}
    assert metas[1]["source"]["files"] == ["b.jsonl"]


def test_a_failed_import_leaves_no_manifest(tmp_path):
    good = nemo_sample([1], [5, 6], [-0.2, -0.3], [-0.2, -0.3], 0.0, 1.0)
    write_nemo_step(tmp_path / "logs", 1, [good] * 3)
    write_nemo_step(tmp_path / "logs", 2, [good], raw_lines={1: "{broken"})
    with pytest.raises(ImportFormatError, match="malformed JSON"):
        import_run("nemo-rl", tmp_path / "logs", tmp_path / "out", flush_tokens=2)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_imported_output_reads_back_through_the_project_reader(tmp_path):
    write_nemo_step(
        tmp_path / "nemo", 1, [nemo_sample([1, 2], [5, 6, 7], [-0.1, -0.2, -0.3], [-0.1, -0.25, -0.3], 0.5, 1.0)]
    )
    write_prime_step(
        tmp_path / "prime",
        1,
        0,
        [prime_record([1], [5, 6], [-0.1, -0.2], [-0.1, -0.3], 0.5, 1.0, step=1, rank=0, idx=0)],
    )
    # nemo: 3 response tokens, all in the loss mask; prime: 2 response tokens
    for fmt, src, n_tokens in (("nemo-rl", "nemo", 3), ("prime-rl", "prime", 2)):
        import_run(fmt, tmp_path / src, tmp_path / f"out-{fmt}")
        source = open_source(tmp_path / f"out-{fmt}")
        assert {"advantage", "reward", "step"} <= source.available
        assert source.run_config["source"]["format"] == fmt
        batches = list(iter_batches(source, ["advantage", "step"], Hygiene()))
        assert sum(len(b["token_id"]) for b in batches) == n_tokens


def test_every_registered_format_has_a_layout_hint_and_docs(tmp_path):
    from mismatchscope.importers import describe

    docs = (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs" / "import.md").read_text()
    for fmt in IMPORTERS:
        assert describe(fmt)
        assert f"`{fmt}`" in docs, fmt
        assert importer_class(fmt).__name__ == IMPORTERS[fmt].importer.split(":")[1]  # every entry loads


def test_the_command_line_lists_exactly_the_registered_formats():
    # read from the registry, so a new importer is one entry there: the formats, and the help's summary
    from mismatchscope.cli.importer import FORMATS, import_

    assert FORMATS == tuple(IMPORTERS) and {"nemo-rl", "skyrl", "jsonl", "parquet"} <= set(FORMATS)
    assert all(spec.title in (import_.__doc__ or "") for spec in IMPORTERS.values())


def test_manifest_counts_match_the_result(tmp_path):
    write_nemo_step(tmp_path / "logs", 1, [nemo_sample([1], [5, 6], [-0.2, -0.3], [-0.2, -0.3], 0.0, 1.0)] * 2)
    result = import_run("nemo-rl", tmp_path / "logs", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    for key in (
        "sequences",
        "tokens_written",
        "tokens_dropped_by_mask",
        "bad_records_skipped",
        "files_read",
        "steps",
        "shards",
    ):
        assert manifest["counts"][key] == getattr(result, key)
    assert result.to_dict()["out"] == str(tmp_path / "out")


@pytest.mark.parametrize("unit_bytes", [1, 7, 40, 1000])
def test_units_own_every_line_exactly_once(tmp_path, unit_bytes):
    from mismatchscope.importers._base import SourceFile
    from mismatchscope.importers._jsonl import _lines, split_units

    path = tmp_path / "x.jsonl"
    lines = [b"{}\n", b"\n", b'{"a": [1, 2, 3]}\n', b"{}\n" * 3, b'{"last": "no newline"}']
    path.write_bytes(b"".join(lines))
    f = SourceFile(path=path, rel="x.jsonl")
    got = [raw for s, e in split_units(f, unit_bytes) for raw in _lines(path, s, e)]
    assert b"".join(got) == path.read_bytes()
    assert len(got) == len(path.read_bytes().splitlines())


def test_progress_is_called_once_per_file_in_order(tmp_path):
    good = nemo_sample([1], [5, 6], [-0.2, -0.3], [-0.2, -0.3], 0.0, 1.0)
    for step in (1, 2, 3):
        write_nemo_step(tmp_path / "logs", step, [good])
    calls = []
    import_run(
        "nemo-rl",
        tmp_path / "logs",
        tmp_path / "out",
        progress=lambda done, total, path: calls.append((done, total, path.name)),
    )
    assert calls == [
        (1, 3, "train_data_step1.jsonl"),
        (2, 3, "train_data_step2.jsonl"),
        (3, 3, "train_data_step3.jsonl"),
    ]
