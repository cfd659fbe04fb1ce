"""doctor's list sub-sample in a run with summaries: the two top-k logprob lists are decoded only in the row groups
it is drawn from, groups spread evenly over the files; a file small enough to need every group reads them all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from mismatchscope.analysis.engine import AnalysisRequest, run_plan
from mismatchscope.analysis.summaries import write_token_shard
from mismatchscope.doctor.run import sampled_pass
from mismatchscope.doctor.sample import TOPK, list_groups
from mismatchscope.reader import open_source, read_batches
from mismatchscope.reader.streaming import SomeGroups, group_rows
from mismatchscope.schema import WRITE_OPTIONS
from tests.analysis.test_summaries import _pairs
from tests.helpers import REPO


def _grouped(tmp_path: Path, name: str, group_rows_: int, n_seq: int = 200) -> Path:
    """A run's shard (summaries beside the lists) of ``n_seq`` 20-token sequences, in row groups of
    ``group_rows_`` rows."""
    one = write_token_shard(tmp_path / f"{name}-one.parquet", _pairs(n_seq=n_seq, length=20), {})
    path = tmp_path / f"{name}.parquet"
    pq.write_table(pq.read_table(one), path, row_group_size=group_rows_, **WRITE_OPTIONS)
    one.unlink()
    return path


def test_the_groups_by_hand():
    # two files of five 100-row groups: 1,000 rows. The sample keeps cap / rows = 200 / 1000 of them, so the list
    # sub-sample's 50 rows lie in 50 * 1000 / 200 = 250 rows: one group (the 6th) holds 100, two evenly spaced
    # (the 3rd and 8th) 200, three (the 2nd, 6th and 9th: int((j + 0.5) * 10 / 3)) 300 >= 250
    a, b = Path("a.parquet"), Path("b.parquet")
    groups = [(f, i, 100) for f in (a, b) for i in range(5)]
    chosen = list_groups(groups, cap=200, list_cap=50)
    assert chosen == (frozenset({(a, 1), (b, 0), (b, 3)}), 300)
    # a file whose list sub-sample needs every row (40 rows, 50 wanted), or of one group: every group
    assert list_groups([(a, 0, 20), (a, 1, 20)], cap=200, list_cap=50) is None
    assert list_groups([(a, 0, 100_000)], cap=200, list_cap=50) is None


def test_the_listed_columns_are_decoded_only_in_the_chosen_groups(tmp_path):
    path = _grouped(tmp_path, "g", 800)  # 4,000 rows: five groups
    source = open_source(str(path))
    only = SomeGroups(TOPK, frozenset({(path, 2)}))
    seen = {}
    for raw in read_batches(source, ["advantage", *TOPK], batch_rows=1 << 16, only=only):
        first = int(raw.record_batch.column(raw.wanted.index("sequence_id"))[0].as_py())
        seen[first // 40] = (tuple(raw.wanted), raw.record_batch.num_columns)
    assert sorted(seen) == [0, 1, 2, 3, 4]  # every group read, in order (40 sequences of 20 tokens a group)
    for group, (wanted, n_cols) in seen.items():
        assert (set(TOPK) <= set(wanted)) is (group == 2) and n_cols == len(wanted), (group, wanted)
        assert "advantage" in wanted


def test_the_list_sub_sample_comes_from_the_chosen_groups(tmp_path):
    """200 sequences of 20 tokens in ten 400-row groups; a sample of about 2,000 rows and a list sub-sample of
    about 200: those 200 rows lie in 200 * 4000 / 2000 = 400 rows, one group, the 6th (rows 2,000-2,399:
    sequences 100-119). Every row that kept its lists is there, with its own lists' values."""
    path = _grouped(tmp_path, "g", 400)
    plan, collector = sampled_pass(str(path), AnalysisRequest(report=True, masks=False), None, cap=2000, list_cap=200)
    assert plan.only_in is not None and plan.only_in.groups == frozenset({(path, 5)})
    # the hash inside the group keeps 200 of its 400 rows: the sample's own share, every sample row there
    assert set(plan.only_in.columns) == set(TOPK) and collector.list_threshold == collector.threshold == 1 << 31
    run_plan(plan, sink=collector.sink())
    s = collector.finish()
    assert s.lists is not None
    has = s.columns["list_row"] >= 0
    seqs = np.unique(s.columns["sequence_id"][has])
    assert seqs.size and seqs.min() >= 100 and seqs.max() <= 119
    assert np.unique(s.columns["sequence_id"]).size > 2 * seqs.size  # the sample itself spans the file
    # the kept rows' listed values are the file's own (float32 widened)
    table = pq.read_table(path, columns=["sequence_id", "position", *TOPK])
    key = table.column("sequence_id").to_numpy() * 100 + table.column("position").to_numpy()
    rows = np.flatnonzero(has)
    x, y, owner = s.row_lists(rows)
    at = np.searchsorted(key, s.columns["sequence_id"][owner] * 100 + s.columns["position"][owner])
    lists_y = table.column(TOPK[0]).combine_chunks()
    want = np.concatenate([np.asarray(lists_y[int(i)].values, dtype=np.float64) for i in np.unique(at)])
    assert np.array_equal(y, want)
    assert x.size == y.size


