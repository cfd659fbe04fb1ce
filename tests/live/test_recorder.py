"""Recorder and Monitor: a real RL loop, a killed loop, the lock, the checks, hand-derived values."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope import rundir
from mismatchscope.errors import RecorderInputError, UsageError
from mismatchscope.live import Monitor, Recorder
from tests.helpers import cli
from tests.inputs import RECORDED_P, RECORDED_Q, recorded_run

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "golden-probe"
LN2 = math.log(2.0)

# Three tokens in a [2, 2] batch, the last cell padding (holding junk the mask hides):
#   (q, p) = (0.5, 0.25), (0.25, 0.25) in row 0; (0.8, 0.1) in row 1.
Q = np.log([[0.5, 0.25], [0.8, 1.0]])
P = np.log([[0.25, 0.25], [0.1, 1.0]])
Q[1, 1], P[1, 1] = 3.0, 7.0  # padding: not a logprob, and not looked at
MASK = np.array([[1, 1], [1, 0]])
HAND = {
    # tv = |p - q| = 0.25, 0, 0.7 -> mean 0.95 / 3
    "tv_token_mean": 0.95 / 3,
    # l = log p - log q = -ln 2, 0, ln(0.125) = -3 ln 2 -> mean |l| = 4 ln 2 / 3
    "abs_logprob_diff_mean": 4 * LN2 / 3,
    # r = 0.5, 1, 0.125; k3 = (r - 1) - l = (ln 2 - 0.5) + 0 + (3 ln 2 - 0.875) -> mean (4 ln 2 - 1.375) / 3
    "k3_mean": (4 * LN2 - 1.375) / 3,
    # only r = 0.125 lies outside [0.5, 2] (0.5 is on the edge)
    "ratio_outside_band": 1 / 3,
    # icepop (alpha 0.5, beta 5) rejects r < 0.5 or r > 5: r = 0.125 only
    "icepop_reject_rate": 1 / 3,
    # ipo (delta 0.3, prime-rl's default) rejects tv > 0.3: 0.7 only (0.25 is kept)
    "ipo_reject_rate": 1 / 3,
}


def _ok(p: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert p.returncode == 0, p.stderr
    return p


# -- the miniature RL loop ---------------------------------------------------------------


def test_rl_loop_recorded_every_step_and_read_back(tmp_path):
    """Sample (fp32 generate), score (bf16), update, record: timeline and report agree with the Monitor."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.live.rl_loop import run

    out = tmp_path / "run"
    reports = run(out, steps=4)
    assert rundir.completion(out) == rundir.Completion(True, "")
    shards = sorted((out / "tokens").glob("*.parquet"))
    assert [s.name for s in shards] == [f"step-{i:06d}-rank-0000.parquet" for i in range(4)]

    tl = _ok(cli("timeline", str(out), "--format", "json"))
    assert tl.stderr == ""  # complete: no incomplete-run warning
    rows = json.loads(tl.stdout)["rows"]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    for rep, row in zip(reports, rows, strict=True):
        assert rep.step == row["step"]
        assert rep["mismatch/tokens"] == row["tokens"]
        for key in (
            "tv_token_mean",
            "k3_mean",
            "abs_logprob_diff_mean",
            "abs_logprob_diff_p99",
            "ratio_outside_band",
            "icepop_reject_rate",
            "ipo_reject_rate",
        ):
            assert rep["mismatch/" + key] == pytest.approx(row[key], rel=1e-9, abs=1e-15), key
    for rep, shard in zip(reports, shards, strict=True):
        m = json.loads(_ok(cli("report", str(shard), "--format", "json")).stdout)["metrics"]
        for key in ("tv_token_mean", "k3_mean", "abs_logprob_diff_mean"):
            assert rep["mismatch/" + key] == pytest.approx(m[key], rel=1e-9, abs=1e-15), key
        outside = m["ratio_tail_high"]["2"] + m["ratio_tail_low"]["2"]
        assert rep["mismatch/ratio_outside_band"] == pytest.approx(outside, abs=1e-15)
    table = pq.read_table(shards[0])
    assert set(table.column_names) >= {"step", "rank", "advantage", "prompt_id", "reward", "token_id"}
    assert table.column("rank").to_pylist() == [0] * table.num_rows


