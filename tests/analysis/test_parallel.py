"""The pass on several threads: the same numbers on any number of threads, and an error at the first bad batch;
``each``: a few pieces of work queued at once, in order."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.analysis.engine import AnalysisRequest, analyse
from mismatchscope.errors import InputError
from mismatchscope.rules import default_rules, parse_sweep
from tests.helpers import pairs, random_pairs


def test_the_pass_gives_the_same_numbers_on_any_number_of_threads(tmp_path):
    # batches are analysed on worker threads and folded in file order: one thread or four, the report,
    # the rule counts and the chosen examples must be identical, not merely close
    rng = np.random.default_rng(11)
    cols = random_pairs(rng, n_seq=40, max_len=30)
    pq.write_table(pa.table(cols), tmp_path / "p.parquet")
    req = dict(
        report=True,
        masks=True,
        rules=default_rules(),
        sweeps=[parse_sweep("icepop.beta=1.5,3")],
        examples=5,
        batch_rows=37,
    )
    one = analyse(str(tmp_path / "p.parquet"), AnalysisRequest(**req), workers=1)
    four = analyse(str(tmp_path / "p.parquet"), AnalysisRequest(**req), workers=4)
    assert one.report == four.report
    assert one.masks == four.masks
    assert one.warnings == four.warnings


def test_an_error_surfaces_at_the_first_bad_batch_whatever_the_threads(tmp_path):
    # two bad batches: the error reported is the first one's, as a one-thread pass would report it
    cols = pairs([(s, i, 0.5, 0.4) for s in range(1, 9) for i in range(4)])
    cols["trainer_logprob"][13] = 0.5  # sequence 4, position 1
    cols["trainer_logprob"][29] = 0.9  # sequence 8, position 1
    pq.write_table(pa.table(cols), tmp_path / "p.parquet")
    for workers in (1, 4):
        with pytest.raises(InputError, match="positive logprob") as e:
            analyse(str(tmp_path / "p.parquet"), AnalysisRequest(batch_rows=4), workers=workers)
        assert "trainer 0.5 at sequence 4 position 1" in str(e.value)


def test_each_comes_back_in_the_items_order_whichever_finishes_first(monkeypatch):
    # what doctor's causes run on: the first item is the slowest; queued at once, the other thread reads the rest
    # meanwhile, and the results still come back in the items' order; an error is raised, not lost
    import threading
    import time

    from mismatchscope.analysis.parallel import each

    monkeypatch.setenv("MISMATCHSCOPE_THREADS", "2")
    threads: set[str] = set()

    def read(x: int) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(0.05 if x == 0 else 0.0)
        return x * x

    assert each(read, range(6)) == [0, 1, 4, 9, 16, 25] and len(threads) == 2

    def fails(x: int) -> int:
        raise ValueError(f"item {x}")

    with pytest.raises(ValueError, match="item 0"):
        each(fails, [0, 1])
    monkeypatch.setenv("MISMATCHSCOPE_THREADS", "1")
    threads.clear()
    assert each(read, range(3)) == [0, 1, 4] and threads == {threading.current_thread().name}
