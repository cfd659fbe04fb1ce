"""The top-k summaries: written once by every writer, the same numbers as the lists, and held against them."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mismatchscope.analysis.engine import AnalysisRequest, analyse, make_plan, run_plan
from mismatchscope.analysis.plan import LISTS_NOTE, TopkRead
from mismatchscope.analysis.summaries import CHECK_ROWS, add_summaries, write_token_shard
from mismatchscope.analysis.topk import score_centering, topk_bounds
from mismatchscope.divergence import token_terms
from mismatchscope.documents import document
from mismatchscope.schema import ROW_SUMS, SUMMARY_NAMES, WRITE_OPTIONS, write_table
from tests.helpers import cli
from tests.inputs import error_line, one_sequence, topk_lists


def _hand_pair() -> dict:
    """One token, id 1 sampled and listed: the sampler lists ids [1, 2] with q = [0.5, 0.3], the trainer gives
    them p = [0.4, 0.4]."""
    cols = one_sequence(1)
    cols["token_id"] = [1]
    cols["sampler_logprob"], cols["trainer_logprob"] = [math.log(0.5)], [math.log(0.4)]
    cols["sampler_topk_ids"] = [[1, 2]]
    cols["sampler_topk_logprobs"] = [[math.log(0.5), math.log(0.3)]]
    cols["trainer_logprobs_at_sampler_topk"] = [[math.log(0.4), math.log(0.4)]]
    return cols


def test_the_summaries_of_one_token_by_hand(tmp_path):
    # K = {1, 2}; rest buckets: sampler 1 - 0.8 = 0.2, trainer 1 - 0.8 = 0.2.
    # TV = 0.5 (|0.4 - 0.5| + |0.4 - 0.3| + |0.2 - 0.2|) = 0.1
    # KL = 0.5 log(0.5/0.4) + 0.3 log(0.3/0.4) + 0.2 log(0.2/0.2) = 0.111572 - 0.086305 = 0.025267
    # doctor's sums over x = log p = [log 0.4, log 0.4], y = log q = [log 0.5, log 0.3]:
    # n = 2; sum x = -1.832581; sum y = -1.897120; sum x^2 = 2 (0.916291)^2 = 1.679178;
    # sum xy = 0.916291 (0.693147 + 1.203973) = 1.738314; sum y^2 = 0.480453 + 1.449551 = 1.930004; cut 0
    path = write_token_shard(tmp_path / "t.parquet", _hand_pair(), {})
    row = {
        k: v[0] for k, v in pq.read_table(path, columns=list(SUMMARY_NAMES[:4]) + list(ROW_SUMS)).to_pydict().items()
    }
    expected = {
        "topk_tv_lower": 0.1,
        "topk_kl_lower": 0.025267,
        "topk_sampler_rest": 0.2,
        "topk_trainer_rest": 0.2,
        "topk_pairs": 2,
        "topk_sum_trainer": -1.832581,
        "topk_sum_sampler": -1.897120,
        "topk_sum_trainer_sq": 1.679178,
        "topk_sum_product": 1.738314,
        "topk_sum_sampler_sq": 1.930004,
        "topk_cut": 0,
    }
    for name, want in expected.items():
        assert row[name] == pytest.approx(want, abs=2e-6), name
    assert pq.read_schema(path).field("topk_tv_lower").type == pa.float32()
    assert "topk_id_overlap" not in pq.read_schema(path).names  # no trainer_topk_ids: nothing to overlap with


def _pairs(n_seq: int = 40, length: int = 50, k: int = 4, seed: int = 0) -> dict:
    """Random pairs with top-k lists of every kind the bounds meet: the sampled id listed or not, a trainer that
    gives a listed id -inf (a kept set), masses past 1, the trainer's own ids."""
    rng = np.random.default_rng(seed)
    n = n_seq * length
    lq = -rng.exponential(0.8, n)
    lp = np.minimum(lq + rng.normal(0, 0.05, n), 0.0)
    top = np.sort(-rng.exponential(2.0, (n, k)), axis=1)[:, ::-1]
    at = np.minimum(top + rng.normal(0, 0.05, (n, k)), 0.0)
    top[::17, -1] = -np.inf  # the sampler cut the last listed id
    ids = rng.integers(0, 50, (n, k))
    ids[::3, 0] = tok = rng.integers(0, 50, n)[::3]
    token_id = rng.integers(0, 50, n)
    token_id[::3] = tok
    return {
        "sequence_id": np.repeat(np.arange(n_seq), length),
        "position": np.tile(np.arange(length, dtype=np.int32), n_seq),
        "token_id": token_id,
        "sampler_logprob": lq,
        "trainer_logprob": lp,
        "advantage": np.repeat(rng.normal(0, 1, n_seq), length),
        "sampler_topk_ids": ids.tolist(),
        "sampler_topk_logprobs": top.tolist(),
        "trainer_logprobs_at_sampler_topk": at.tolist(),
        "trainer_topk_ids": rng.integers(0, 50, (n, k)).tolist(),
    }