def test_killed_loop_leaves_finished_steps_readable_and_the_run_incomplete(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.live.rl_loop", str(out), "--steps", "100", "--sleep", "0.3"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if line.strip() == "step 2" or time.monotonic() > deadline:
                break
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    shards = sorted((out / "tokens").glob("*.parquet"))
    steps = [pq.read_table(s).column("step").unique().to_pylist() for s in shards]
    assert len(steps) >= 3 and steps == [[i] for i in range(len(steps))]  # every finished step, whole
    assert not list((out / "tokens").glob(".*"))  # no temporary file left visible as a shard
    assert rundir.completion(out) == rundir.Completion(False, "manifest.json status is 'running', not 'complete'")

    tl = _ok(cli("timeline", str(out), "--format", "json"))
    rows = sum(pq.read_metadata(s).num_rows for s in shards)
    expect = (
        f"warning: {out} is an incomplete run (manifest.json status is 'running', not 'complete': killed, or "
        f"still being written); read what is there: {len(shards)} shard(s), {rows:,} rows, steps 0-{len(shards) - 1}"
    )
    assert " ".join(tl.stderr.split()) == expect
    assert json.loads(tl.stdout)["steps"] == len(shards)
    rep = cli("report", str(out))
    assert rep.returncode == 0 and f"warning: {out} is an incomplete run" in rep.stderr
    assert rundir.incomplete_message(out / "tokens", shards) == expect.removeprefix("warning: ")  # its shard folder too
    masks = cli("compare-masks", str(out))
    assert masks.returncode == 0 and f"warning: {out} is an incomplete run" in masks.stderr
    gate = cli("gate", str(out), "--absolute-only")
    assert gate.returncode == 2
    assert " ".join(gate.stderr.split()) == " ".join(
        (
            "error: " + expect.removeprefix("warning: ") + " (wait for the run to finish, or point at complete shards)"
        ).split()
    )


# -- hand-derived values, NaN, top-k -----------------------------------------------------


def test_monitor_values_by_hand_and_the_written_shard(tmp_path):
    with Monitor(Recorder(tmp_path / "run"), prefix="") as mon:
        got = mon.add(7, Q, P, MASK, advantages=np.array([1.0, -1.0]))
    assert rundir.completion(tmp_path / "run") == rundir.Completion(True, "")
    for key, want in HAND.items():
        assert got[key] == pytest.approx(want, rel=1e-12), key
    assert (got["tokens"], got["nonfinite_tokens"], got["alerts"]) == (3.0, 0.0, 0.0)
    t = pq.read_table(tmp_path / "run" / "tokens" / "step-000007-rank-0000.parquet").to_pydict()
    assert t["sequence_id"] == [0, 0, 1] and t["position"] == [0, 1, 0] and t["token_id"] == [-1, -1, -1]
    assert t["advantage"] == [1.0, 1.0, -1.0] and t["step"] == [7, 7, 7]


def test_nonfinite_logprobs_are_recorded_and_left_out_as_the_reader_does(tmp_path):
    q = np.concatenate([Q, np.log([[0.5], [0.5]])], 1)
    p = np.concatenate([P, [[np.nan], [-9999.0]]], 1)  # a NaN and the -inf sentinel, both under the mask
    mask = np.concatenate([MASK, [[1], [1]]], 1)
    with Recorder(tmp_path / "run") as rec:
        got = Monitor(rec, prefix="").add(0, q, p, mask)
    assert got["nonfinite_tokens"] == 2.0 and got["tokens"] == 3.0
    assert got["tv_token_mean"] == pytest.approx(HAND["tv_token_mean"], rel=1e-12)
    rep = _ok(cli("report", str(tmp_path / "run"), "--format", "json"))
    assert json.loads(rep.stdout)["metrics"]["tv_token_mean"] == pytest.approx(got["tv_token_mean"], rel=1e-12)
    assert "2 of 5 tokens have a non-finite logprob" in rep.stderr


def test_topk_columns_round_trip(tmp_path):
    ids = np.array([[[3, 4], [5, 6]], [[7, 8], [9, 9]]])
    lq = np.log(np.full((2, 2, 2), 0.25))
    lp = np.log(np.full((2, 2, 2), 0.2))
    with Recorder(tmp_path / "run") as rec:
        rec.add(
            0,
            Q,
            P,
            MASK,
            token_ids=ids[..., 0],
            sampler_topk_ids=ids,
            sampler_topk_logprobs=lq,
            trainer_logprobs_at_sampler_topk=lp,
        )
    t = pq.read_table(tmp_path / "run" / "tokens").to_pydict()
    assert t["sampler_topk_ids"] == [[3, 4], [5, 6], [7, 8]] and t["token_id"] == [3, 5, 7]
    assert t["trainer_logprobs_at_sampler_topk"][2] == pytest.approx([math.log(0.2)] * 2)
    rep = json.loads(_ok(cli("report", str(tmp_path / "run"), "--format", "json")).stdout)
    assert rep["topk"]["tokens"] == 3


def test_torch_inputs_any_dtype_and_the_callers_tensors_are_not_kept(tmp_path):
    torch = pytest.importorskip("torch")
    import weakref

    q = torch.tensor(Q, dtype=torch.float32)
    p = torch.tensor(P, dtype=torch.bfloat16)
    m = torch.tensor(MASK, dtype=torch.bool)
    refs = [weakref.ref(x) for x in (q, p, m)]
    with Recorder(tmp_path / "run") as rec:
        got = Monitor(rec, prefix="").add(0, q, p, m)
        del q, p, m
        assert all(r() is None for r in refs)
    # bf16 holds 0.25 and 0.125 exactly, 0.1 -> 0.10009765625 (ln 0.1 rounded): p = 0.1 is now off by 1e-4
    assert got["ipo_reject_rate"] == pytest.approx(HAND["ipo_reject_rate"])
    assert got["abs_logprob_diff_mean"] == pytest.approx(HAND["abs_logprob_diff_mean"], abs=2e-3)


# -- checks: every message whole ---------------------------------------------------------


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda r: r.add(3, Q, P, np.zeros((2, 2))),
            "step 3: the mask selects no token, nothing to record (pass the response mask (1 for each generated token that counts))",
        ),
        (
            lambda r: r.add(0, Q, P[:, :1], MASK),
            "sampler_logprobs has shape (2, 2) and trainer_logprobs (2, 1): they must match (pass both as [B, T] over the same tokens)",
        ),
        (
            lambda r: r.add(0, Q[0], P[0]),
            "sampler_logprobs must be [B, T] (a batch of padded sequences), got shape (2,) (add a batch axis for a single sequence, e.g. x[None])",
        ),
        (lambda r: r.add(0, Q, P, MASK[:1]), "mask has shape (1, 2) and the logprobs (2, 2): they must match"),
        (
            lambda r: r.add(2, Q, -P, MASK),
            "step 2: 3 positive logprob(s) beyond rounding (> 0.0001), e.g. sampler -0.6931 / trainer 1.386 at row 0 position 0 "
            "(logprobs are natural logs <= 0; are these logits or probabilities?)",
        ),
        (
            lambda r: r.add(0, Q, P, MASK, advantages=np.ones(3)),
            "advantages has shape (3,), expected per sequence (2,) or per token (2, 2)",
        ),
        (
            lambda r: r.add(0, Q, P, MASK, advantages=np.array([np.nan, 1.0])),
            "step 0: advantages has 1 non-finite value(s) under the mask",
        ),
        (
            lambda r: r.add(0, Q, P, MASK, sampler_topk_ids=np.zeros((2, 2, 1), int)),
            "top-k columns come as a set of three; missing sampler_topk_logprobs, trainer_logprobs_at_sampler_topk",
        ),
        (lambda r: r.add(-1, Q, P, MASK), "step must be a non-negative integer, got -1"),
        (
            lambda r: r.add(
                0,
                Q,
                P,
                MASK,
                sampler_topk_ids=np.zeros((2, 2, 1), int),
                sampler_topk_logprobs=np.zeros((2, 2, 1)),
                trainer_logprobs_at_sampler_topk=np.zeros((2, 2, 1)),
            ),
            "the top-k columns need token_ids: the bounds look for the sampled token among the listed ids",
        ),
        (
            lambda r: r.add(0, Q, P, MASK, sequence_ids=np.array(["uid-1", "uid-1"], dtype=object)),
            "sequence_ids repeat within the batch (1 id(s) more than once): each row is one sequence "
            "(pass a prompt's id (shared by its samples) as group_ids, or leave sequence_ids out)",
        ),
    ],
)
def test_bad_inputs_are_one_clear_error(tmp_path, call, message):
    with Recorder(tmp_path / "run") as rec:
        with pytest.raises(RecorderInputError) as e:
            call(rec)
    assert str(e.value) == message


