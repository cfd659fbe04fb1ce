"""The examination: the share of the gap each cause explains, rivals compared, causes confined to a few
sequences named with them, a second cause read after the first is corrected (tests/doctor/runs.py's runs)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mismatchscope.doctor import doctor
from tests.doctor import runs


def _by(doc) -> dict:
    return {f.cause: f for f in doc.findings}


def _detected(doc) -> list[str]:
    return [f.cause for f in doc.findings if f.status == "detected" and f.cause != "numerics"]


@pytest.mark.parametrize("noise", [1e-3, 1e-2, 3e-2, 1e-1])
def test_a_log2_sampler_is_the_base_and_a_temperature_is_a_temperature_at_every_noise_level(tmp_path, noise):
    # per-logit noise from float32-like to beyond bfloat16's, its scale log-normal per sequence (SD 0.7); with
    # top-k on both sides a log2 sampler's positions keep their offsets at 0 while T = ln 2 = 0.693 would lift
    # them by -log sum(p^1.44) > 0: the rival fit says so
    rng = np.random.default_rng(int(noise * 1e4))
    base = runs.make(7, noise=noise)
    log2 = runs.in_base(runs.clean_columns(base), 2.0)
    doc = doctor(runs.write(log2, tmp_path, "log2.parquet"))
    by = _by(doc)
    assert doc.top.cause == "log_base" and by["log_base"].estimate["base"] == "log2", _detected(doc)
    assert by["log_base"].estimate["factor"] == pytest.approx(1 / math.log(2), rel=0.01)
    assert "temperature" not in _detected(doc)
    fits = [r for r in by["log_base"].rivals if r.cause == "temperature"]
    assert fits and fits[0].own_residual is not None and fits[0].residual is not None
    assert fits[0].residual > 2 * fits[0].own_residual and "leaves" in fits[0].sentence, fits[0]
    for t in (0.7, 1.3):
        hot = runs.tempered(base, t, rng)
        doc = doctor(runs.write(runs.clean_columns(hot), tmp_path, f"t{t}.parquet"))
        by = _by(doc)
        assert doc.top.cause == "temperature" and "log_base" not in _detected(doc), _detected(doc)
        assert by["temperature"].estimate["temperature"] == pytest.approx(t, rel=0.05)


def test_every_finding_carries_the_share_of_the_gap_it_explains(tmp_path):
    # a one-position shift explains nearly all of the gap: realigned, what is left is the run's noise
    cols = runs.shifted(runs.clean_columns(runs.make(3)), 1)
    doc = doctor(runs.write(cols, tmp_path))
    share = doc.top.explained_share
    assert doc.top.cause == "shifted" and share is not None and share.k3 is not None
    assert share.k3 > 0.99 and share.abs_logprob_diff is not None and share.abs_logprob_diff > 0.9
    assert "explains" in doc.headline and "of k3" in doc.headline
    # numerics holds the rest, and says so in the same terms
    rest = _by(doc)["numerics"].explained_share
    assert rest is not None and rest.k3 is not None and rest.k3 == pytest.approx(1 - share.k3, abs=1e-6)


def test_pad_rows_and_a_rounded_sampler_rank_above_a_one_sequence_misjoin(tmp_path):
    rng = np.random.default_rng(4)
    run = runs.make(5, sequences=100, noise=1e-4)
    cols = runs.clean_columns(run)
    ids = np.unique(cols["sequence_id"])
    cols = runs.misjoined(cols, ids[:1], rng)
    pads = runs.padded(cols, 12, ids[10:88], rng)  # 936 pad rows in 78 sequences
    doc = doctor(runs.write(pads, tmp_path, "pads.parquet"))
    assert doc.top.cause == "padding" and "misaligned_sequences" in _detected(doc), _detected(doc)
    by = _by(doc)
    assert by["padding"].estimate["count"] == 12 * 78
    # bfloat16 rounding of the sampler's values: both found, ranked by what each explains (a misjoined sequence's
    # gaps of nats carry most of k3, the rounding of every token much of the mean |gap|)
    from tests.doctor.injections import bf16_round

    cols = dict(cols, sampler_logprob=bf16_round(cols["sampler_logprob"]))
    doc = doctor(runs.write(cols, tmp_path, "bf16.parquet"))
    found = [f for f in doc.findings if f.status == "detected" and f.cause != "numerics"]
    assert {f.cause for f in found} == {"low_precision", "misaligned_sequences"}
    weights = [f.explained_share.weight for f in found if f.explained_share is not None]
    assert len(weights) == 2 and weights == sorted(weights, reverse=True), [(f.cause, f.explained_share) for f in found]


@pytest.mark.parametrize("bug", ["shifted", "temperature", "log_base", "truncation"])
def test_a_bug_in_5_percent_of_sequences_is_named_with_its_sequences_not_called_a_misjoin(tmp_path, bug):
    rng = np.random.default_rng(11)
    run = runs.make(12, sequences=100, noise=3e-3)
    ids = np.unique(run.seq)
    bad = np.sort(rng.choice(ids, 5, replace=False))
    where = np.isin(run.seq, bad)
    if bug == "shifted":
        cols = runs.shifted(runs.clean_columns(run), 1, bad)
    elif bug == "temperature":
        cols = runs.clean_columns(runs.tempered(run, 0.7, rng, where))
    elif bug == "truncation":
        cols = runs.clean_columns(runs.top_p(run, 0.8, rng, where))
    else:
        cols = runs.in_base(runs.clean_columns(run), 2.0, where=where)
    doc = doctor(runs.write(cols, tmp_path))
    by = _by(doc)
    assert by["misaligned_sequences"].status != "detected", by["misaligned_sequences"].sentence
    f = by[bug]
    assert f.status == "detected", [(x.cause, x.status, x.sentence) for x in doc.findings]
    if f.scope is not None:  # named with the sequences it is confined to
        assert set(f.scope.first_ids) <= set(bad.tolist()) and f.scope.sequences == 5
        assert "in 5 of 100 sequences" in f.sentence
    else:  # or read run-wide, where its signature shows in the run as a whole (cut ids)
        assert bug == "truncation"


def test_a_lag_in_5_percent_of_sequences_is_not_called_a_misjoin(tmp_path):
    rng = np.random.default_rng(2)
    run = runs.make(13, sequences=100, noise=1e-3, seq_sigma=0.0)
    bad = np.unique(run.seq)[:5]
    where = np.isin(run.seq, bad)
    lagged = runs.sample(
        runs.replace(run, zt=run.zt + np.where(where[:, None], rng.normal(0, 0.5, run.zt.shape), 0.0)),
        rng,
        run.cols["_token"],
    )
    doc = doctor(runs.write(runs.clean_columns(lagged), tmp_path))
    assert _by(doc)["misaligned_sequences"].status != "detected"
    # no column tells a lag from here, but the five sequences that carry the gap are named
    assert doc.verdict == "inconclusive" and "5 sequence(s) carry" in doc.headline, doc.headline


def test_with_two_bugs_the_second_is_read_on_pairs_the_first_no_longer_scrambles(tmp_path):
    # a shift scrambles every pair; read on the recorded pairs, a log base would be judged on tokens paired with
    # their neighbours'. Once the shift is corrected, the base is read on the realigned pairs
    cols = runs.in_base(runs.clean_columns(runs.make(21)), 2.0)
    cols = runs.shifted(cols, 1)
    doc = doctor(runs.write(cols, tmp_path))
    by = _by(doc)
    assert {"shifted", "log_base"} <= set(_detected(doc)), _detected(doc)
    second = by["log_base"] if doc.top.cause == "shifted" else by["shifted"]
    assert second.after == [doc.top.cause] and second.estimate
    if second.cause == "log_base":
        assert second.estimate["base"] == "log2"
    shares = [by[c].explained_share for c in ("shifted", "log_base")]
    assert all(s is not None and s.k3 is not None for s in shares)
    assert sum(s.k3 for s in shares if s is not None and s.k3 is not None) <= 1 + 1e-9  # of one gap, never more


def test_a_cause_confined_to_some_sequences_stays_named_after_another_is_corrected(tmp_path):
    # a shift in 5 of 100 sequences and pad rows after half of them: the pads explain more and are corrected
    # first; the shift is then read again on its own sequences, not on the whole run where it is diluted
    rng = np.random.default_rng(12)
    run = runs.make(14, sequences=100, noise=3e-3)
    ids = np.unique(run.seq)
    cols = runs.shifted(runs.clean_columns(run), 1, ids[:5])
    cols = runs.padded(cols, 20, ids[20:70], rng)
    doc = doctor(runs.write(cols, tmp_path))
    by = _by(doc)
    assert by["padding"].status == "detected" and by["shifted"].status == "detected", _detected(doc)
    assert by["shifted"].scope is not None and by["shifted"].scope.sequences == 5


def test_the_causes_read_on_two_threads_give_the_findings_read_on_one(tmp_path, monkeypatch):
    # every cause's first reading and each confined cause's screen run on the cores at once, kept in the
    # registry's order: a shift confined to 5 of 100 sequences with pad rows after half of them (a run-wide
    # cause, a confined one, screens that name suspects, a second round) reads the same on one thread and two
    import json

    from mismatchscope.documents import to_json

    rng = np.random.default_rng(12)
    run = runs.make(14, sequences=100, noise=3e-3)
    ids = np.unique(run.seq)
    path = runs.write(runs.padded(runs.shifted(runs.clean_columns(run), 1, ids[:5]), 20, ids[20:70], rng), tmp_path)
    docs = []
    for threads in ("1", "2"):
        monkeypatch.setenv("MISMATCHSCOPE_THREADS", threads)
        docs.append(json.dumps(to_json(doctor(path)), sort_keys=True))
    assert docs[0] == docs[1]
    by = _by(doctor(path))
    assert by["padding"].status == "detected" and by["shifted"].scope is not None