def test_every_summary_is_the_float32_of_what_the_lists_give(tmp_path):
    cols = _pairs()
    table = pq.read_table(write_token_shard(tmp_path / "t.parquet", cols, {}))
    lq, lp = np.asarray(cols["sampler_logprob"]), np.asarray(cols["trainer_logprob"])
    t = token_terms(lp, lq)
    b = topk_bounds(
        np.asarray(cols["token_id"]),
        lq,
        lp,
        table.column("sampler_topk_ids").combine_chunks(),
        table.column("sampler_topk_logprobs").combine_chunks(),
        table.column("trainer_logprobs_at_sampler_topk").combine_chunks(),
        probs=(t.q_T, t.p_T),
    )
    overlap = score_centering(b, table.column("sampler_topk_ids").combine_chunks(), table["trainer_topk_ids"])
    expected = {
        "topk_tv_lower": b.tv_lower_T,
        "topk_kl_lower": b.kl_lower_T,
        "topk_sampler_rest": 1.0 - b.sampler_mass_T,
        "topk_trainer_rest": 1.0 - b.trainer_mass_T,
        "topk_id_overlap": overlap.overlap_T,
    }
    for name, v in expected.items():
        stored = table.column(name).to_numpy()
        assert stored.dtype == np.float32
        assert np.array_equal(stored, v.astype(np.float32), equal_nan=True), name
    y = np.asarray(cols["sampler_topk_logprobs"])
    x = np.asarray(cols["trainer_logprobs_at_sampler_topk"])
    both = np.isfinite(x) & np.isfinite(y)
    xb, yb = np.where(both, x, 0.0), np.where(both, y, 0.0)
    sums = {
        "topk_pairs": both.sum(axis=1),
        "topk_sum_trainer": xb.sum(axis=1),
        "topk_sum_sampler": yb.sum(axis=1),
        "topk_sum_trainer_sq": (xb * xb).sum(axis=1),
        "topk_sum_product": (xb * yb).sum(axis=1),
        "topk_sum_sampler_sq": (yb * yb).sum(axis=1),
        "topk_cut": (np.isneginf(y) & np.isfinite(x)).sum(axis=1),
    }
    for name, v in sums.items():
        stored = table.column(name).to_numpy()
        assert np.array_equal(stored, v.astype(stored.dtype)), name
    assert table.column("topk_cut").to_numpy().sum() == len(cols["token_id"][::17])


def _document(path, **request) -> str:
    result = analyse(str(path), AnalysisRequest(report=True, **request))
    return json.dumps(document(result.report))


def test_the_report_from_the_summaries_is_the_report_from_the_lists_to_the_bit(tmp_path):
    """Decoding the lists of a run that has summaries gives the summaries' numbers: the per-token values are
    rounded to float32 as the writer stored them, then the same arithmetic follows."""
    path = write_token_shard(tmp_path / "t.parquet", _pairs(), {})
    summaries, lists = _document(path), _document(path, topk_lists=True)
    assert summaries == lists
    plan = make_plan(str(path), AnalysisRequest(report=True))
    assert plan.topk is TopkRead.SUMMARIES
    assert not {"token_id", "sampler_topk_ids", "sampler_topk_logprobs"} & set(plan.columns + plan.required)
    assert make_plan(str(path), AnalysisRequest(report=True, topk_lists=True)).topk is TopkRead.LISTS_ROUNDED