def test_a_positive_value_within_rounding_is_a_logprob(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.add(0, np.array([[5e-5]]), np.array([[-0.1]]))


# -- the run directory: locks, ranks, resume, back-pressure ----------------------------


def test_second_writer_of_a_rank_is_refused(tmp_path):
    out = tmp_path / "run"
    with Recorder(out):
        with pytest.raises(UsageError) as e:
            Recorder(out)
        assert str(e.value) == (
            f"{out} (rank 0) is being written by another process (pid {os.getpid()} holds "
            f"{out}/ranks/rank-0000.lock) (wait for it to finish, or write to another directory)"
        )
        Recorder(out, rank=1).close()  # another rank is not another writer of the same files


def test_ranks_share_a_run_and_it_is_complete_when_every_rank_closed(tmp_path):
    out = tmp_path / "run"
    r0, r1 = Recorder(out, rank=0, world_size=2), Recorder(out, rank=1, world_size=2)
    for step in range(2):
        r0.add(step, Q, P, MASK)
        r1.add(step, Q, P, MASK)
    r0.close()
    assert rundir.completion(out) == rundir.Completion(False, "rank(s) 1 did not close")
    r1.close()
    assert rundir.completion(out) == rundir.Completion(True, "")
    t = pq.read_table(out / "tokens").to_pydict()
    seq = set(zip(t["step"], t["sequence_id"], strict=True))
    assert len(seq) == 8  # 2 steps x 2 ranks x 2 rows, none shared between ranks
    assert sorted(set(t["rank"])) == [0, 1]
    rows = json.loads(_ok(cli("timeline", str(out), "--by", "rank", "--format", "json")).stdout)["rows"]
    assert [(r["group"], r["step"], r["tokens"]) for r in rows] == [(0, 0, 3), (0, 1, 3), (1, 0, 3), (1, 1, 3)]


def test_only_resume_adds_to_a_rank_and_a_step_recorded_again_replaces_it(tmp_path):
    out = tmp_path / "run"
    with Recorder(out) as rec:
        rec.add(0, Q, P, MASK)
        rec.add(1, Q, P, MASK)
        rec.add(1, Q, P, MASK)  # a second micro-batch of step 1
    assert sorted(f.name for f in (out / "tokens").iterdir()) == [
        "step-000000-rank-0000.parquet",
        "step-000001-rank-0000-part-0001.parquet",
        "step-000001-rank-0000.parquet",
    ]
    with pytest.raises(UsageError) as e:
        Recorder(out)
    assert str(e.value) == (
        f"{out} already holds records of rank 0 (rank-0000.json) "
        "(pass resume=True to add to them, or record into another directory)"
    )
    with Recorder(out, resume=True) as rec:
        rec.add(1, Q[:1], P[:1], MASK[:1])
    t = pq.read_table(out / "tokens").to_pydict()
    assert [(s, n) for s, n in zip(*np.unique(t["step"], return_counts=True), strict=True)] == [(0, 3), (1, 2)]
    assert len(set(t["sequence_id"])) == 3  # numbering goes on after a resume: no id reused


def test_a_full_queue_waits_says_so_once_and_drops_nothing(tmp_path, monkeypatch, capsys):
    from mismatchscope.live import recorder as recmod

    real = recmod.write_token_shard

    def slow(*a, **kw):
        time.sleep(0.05)
        return real(*a, **kw)

    monkeypatch.setattr(recmod, "write_token_shard", slow)
    with Recorder(tmp_path / "run", max_pending=1) as rec:
        for step in range(6):
            rec.add(step, Q, P, MASK)
        assert rec.wait_seconds > 0
    assert len(list((tmp_path / "run" / "tokens").glob("*.parquet"))) == 6
    assert capsys.readouterr().err == (
        "mismatchscope: warning: the Recorder's writer is behind (1 shards queued); "
        "add() waits for it rather than drop data (said once)\n"
    )


def test_an_exception_in_the_with_block_leaves_the_run_incomplete(tmp_path):
    with pytest.raises(KeyError):
        with Recorder(tmp_path / "run") as rec:
            rec.add(0, Q, P, MASK)
            raise KeyError("boom")
    assert rundir.completion(tmp_path / "run") == rundir.Completion(
        False, "manifest.json status is 'failed', not 'complete'"
    )
    assert pq.read_table(tmp_path / "run" / "tokens").num_rows == 3


# -- alerts ------------------------------------------------------------------------------


def _step_arrays(rng, scale: float):
    lq = np.log(rng.uniform(0.05, 1.0, (8, 64)))
    lp = np.minimum(lq + rng.normal(0.0, scale, lq.shape), 0.0)
    return lq, lp


def test_a_spike_alerts_once_at_its_step():
    rng = np.random.default_rng(1)
    mon = Monitor()
    alerts_at = {}
    for step in range(24):
        got = mon.add(step, *_step_arrays(rng, 0.3 if step == 20 else 0.05))
        alerts_at[step] = [(a.metric, a.kind) for a in got.alerts]
        assert got["mismatch/alerts"] == len(got.alerts)
    assert not any(alerts_at[s] for s in range(20))
    assert ("k3_mean", "spike") in alerts_at[20]  # at once: the newest step is tested against the ones before
    spike = next(a for a in mon.alerts if a.kind == "spike" and a.metric == "k3_mean")
    assert spike.step == 20 and spike.message.startswith("mismatch alert: k3_mean spiked at step 20: ")
    assert all(("k3_mean", "spike") not in alerts_at[s] for s in range(21, 24))


def test_a_rise_in_level_alerts_once_a_few_steps_after_it_and_noise_does_not():
    rng = np.random.default_rng(2)
    mon = Monitor()
    first_alert = {}
    for step in range(45):
        got = mon.add(step, *_step_arrays(rng, 0.1 if step >= 25 else 0.05))  # |l| doubles, k3 about x4
        for a in got.alerts:
            first_alert.setdefault((a.metric, a.kind), (step, a))
    assert all(step >= 25 for step, _ in first_alert.values())  # nothing in the 25 steps of noise
    when, alert = first_alert[("k3_mean", "shift")]
    assert abs(alert.step - 25) <= 2 and when <= 25 + 5  # placed at the rise, confirmed within a few steps
    assert alert.message.startswith(f"mismatch alert: k3_mean rose at step {alert.step}: mean ")
    assert sum(1 for a in mon.alerts if (a.metric, a.kind) == ("k3_mean", "shift")) == 1  # reported once


def test_importing_the_package_loads_neither_torch_nor_the_recorder():
    code = (
        "import sys, mismatchscope; a = 'mismatchscope.live' in sys.modules; "
        "from mismatchscope import Recorder, Monitor; print(a, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_resume_trusts_the_shards_on_disk_over_the_rank_record(tmp_path):
    """Killed between a shard's rename and the record's update: the record misses step 1's shard."""
    out = tmp_path / "run"
    with Recorder(out) as rec:
        rec.add(0, Q, P, MASK)
        rec.add(1, Q, P, MASK)
    record = rundir.read_json(out / "ranks" / "rank-0000.json")
    rundir.atomic_write_json(out / "ranks" / "rank-0000.json", {**record, "steps": [0], "next_sequence_id": 2})
    with Recorder(out, resume=True) as rec:
        rec.add(1, Q, P, MASK)  # step 1 trained again after the restart
    t = pq.read_table(out / "tokens").to_pydict()
    assert sorted(zip(t["step"], t["sequence_id"], strict=True)) == [(0, 0), (0, 0), (0, 1), (1, 4), (1, 4), (1, 5)]


def test_exiting_without_close_writes_what_was_queued_and_leaves_the_run_incomplete(tmp_path):
    code = (
        "import sys, time, numpy as np; from mismatchscope.live import recorder as m\n"
        "real = m.write_token_shard\n"
        "m.write_token_shard = lambda *a, **k: (time.sleep(0.2), real(*a, **k))[1]\n"
        "rec = m.Recorder(sys.argv[1])\n"
        "for s in range(3): rec.add(s, np.log([[0.5, 0.25]]), np.log([[0.25, 0.25]]))\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], check=True, env=env, cwd=REPO)
    assert len(list((tmp_path / "run" / "tokens").glob("*.parquet"))) == 3
    assert rundir.completion(tmp_path / "run") == rundir.Completion(
        False, "manifest.json status is 'running', not 'complete'"
    )


def test_a_writer_failure_is_raised_at_the_next_call(tmp_path, monkeypatch):
    from mismatchscope.errors import RecorderError
    from mismatchscope.live import recorder as recmod

    def full(*_a, **_kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recmod, "write_token_shard", full)
    rec = Recorder(tmp_path / "run")
    rec.add(0, Q, P, MASK)
    with pytest.raises(RecorderError) as e:
        rec.flush()
    assert str(e.value) == f"the Recorder could not write to {tmp_path / 'run'}: [Errno 28] No space left on device"
    with pytest.raises(RecorderError):
        rec.add(1, Q, P, MASK)
    with pytest.raises(RecorderError):
        rec.close()
    assert rundir.completion(tmp_path / "run").complete is False


def test_a_world_size_of_zero_is_named_as_such(tmp_path):
    from mismatchscope.live import Recorder

    with pytest.raises(UsageError, match="world_size must be a positive integer .*got 0"):
        Recorder(tmp_path / "run", rank=0, world_size=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "meta, says",
    [
        ({"lr": math.nan}, "meta['lr'] is nan, which strict JSON cannot hold"),
        ({"sched": {"warmup": [1, -math.inf]}}, "meta['sched']['warmup'][1] is -inf, which strict JSON cannot hold"),
        ({"lr": np.float32("inf")}, "meta['lr'] is inf, which strict JSON cannot hold"),
        ({"seen": {1, 2}}, "meta['seen'] is a set, not a JSON value"),
        ({3: "x"}, "meta has the key 3; JSON keys are strings"),
    ],
)
def test_recorder_meta_strict_json_only(tmp_path, meta, says):
    with pytest.raises(UsageError, match=re.escape(says)):
        Recorder(tmp_path / "run", meta=meta)
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


def test_recorder_meta_numpy_scalars_are_written_as_numbers(tmp_path):
    with Recorder(tmp_path / "run", meta={"lr": np.float32(0.5), "steps": (np.int64(3),)}) as rec:
        rec.add(0, [[-0.5]], [[-0.4]])
    text = (tmp_path / "run" / "manifest.json").read_text()
    assert json.loads(text, parse_constant=_no_constants)["meta"] == {"lr": 0.5, "steps": [3]}


def _no_constants(name: str):
    raise AssertionError(f"{name} in a manifest")


def _listing(path: Path) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_mtime_ns for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize(
    "case, message",
    [
        ("probe run", "already holds a probe run, not a recorded run"),
        ("import run", "already holds an imported run, not a recorded run"),
        ("tokens of a run", "lies inside the run"),
        ("folder inside a run", "lies inside the run"),
        ("killed import", "holds files that are not a recorded run's (e.g. "),
        ("other files", "holds files that are not a recorded run's (e.g. notes.txt)"),
        ("a file", "is a file, not a run directory"),
        ("unreadable manifest", "already holds an unreadable manifest.json"),
    ],
)
def test_the_recorder_refuses_a_directory_that_is_not_its_run(tmp_path, case, message):
    from mismatchscope.errors import UsageError

    probe = Path(shutil.copytree(GOLDEN, tmp_path / "probe"))
    target = {
        "probe run": probe,
        "tokens of a run": probe / "tokens",
        "folder inside a run": probe / "sub",
        "import run": tmp_path / "imported",
        "killed import": tmp_path / "killed",
        "other files": tmp_path / "mine",
        "a file": tmp_path / "file",
        "unreadable manifest": tmp_path / "bad",
    }[case]
    if case in ("import run", "killed import"):
        src = tmp_path / "dump.jsonl"
        src.write_text(json.dumps({"sampler_logprobs": [-0.5], "trainer_logprobs": [-0.6], "token_ids": [1]}) + "\n")
        from mismatchscope.importers import import_run

        import_run("jsonl", src, target)
        if case == "killed import":
            (target / "manifest.json").unlink()
    elif case == "other files":
        target.mkdir()
        (target / "notes.txt").write_text("mine")
    elif case == "a file":
        target.write_text("x")
    elif case == "unreadable manifest":
        target.mkdir()
        (target / "manifest.json").write_text("{not json")
    before = _listing(tmp_path)
    for resume in (False, True):  # resume reopens only a recorded run
        with pytest.raises(UsageError, match=re.escape(message)):
            Recorder(target, rank=0, world_size=1, resume=resume)
    assert _listing(tmp_path) == before  # nothing written, nothing changed


def test_the_recorder_refuses_an_empty_path(tmp_path, monkeypatch):
    from mismatchscope.errors import UsageError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="empty path"):
        Recorder("", rank=0)
    assert list(tmp_path.iterdir()) == []


def test_the_recorder_reopens_its_own_run_only_as_another_rank_or_with_resume(tmp_path):
    from mismatchscope.errors import UsageError

    run = recorded_run(tmp_path / "run", steps=1)
    with pytest.raises(UsageError, match="already holds records of rank 0"):
        Recorder(run, rank=0, world_size=1)
    with pytest.raises(UsageError, match="recorded with world_size 1, not 2"):
        Recorder(run, rank=1, world_size=2)
    Recorder(run, rank=0, world_size=1, resume=True).close()
    fresh = tmp_path / "fresh"
    with Recorder(fresh, rank=1, world_size=2) as r1:  # rank 1 first, before rank 0 wrote the manifest
        r1.add(0, RECORDED_Q, RECORDED_P)
        Recorder(fresh, rank=0, world_size=2).close()  # rank 0 joins the directory rank 1 started


def test_the_recorder_refuses_a_sequence_id_given_again_at_a_later_step(tmp_path):
    from mismatchscope.errors import RecorderInputError

    with Recorder(tmp_path / "run", rank=0, world_size=1) as rec:
        rec.add(0, RECORDED_Q, RECORDED_P, sequence_ids=[10, 11])
        rec.add(1, RECORDED_Q, RECORDED_P, sequence_ids=[12, 13])
        with pytest.raises(RecorderInputError, match=r"step 2: sequence id 11 was already recorded at step 0"):
            rec.add(2, RECORDED_Q, RECORDED_P, sequence_ids=[20, 11])
        rec.add(2, RECORDED_Q, RECORDED_P, sequence_ids=[20, 21])  # the refused call queued nothing
    r = cli("report", str(tmp_path / "run"), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sequences"] == 6  # 3 steps x 2 rows


def test_the_recorder_refuses_steps_and_positions_the_readers_refuse(tmp_path):
    from mismatchscope.errors import RecorderInputError

    with Recorder(tmp_path / "run", rank=0, world_size=1) as rec:
        with pytest.raises(RecorderInputError, match=r"step 4503599627370497 is beyond 2\^52"):
            rec.add(2**52 + 1, RECORDED_Q, RECORDED_P)
        t = 2**24 + 1  # positions 0..2^24: the last is one past the readers' 0..16777215
        lq = np.zeros((1, t), np.float16)
        mask = np.zeros((1, t), bool)
        mask[0, -1] = True
        with pytest.raises(RecorderInputError, match=r"position 16777216 is outside 0..16777215 at row 0"):
            rec.add(0, lq, lq, mask)
        rec.add(0, RECORDED_Q, RECORDED_P)
    assert rundir.completion(tmp_path / "run").complete