def test_a_one_group_file_reads_every_list(tmp_path):
    path = _grouped(tmp_path, "one", 1 << 20)
    plan, collector = sampled_pass(str(path), AnalysisRequest(report=True, masks=False), None, cap=2000, list_cap=200)
    assert plan.only_in is None
    run_plan(plan, sink=collector.sink())
    s = collector.finish()
    seqs = np.unique(s.columns["sequence_id"][s.columns["list_row"] >= 0])
    assert seqs.size > 5 and seqs.max() - seqs.min() > 100  # about 200 rows, drawn from the whole file


def test_the_bundled_runs_read_every_group():
    """Their doctor output stays what it was: no bundled run is large enough to choose groups."""
    for tokens in (REPO / "sample_data").glob("**/*.parquet"):
        if "routes" in tokens.parts:
            continue
        groups = group_rows([tokens])
        assert list_groups(groups) is None, tokens


def _doctor(path: Path, monkeypatch, groups: bool):
    """doctor's document at a scaled-down sample (4,000 rows, lists on 1,000), its lists from chosen groups or,
    ``groups`` False, from every group by the hash alone (as before groups were chosen)."""
    from mismatchscope.doctor import run as doctor_run

    if not groups:
        monkeypatch.setattr(doctor_run, "list_groups", lambda *a, **k: None)
    plan, collector = sampled_pass(str(path), AnalysisRequest(report=True, masks=False), None, cap=4000, list_cap=1000)
    assert (plan.only_in is not None) is groups
    monkeypatch.undo()
    return doctor_run.examine_result(run_plan(plan, sink=collector.sink()), collector.finish())


def test_the_rival_fits_name_the_same_cause_from_the_chosen_groups(tmp_path, monkeypatch):
    """A sampler at temperature 0.7 and one writing log2: the rival fits (a temperature against a log base) read
    the listed values; drawn from three of ten groups, they name the same cause, with the same verdict, as
    drawn from every group."""
    from tests.doctor.runs import clean_columns, in_base, make, tempered

    rng = np.random.default_rng(3)
    base = make(11, sequences=200, length=40)
    runs = {"temperature": clean_columns(tempered(base, 0.7, rng)), "log_base": in_base(clean_columns(base), 2.0)}
    for cause, cols in runs.items():
        listed = {c: v.tolist() if isinstance(v, np.ndarray) and v.ndim == 2 else v for c, v in cols.items()}
        one = write_token_shard(tmp_path / f"{cause}-one.parquet", listed, {})
        path = tmp_path / f"{cause}.parquet"
        pq.write_table(pq.read_table(one), path, row_group_size=800, **WRITE_OPTIONS)  # 8,000 rows: ten groups
        one.unlink()
        chosen, every = _doctor(path, monkeypatch, True), _doctor(path, monkeypatch, False)
        assert chosen.top.cause == every.top.cause == cause, (cause, chosen.top.cause, every.top.cause)
        assert chosen.verdict == every.verdict
        rival = {"temperature": "log_base", "log_base": "temperature"}[cause]
        assert [r.cause for r in chosen.top.rivals] == [r.cause for r in every.top.rivals]
        assert rival in [r.cause for r in chosen.top.rivals], chosen.top.rivals
        assert [f.cause for f in chosen.findings if f.status == "detected"] == [
            f.cause for f in every.findings if f.status == "detected"
        ]