def test_doctor_from_the_summaries_is_doctor_from_the_lists_to_the_bit(tmp_path):
    """doctor reads the two logprob lists either way (its rival fits read a sub-sample's listed values); its
    per-row sums are the summaries', checked against the lists on every row when the lists are asked for."""
    from mismatchscope.doctor.run import examine_result, sampled_pass

    path = write_token_shard(tmp_path / "t.parquet", _pairs(), {})
    docs = []
    for lists in (False, True):
        plan, collector = sampled_pass(str(path), AnalysisRequest(report=True, topk_lists=lists), None)
        assert plan.row_sums and "sampler_topk_logprobs" in plan.columns
        assert plan.topk is (TopkRead.LISTS_ROUNDED if lists else TopkRead.SUMMARIES)
        docs.append(json.dumps(document(examine_result(run_plan(plan, sink=collector.sink()), collector.finish()))))
    assert docs[0] == docs[1]


def test_a_run_written_before_the_summaries_reads_its_lists_and_says_so_on_the_terminal_only(tmp_path):
    cols = _pairs()
    old = write_table(tmp_path / "old.parquet", cols, {})
    assert make_plan(str(old), AnalysisRequest(report=True)).topk is TopkRead.LISTS
    r = cli("report", str(old), "--format", "json")
    assert r.returncode == 0 and r.stderr == f"note: {LISTS_NOTE}\n", r.stderr
    assert LISTS_NOTE not in r.stdout
    d = cli("doctor", str(old), "--format", "json")
    assert d.stderr.endswith(f"note: {LISTS_NOTE}\n") and LISTS_NOTE not in d.stdout
    new = write_token_shard(tmp_path / "new.parquet", cols, {})
    assert cli("report", str(new), "--format", "json").stderr == ""
    # compare-masks reads no top-k column: nothing to say
    assert cli("compare-masks", str(old), "--format", "json").stderr == ""


def _tampered(tmp_path, row: int, name: str, value: float):
    """A shard with its summaries, then one summary value of ``row`` changed (and written back, checksums and all)."""
    table = pq.read_table(write_token_shard(tmp_path / "w.parquet", _pairs(n_seq=50, length=100), {}))
    v = table.column(name).to_numpy().copy()
    v[row] = value
    table = table.set_column(table.schema.get_field_index(name), name, pa.array(v, pa.float32()))
    path = tmp_path / "t.parquet"
    pq.write_table(table, path, **WRITE_OPTIONS)
    return path


def test_a_summary_that_disagrees_with_its_lists_is_refused_naming_the_shard(tmp_path):
    path = _tampered(tmp_path, 3, "topk_kl_lower", 0.5)
    for command in ("report", "doctor"):
        line = error_line(cli(command, str(path)))
        assert line.startswith(
            f"error: {path}: its top-k summaries disagree with its top-k lists: topk_kl_lower 0.5 at sequence 0 "
            "position 3 is where its lists give "
        ), line


def test_a_summary_out_of_its_range_is_refused_wherever_it_lies(tmp_path):
    """Row 4,321 lies past the rows checked against the lists: its range gives it away."""
    assert 4321 > CHECK_ROWS
    path = _tampered(tmp_path, 4321, "topk_tv_lower", 1.5)
    for command in ("report", "doctor"):  # doctor folds no bound, but reads and checks them as report does
        assert error_line(cli(command, str(path))) == (
            f"error: {path}: its top-k summaries disagree with its top-k lists: topk_tv_lower 1.5 at sequence 43 "
            "position 21 is out of its range (the shard was changed or made by hand after its writer summarised "
            "it; write it again (mismatchscope rescore, or import it again))"
        ), command