def test_rows_picked_on_the_pass_threads_make_the_sample_picked_in_order(tmp_path):
    """doctor picks each batch's rows on the worker thread that analysed it (the collector as the pass's sink):
    the sample, its list rows numbered across batches included, is the one ``on_terms`` builds batch by batch on
    the calling thread. Ten 400-row groups in 100-row batches: forty batches on two threads."""
    path = _grouped(tmp_path, "g", 400)
    samples = []
    for as_sink in (False, True):
        request = AnalysisRequest(report=True, masks=False, batch_rows=100)
        plan, collector = sampled_pass(str(path), request, None, cap=2000, list_cap=200)
        if as_sink:
            run_plan(plan, workers=2, sink=collector.sink())
        else:
            run_plan(plan, on_terms=lambda _terms, batch: collector.take(collector.pick(batch)), workers=1)
        samples.append(collector.finish())
    a, b = samples
    assert a.rows_seen == b.rows_seen == 4000 and len(a) == len(b) > 0
    assert a.columns.keys() == b.columns.keys()
    for name in a.columns:
        assert np.array_equal(a.columns[name], b.columns[name]), name
    assert a.lists is not None and b.lists is not None and (a.columns["list_row"] >= 0).sum() > 0
    for got, want in ((b.lists.x, a.lists.x), (b.lists.y, a.lists.y), (b.lists.offsets, a.lists.offsets)):
        assert np.array_equal(got, want)


def test_the_quantiles_second_pass_reads_the_report_columns_alone(tmp_path, monkeypatch):
    """A file too large to keep every value of its quantile columns (``KEEP_VALUES`` made small) is read a second
    time for report's exact quantiles; that pass decodes report's own columns, none of those a caller added (doctor's
    per-row sums, the ids, the lists: what report's doctor line adds to report's pass), and the report and the
    examination are the ones a file small enough for one pass gives. doctor itself keeps no quantile (its pass is
    a headline pass), so it reads the file once."""
    from mismatchscope.analysis import engine, quantiles
    from mismatchscope.doctor import doctor
    from mismatchscope.doctor.run import examine_result
    from mismatchscope.documents import to_json
    from mismatchscope.schema import ROW_SUMS

    path = _grouped(tmp_path, "g", 400)

    def full_pass() -> tuple[object, object]:
        """report's whole pass with doctor's sample (what report's doctor line runs): its report and document."""
        plan, collector = sampled_pass(str(path), AnalysisRequest(report=True, masks=False), None)
        result = run_plan(plan, sink=collector.sink())
        return to_json(result.report), to_json(examine_result(result, collector.finish()))

    kept, kept_full = to_json(doctor(str(path))), full_pass()
    reads: list[list[str]] = []
    real = engine.read_batches
    monkeypatch.setattr(
        engine, "read_batches", lambda source, cols, *a, **k: (reads.append(cols), real(source, cols, *a, **k))[1]
    )
    monkeypatch.setattr(quantiles, "KEEP_VALUES", 100)
    assert to_json(doctor(str(path))) == kept
    assert len(reads) == 1 and set(ROW_SUMS) <= set(reads[0])  # one pass, no second one for quantiles
    reads.clear()
    assert full_pass() == kept_full  # the quantiles refilled: the report and the examination as in one pass
    assert len(reads) == 2 and set(ROW_SUMS) <= set(reads[0])  # the pass, then the quantiles' second pass
    assert not set(reads[1]) & {*ROW_SUMS, *TOPK, "token_id"}, reads[1]