def test_decoding_the_lists_holds_every_row_of_the_summaries_against_them(tmp_path):
    """A plausible value past the rows each read checks passes a report, and is found where the lists are read."""
    path = _tampered(tmp_path, 4321, "topk_kl_lower", 0.5)
    analyse(str(path), AnalysisRequest(report=True))
    with pytest.raises(Exception, match="topk_kl_lower 0.5 at sequence 43 position 21"):
        analyse(str(path), AnalysisRequest(report=True, topk_lists=True))


def test_a_writer_computes_the_summaries_itself(tmp_path):
    cols = _pairs(n_seq=2, length=3)
    cols["topk_tv_lower"] = [0.9] * 6  # handed in: dropped, computed again
    table = pq.read_table(write_token_shard(tmp_path / "t.parquet", cols, {}))
    assert table.column("topk_tv_lower").to_pylist() != [pytest.approx(0.9)] * 6
    assert table.column_names[-len(SUMMARY_NAMES) :] == list(SUMMARY_NAMES)


def test_lists_the_readers_refuse_get_no_summaries_and_are_refused_as_before(tmp_path):
    cols = one_sequence(2, **topk_lists(at=[[-0.7], [-0.7, -1.0]]))  # misaligned
    path = write_token_shard(tmp_path / "t.parquet", cols, {})
    assert not set(SUMMARY_NAMES) & set(pq.read_schema(path).names)
    for command in ("report", "doctor"):
        assert "top-k lists are misaligned" in error_line(cli(command, str(path))), command


def test_summaries_are_used_only_where_every_shard_has_them(tmp_path):
    """A folder of an old shard and a new one reads the lists of both, in float64, as a run without summaries."""
    cols = _pairs(n_seq=4, length=10)
    write_table(tmp_path / "a.parquet", cols, {})
    new = tmp_path / "b.parquet"
    pq.write_table(add_summaries(pq.read_table(tmp_path / "a.parquet")), new, **WRITE_OPTIONS)
    assert make_plan(str(tmp_path), AnalysisRequest(report=True)).topk is TopkRead.LISTS


def test_the_recorder_writes_the_summaries(tmp_path):
    from mismatchscope.live import Recorder

    q = np.log([[0.5, 0.25]])
    p = np.log([[0.4, 0.25]])
    ids = np.array([[[1, 2], [3, 4]]])
    top_q = np.log([[[0.5, 0.3], [0.25, 0.5]]])
    top_p = np.log([[[0.4, 0.4], [0.25, 0.5]]])
    with Recorder(tmp_path / "run") as rec:
        rec.add(
            0,
            q,
            p,
            token_ids=np.array([[1, 4]]),
            sampler_topk_ids=ids,
            sampler_topk_logprobs=top_q,
            trainer_logprobs_at_sampler_topk=top_p,
        )
    table = pq.read_table(tmp_path / "run" / "tokens")
    # token 0 is _hand_pair's token (TV 0.1); token 1 lists ids 3, 4 with equal sides: TV 0
    assert table.column("topk_tv_lower").to_pylist() == pytest.approx([0.1, 0.0], abs=1e-7)
    assert make_plan(str(tmp_path / "run"), AnalysisRequest(report=True)).topk is TopkRead.SUMMARIES


def test_a_pass_that_reads_no_ids_decodes_none_where_the_footers_vouch_for_them(tmp_path):
    """compare-masks reads no token ids; the footer's statistics show every id is >= -1. A file written without
    statistics cannot show it: its ids are decoded and checked as every reader checks them."""
    from mismatchscope.rules import default_rules

    request = AnalysisRequest(report=False, masks=True, rules=default_rules())
    cols = _pairs(n_seq=2, length=5)
    with_stats = write_table(tmp_path / "a.parquet", cols, {})
    assert "token_id" not in make_plan(str(with_stats), request).required
    bare = tmp_path / "b.parquet"
    pq.write_table(pq.read_table(with_stats), bare, write_statistics=False)
    assert "token_id" in make_plan(str(bare), request).required
    examples = AnalysisRequest(report=False, masks=True, rules=default_rules(), examples=3)
    assert "token_id" in make_plan(str(with_stats), examples).columns  # --examples names the tokens
