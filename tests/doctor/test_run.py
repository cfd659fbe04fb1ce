"""``doctor`` on the golden probe run (vLLM float16 sampler, float32 transformers trainer) and on copies of it
with one pipeline bug injected each.

Causes that change a whole distribution (a temperature, a top-p kept set, other weights) need the full
distribution at every position: one float32 forward of the bundled tiny model (and of its later checkpoint)
over the golden run's prompts and completions gives it (the module fixture ``full_distributions``). Each injected file
keeps the run's own numerical gap: the sampler's value is the transformed trainer value plus the recorded
sampler - trainer difference.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.doctor import doctor
from mismatchscope.schema import write_table
from tests.doctor.injections import bf16_round
from tests.helpers import REPO

GOLDEN = REPO / "tests" / "data" / "golden-probe"
SIMULATED = REPO / "sample_data" / "simulated_pairs.parquet"
COLUMNS = (
    "sequence_id",
    "position",
    "token_id",
    "sampler_logprob",
    "trainer_logprob",
    "prompt_id",
    "advantage",
    "sampler_topk_ids",
    "sampler_topk_logprobs",
    "trainer_logprobs_at_sampler_topk",
)


@pytest.fixture(scope="module")
def golden() -> dict:
    """The golden run's pairs, sorted by (sequence, position): plain numpy arrays and lists."""
    t = pq.read_table(next((GOLDEN / "tokens").glob("*.parquet")))
    order = np.lexsort((t["position"].to_numpy(), t["sequence_id"].to_numpy()))
    t = t.take(order)
    cols = {c: t[c].to_numpy() for c in COLUMNS[:7]}
    for c in COLUMNS[7:]:
        cols[c] = [np.asarray(v, dtype=np.float64 if "logprob" in c else np.int64) for v in t[c].to_pylist()]
    cols["meta"] = json.loads(t.schema.metadata[b"mismatchscope"])
    return cols


def _log_softmax_rows(checkpoint: Path, golden: dict) -> np.ndarray:
    """log softmax of ``checkpoint``'s float32 logits at every golden row: (rows, vocab)."""
    import torch
    from transformers import AutoModelForCausalLM

    prompts = pq.read_table(GOLDEN / "prompts.parquet").to_pylist()
    prompt_ids = {r["prompt_id"]: r["prompt_token_ids"] for r in prompts}
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    out = []
    seq = golden["sequence_id"]
    for s in np.unique(seq):
        rows = np.flatnonzero(seq == s)
        prompt = prompt_ids[int(golden["prompt_id"][rows[0]])]
        ids = torch.tensor([prompt + golden["token_id"][rows].tolist()])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1 : len(prompt) - 1 + rows.size].double()
        out.append(torch.log_softmax(logits, -1).numpy())
    return np.concatenate(out)


@pytest.fixture(scope="module")
def full_distributions(golden) -> dict[str, np.ndarray]:
    """Full log-distributions of the sampler's checkpoint and of the later one, at every golden row."""
    return {
        "base": _log_softmax_rows(REPO / "sample_data" / "tiny-qwen3", golden),
        "later": _log_softmax_rows(REPO / "sample_data" / "tiny-qwen3-later", golden),
    }


def _write(tmp_path: Path, cols: dict, name: str = "pairs.parquet", meta: dict | None = None) -> str:
    data = {k: v for k, v in cols.items() if k != "meta"}
    for k in COLUMNS[7:]:
        if k in data:
            data[k] = [list(v) for v in data[k]]
    path = tmp_path / name
    write_table(path, data, metadata=cols["meta"] if meta is None else meta)
    return str(path)


def _copy(golden: dict) -> dict:
    return {
        k: (list(v) if isinstance(v, list) else v.copy() if isinstance(v, np.ndarray) else v) for k, v in golden.items()
    }


def _finding(doc, cause: str):
    return next(f for f in doc.findings if f.cause == cause)


def _only(doc, cause: str) -> None:
    """``cause`` is the top finding and the only pipeline cause detected."""
    assert doc.top.cause == cause, [(f.cause, f.status, f.sentence) for f in doc.findings]
    assert [f.cause for f in doc.findings if f.status == "detected" and f.pipeline] == [cause]


# -- clean runs: no false alarm ----------------------------------------------------------------------------


def test_the_golden_probe_run_reads_as_numerics():
    doc = doctor(str(GOLDEN))
    assert doc.verdict == "numerics" and doc.top.cause == "numerics"
    assert not [f.cause for f in doc.findings if f.status == "detected" and f.cause != "numerics"]
    # fp16 sampler vs fp32 trainer: compared with the fp16 rows only, in each metric's own convention; no source
    # gives an fp16 k3 (the one that did was derived from an RMS ratio), so k3 says none is comparable
    k3 = next(p for p in doc.placements if p.metric == "k3_mean")
    assert k3.dtype == "fp16" and not k3.comparable and "no published figure for fp16" in k3.sentence
    rms = next(p for p in doc.placements if p.metric == "rms_gap")
    assert rms.moe is False and rms.comparable and all(r.dtype == "fp16" for r in rms.comparable)
    assert "below" in rms.sentence and "AknA13" in rms.sentence
    # a file without steps or routes says what it would need, never a silent pass
    assert _finding(doc, "step_jump").status == "not_checked" and _finding(doc, "step_jump").needs == ["step"]
    assert _finding(doc, "routing_replay").status == "not_checked"
    # no advantage, no steps, but the probe declares one policy (semantics.policy_lag false): clear on its word
    lag = _finding(doc, "policy_lag")
    assert lag.status == "clear" and lag.sentence.startswith("the run declares no lag"), lag.sentence


def test_the_simulated_pairs_read_as_numerics():
    doc = doctor(str(SIMULATED))
    assert doc.verdict == "numerics", [(f.cause, f.sentence) for f in doc.findings if f.status == "detected"]
    # its sampler records no dtype: no published row is comparable, and the placement says so
    assert all(not p.comparable and "does not record its precision" in p.sentence for p in doc.placements)


# -- one injected cause each --------------------------------------------------------------------------------


def test_a_run_without_a_gap_says_so_rather_than_rounding():
    # sample_data/runs/rl-zero scores both sides with one model: every pair bit-equal, k3 mean 0
    doc = doctor(str(REPO / "sample_data" / "runs" / "rl-zero"))
    assert doc.top.cause == "numerics" and doc.top.sentence == "no gap: every pair is equal"
    assert doc.top.change == "nothing" and "rounding" not in doc.top.sentence
    # no position has the sampler above the trainer (0%): not what noise gives, and not said to be
    trunc = _finding(doc, "truncation")
    assert trunc.status == "clear" and "0% of positions" in trunc.sentence and "noise" not in trunc.sentence


def test_a_one_position_shift_is_found_with_k_and_the_realigned_gap(golden, tmp_path):
    c = _copy(golden)
    seq, lq = c["sequence_id"], c["sampler_logprob"]
    same_next = np.r_[seq[1:] == seq[:-1], False]
    c["sampler_logprob"] = np.where(same_next, np.r_[lq[1:], 0.0], lq)  # token t gets token t+1's value
    keep = np.flatnonzero(same_next)  # each sequence's last row has no value left: dropped
    c = {
        k: ([v[i] for i in keep] if isinstance(v, list) else v[keep] if isinstance(v, np.ndarray) else v)
        for k, v in c.items()
    }
    doc = doctor(_write(tmp_path, c))
    _only(doc, "shifted")
    est = _finding(doc, "shifted").estimate
    # realigned by k = -1 the pairs are the recorded ones again: the golden run's mean |gap| (5.07e-4)
    assert est["k"] == -1
    assert est["gap_after"] == pytest.approx(
        float(np.mean(np.abs(golden["trainer_logprob"] - golden["sampler_logprob"]))), rel=0.1
    )


def _tempered(golden: dict, full_distributions: dict, t: float) -> dict:
    """The sampler's logprobs of the distribution at temperature ``t`` (tokens and lists), numerics kept."""
    c = _copy(golden)
    z = full_distributions["base"] / t
    lt = z - np.log(np.exp(z).sum(1, keepdims=True))
    rows = np.arange(lt.shape[0])
    noise = golden["sampler_logprob"] - golden["trainer_logprob"]
    c["sampler_logprob"] = np.minimum(lt[rows, golden["token_id"]] + noise, 0.0)
    c["sampler_topk_logprobs"] = [
        np.minimum(lt[i, ids] + (s - tr), 0.0)
        for i, (ids, s, tr) in enumerate(
            zip(
                golden["sampler_topk_ids"],
                golden["sampler_topk_logprobs"],
                golden["trainer_logprobs_at_sampler_topk"],
                strict=True,
            )
        )
    ]
    return c


@pytest.mark.parametrize("t", [0.7, 1.3])
def test_a_sampler_temperature_is_found_with_t(golden, full_distributions, tmp_path, t):
    doc = doctor(_write(tmp_path, _tempered(golden, full_distributions, t)))
    _only(doc, "temperature")
    est = _finding(doc, "temperature").estimate
    # within a position the sampler's top-k logprobs are the trainer's / T: the slope is 1/T (1.43 or 0.77)
    assert est["side"] == "sampler" and est["temperature"] == pytest.approx(t, rel=0.1)


def test_top_p_truncation_is_found_with_the_kept_mass(golden, full_distributions, tmp_path):
    c = _copy(golden)
    p = np.exp(full_distributions["base"])
    order = np.argsort(-p, axis=1)
    sorted_p = np.take_along_axis(p, order, 1)
    before = np.cumsum(sorted_p, 1) - sorted_p
    kept_sorted = before < 0.9  # vLLM's top-p: the smallest set whose mass reaches 0.9
    kept = np.zeros_like(kept_sorted)
    np.put_along_axis(kept, order, kept_sorted, 1)
    m = (p * kept).sum(1)
    rows = np.arange(p.shape[0])
    in_set = kept[rows, golden["token_id"]]
    c["sampler_logprob"] = np.where(in_set, np.minimum(golden["sampler_logprob"] - np.log(m), 0.0), -9999.0)
    c["sampler_topk_logprobs"] = [
        np.where(kept[i, ids], np.minimum(s - np.log(m[i]), 0.0), -np.inf)
        for i, (ids, s) in enumerate(zip(golden["sampler_topk_ids"], golden["sampler_topk_logprobs"], strict=True))
    ]
    doc = doctor(_write(tmp_path, c))
    _only(doc, "truncation")
    est = _finding(doc, "truncation").estimate
    # over the rows the sampler kept: the mean of m, and the share with m < 1 (every kept set leaves some mass)
    assert est["mean_kept_mass"] == pytest.approx(float(m[in_set].mean()), rel=0.1)
    assert est["share_truncated"] == pytest.approx(float(np.mean(m[in_set] < 1)), rel=0.1)


def test_a_log2_sampler_is_found_with_the_factor(golden, tmp_path):
    c = _copy(golden)
    c["sampler_logprob"] = golden["sampler_logprob"] / math.log(2)
    c["sampler_topk_logprobs"] = [v / math.log(2) for v in golden["sampler_topk_logprobs"]]
    doc = doctor(_write(tmp_path, c))
    _only(doc, "log_base")
    est = _finding(doc, "log_base").estimate
    assert est["base"] == "log2" and est["factor"] == pytest.approx(1 / math.log(2), rel=0.01)  # 1.4427


def test_ratios_that_scatter_around_no_factor_are_no_log_base(tmp_path):
    # 200 tokens, trainer -0.1 to -5; the sampler 1.44x it on even tokens and 0.7x on odd ones: no one factor
    # takes the gap down (the weighted median, 1.44 or 0.7, leaves the other half's 0.74|lp| as it was)
    lp = -np.linspace(0.1, 5, 200)
    lq = lp * np.where(np.arange(200) % 2 == 0, 1.44, 0.7)
    cols = {"sequence_id": np.repeat(np.arange(4), 50), "position": np.tile(np.arange(50), 4)}
    cols.update(token_id=np.arange(200) + 5, sampler_logprob=lq, trainer_logprob=lp, meta={})
    f = _finding(doctor(_write(tmp_path, cols)), "log_base")
    assert f.status == "clear" and "not a log base" in f.sentence and "same log base" not in f.sentence, f.sentence


def test_a_log2_sampler_without_top_k_is_the_base_not_a_temperature(tmp_path):
    # the simulated pairs (bf16 logits, 3% routing flips: ratios of small logprobs scatter widely) with the sampler
    # in log2 and no top-k: one factor, 1/ln 2, takes the gap to the run's numerics, and the temperature the
    # sampled tokens' slope suggests is gone once the base is corrected
    t = pq.read_table(SIMULATED).select(["sequence_id", "position", "token_id", "sampler_logprob", "trainer_logprob"])
    cols = {c: t[c].to_numpy() for c in t.column_names}
    cols.update(sampler_logprob=cols["sampler_logprob"] / math.log(2), meta={})
    doc = doctor(_write(tmp_path, cols))
    base = _finding(doc, "log_base")
    assert doc.top.cause == "log_base" and base.estimate["base"] == "log2", [(f.cause, f.status) for f in doc.findings]
    assert base.estimate["factor"] == pytest.approx(1 / math.log(2), rel=0.01)
    assert _finding(doc, "temperature").status != "detected"


def test_bf16_rounded_sampler_logprobs_are_found_with_the_mantissa_bits(golden, tmp_path):
    c = _copy(golden)
    c["sampler_logprob"] = bf16_round(golden["sampler_logprob"])
    doc = doctor(_write(tmp_path, c))
    _only(doc, "low_precision")
    est = _finding(doc, "low_precision").estimate
    assert (est["side"], est["grid"], est["mantissa_bits"]) == ("sampler", "bfloat16", 7)


def test_padding_rows_are_found_with_their_count_and_token(golden, tmp_path):
    c = _copy(golden)
    seq, pos = golden["sequence_id"], golden["position"]
    last = np.flatnonzero(np.r_[seq[1:] != seq[:-1], True])
    extra = {k: [] for k in COLUMNS}
    for i in last:  # three pad rows (id 0) after each completion: the sampler's 0.0, the trainer's a real-looking value
        for j in range(3):
            for k in COLUMNS:
                extra[k].append(golden[k][i])
            extra["position"][-1] = pos[i] + 1 + j
            extra["token_id"][-1] = 0
            extra["sampler_logprob"][-1] = 0.0
            extra["trainer_logprob"][-1] = -5.0 - 0.25 * j
    for k in COLUMNS:
        c[k] = np.concatenate([golden[k], np.asarray(extra[k])]) if k in COLUMNS[:7] else golden[k] + extra[k]
    doc = doctor(_write(tmp_path, c))
    _only(doc, "padding")
    est = _finding(doc, "padding").estimate
    assert (est["count"], est["token_id"], est["sequences"]) == (24, 0, 8)  # 8 sequences x 3 rows


def test_a_prompt_boundary_gap_is_found_with_the_positions(golden, tmp_path):
    c = _copy(golden)
    c["trainer_logprob"] = np.where(golden["position"] < 3, golden["trainer_logprob"] - 0.5, golden["trainer_logprob"])
    doc = doctor(_write(tmp_path, c))
    _only(doc, "prompt_boundary")
    assert _finding(doc, "prompt_boundary").estimate["positions_affected"] == 3


def _copies(golden: dict, n: int) -> dict:
    """``n`` copies of the golden run, the r-th with sequence ids 1000 r + id."""
    c = {
        k: (np.concatenate([v] * n) if isinstance(v, np.ndarray) else v * n if isinstance(v, list) else v)
        for k, v in golden.items()
    }
    rows = golden["sequence_id"].size
    c["sequence_id"] = c["sequence_id"] + 1000 * np.repeat(np.arange(n), rows)
    return c


def test_misjoined_sequences_are_told_from_outlying_ones(golden, tmp_path):
    c = _copies(golden, 5)  # 40 sequences
    seq, lp = c["sequence_id"], c["trainer_logprob"].copy()
    a, b = np.flatnonzero(seq == 0), np.flatnonzero(seq == 1004)  # prompts 0 and 2: two different samples
    lp[a] = c["trainer_logprob"][b[np.arange(a.size) % b.size]]
    lp[b] = c["trainer_logprob"][a[np.arange(b.size) % a.size]]
    c["trainer_logprob"] = lp
    doc = doctor(_write(tmp_path, c))
    # the task's answers all have one shape, so the two misjoined sequences still agree with their pairs in rank
    # (their certain tokens sit where the other's do): no misjoin can be read from the values alone. What the
    # values do show is that two sequences carry the gap, 30x above the rest, and no cause explains them
    assert doc.verdict == "inconclusive" and "2 sequence(s) carry" in doc.headline, doc.headline
    assert "first ids 0, 1004" in doc.headline and any("prompt_id" in n for n in doc.needs)
    # a misjoin of unlike samples (other prompts' shapes): pairs no closer than random ones
    c = _copies(golden, 5)
    seq, lp = c["sequence_id"], c["trainer_logprob"].copy()
    rows = np.flatnonzero(seq == 0)
    lp[rows] = np.random.default_rng(0).permutation(lp[rows])  # the trainer's values of another order of tokens
    c["trainer_logprob"] = lp
    doc = doctor(_write(tmp_path, c, name="shuffled.parquet"))
    _only(doc, "misaligned_sequences")
    est = _finding(doc, "misaligned_sequences").estimate
    assert est["share"] == pytest.approx(1 / 40, rel=0.1) and est["first_ids"] == "0"


def _later(golden: dict, full_distributions: dict) -> dict:
    c = _copy(golden)
    rows = np.arange(golden["sequence_id"].size)
    c["trainer_logprob"] = full_distributions["later"][rows, golden["token_id"]]
    c["trainer_logprobs_at_sampler_topk"] = [
        full_distributions["later"][i, ids] for i, ids in enumerate(golden["sampler_topk_ids"])
    ]
    return c


def test_the_later_checkpoint_as_trainer_reads_as_policy_lag(golden, full_distributions, tmp_path):
    c = _later(golden, full_distributions)
    meta = dict(golden["meta"], semantics={"policy_lag": True, "policy_lag_note": "trainer: tiny-qwen3-later"})
    doc = doctor(_write(tmp_path, c, meta=meta))
    assert doc.top.cause == "policy_lag" and doc.top.status == "detected"
    assert not doc.top.pipeline and doc.verdict == "expected"  # declared by the run: expected, exit 0
    # the headline names what was found and why doctor exits 0, never "numerics"
    assert doc.headline.startswith("expected: policy_lag") and "exits 0" in doc.headline, doc.headline
    assert not [f.cause for f in doc.findings if f.status == "detected" and f.pipeline]


def test_a_step_with_other_weights_is_found_as_a_jump(golden, full_distributions, tmp_path):
    c = _copies(golden, 6)
    rows = golden["sequence_id"].size
    c["step"] = np.repeat(np.arange(6), rows)
    c["trainer_logprob"][4 * rows : 5 * rows] = _later(golden, full_distributions)[
        "trainer_logprob"
    ]  # a bad sync at step 4
    doc = doctor(_write(tmp_path, c))
    _only(doc, "step_jump")
    assert _finding(doc, "step_jump").estimate["first_step"] == 4


# -- what a file lacks, MoE replay, the command line ------------------------------------------------------


def test_a_file_with_the_required_columns_only_says_what_each_detector_needs(golden, tmp_path):
    c = {k: golden[k] for k in COLUMNS[:5]}
    doc = doctor(_write(tmp_path, dict(c, meta={})))
    assert doc.verdict == "numerics"
    by = {f.cause: f for f in doc.findings}
    assert by["step_jump"].needs == ["step"] and by["routing_replay"].status == "not_checked"
    # no top-k: the temperature fit falls back to the sampled tokens' slope and says an exact fit needs top-k
    assert by["temperature"].status == "clear" and "top-k" in by["temperature"].sentence
    # no advantage, no steps, no declaration: nothing looked for a lag, so it says what it needs
    assert by["policy_lag"].status == "not_checked" and "semantics.policy_lag" in by["policy_lag"].needs
    # no dtype recorded: no published row is compared
    assert all("does not record its precision" in p.sentence for p in doc.placements)


def test_a_run_too_small_for_any_fit_says_so_and_report_counts_the_checks_not_run(golden, tmp_path):
    from mismatchscope.render.doctor_table import top_line

    keep = np.flatnonzero(golden["sequence_id"] == golden["sequence_id"][0])[:30]  # 30 rows < the 50 a fit needs
    c = {k: ([v[i] for i in keep] if isinstance(v, list) else v[keep]) if k != "meta" else v for k, v in golden.items()}
    doc = doctor(_write(tmp_path, c))
    # the file has top-k: what the temperature fit lacks is tokens, not the lists
    t = _finding(doc, "temperature")
    assert t.status == "not_checked" and t.needs == ["at least 50 tokens"], t.sentence
    # "no pipeline cause seen" with most checks not run: report's line says how many (all but policy_lag, which
    # reads the run's declaration)
    checks = [f for f in doc.findings if f.cause != "numerics"]
    skipped = [f.cause for f in checks if f.status == "not_checked"]
    assert doc.top.cause == "numerics" and len(skipped) == len(checks) - 1
    assert f"({len(skipped)} of {len(checks)} checks not run)" in top_line(doc)


def test_a_clear_shift_check_shows_the_best_other_alignment():
    doc = doctor(str(GOLDEN))
    f = _finding(doc, "shifted")
    assert f.status == "clear"
    recorded, other = f.evidence  # the recorded gap, then the best k != 0: never the recorded one again
    assert recorded.value is not None and other.value is not None
    assert "moved 0" not in other.statistic and other.value > 2 * recorded.value, other


def test_a_routing_replay_that_did_nothing_is_found(tmp_path):
    from dataclasses import replace

    from tests.routes_fixture import META, write_run

    # RUN_ROWS: 4 completion tokens have both sides' routes (10/0, 10/1, 10/2, 20/0; 20/1's sampler row is null);
    # 10/1 (L1) and 20/0 (L1, L2) flip: a rate of 2/4, where a replay that held gives 0
    replayed = doctor(str(write_run(tmp_path / "replayed", meta=replace(META, replay="ids"))))
    f = _finding(replayed, "routing_replay")
    assert f.status == "detected" and replayed.verdict == "pipeline"
    assert f.estimate["route_flip_rate"] == pytest.approx(2 / 4)
    plain = doctor(str(write_run(tmp_path / "plain")))
    assert _finding(plain, "routing_replay").status == "clear"


def test_the_command_exits_by_verdict_and_its_json_validates(golden, tmp_path):
    import jsonschema

    from tests.helpers import cli

    schema = json.loads((REPO / "docs" / "schemas" / "doctor.json").read_text())
    clean = cli("doctor", str(GOLDEN), "--format", "json")
    assert clean.returncode == 0, clean.stderr
    jsonschema.validate(json.loads(clean.stdout), schema, cls=jsonschema.Draft202012Validator)
    c = _copy(golden)
    c["sampler_logprob"] = bf16_round(golden["sampler_logprob"])
    bad = cli("doctor", _write(tmp_path, c), "--format", "json")
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    jsonschema.validate(doc, schema, cls=jsonschema.Draft202012Validator)
    assert doc["verdict"] == "pipeline" and doc["top"]["cause"] == "low_precision"
    table = cli("doctor", str(GOLDEN))
    assert table.returncode == 0 and "numerics" in table.stdout
    missing = cli("doctor", str(tmp_path / "nothing.parquet"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr


def test_the_golden_pairs_imported_from_a_nemo_rl_dump_read_as_numerics(golden, tmp_path):
    from mismatchscope.importers import import_run
    from tests.importers.layouts import nemo_sample, write_nemo_step

    seq = golden["sequence_id"]
    samples = []
    for s in np.unique(seq):
        rows = np.flatnonzero(seq == s)
        samples.append(
            nemo_sample(
                [1, 2, 3],
                golden["token_id"][rows].tolist(),
                golden["sampler_logprob"][rows].tolist(),
                golden["trainer_logprob"][rows].tolist(),
                float(golden["advantage"][rows[0]]),
                0.0,
            )
        )
    write_nemo_step(tmp_path / "logs", 7, samples)
    import_run("nemo-rl", tmp_path / "logs", tmp_path / "run")
    doc = doctor(str(tmp_path / "run"))
    assert doc.verdict == "numerics" and doc.top.cause == "numerics"
    assert _finding(doc, "step_jump").status == "not_checked"  # one step: a jump needs 5


def test_report_prints_the_top_finding_in_one_line_and_keeps_its_json():
    from tests.helpers import cli

    table = cli("report", str(GOLDEN))
    assert table.returncode == 0, table.stderr
    line = next(x for x in table.stdout.splitlines() if x.startswith("doctor:"))
    # the golden run: numerics, and its RMS gap placed among the fp16 rows (0.00129 against 0.00501-0.0057)
    assert line.startswith("doctor: numerics:") and "3.9x below" in table.stdout
    # the checks that need routes, steps, minibatches, turns or a diagnose run could not run: the line says how
    # many (the run's provenance, read from its configuration, gives contract_difference and fallback theirs)
    assert "(7 of 18 checks not run)" in " ".join(table.stdout.split())
    assert "mismatchscope doctor" in table.stdout
    assert "doctor" not in json.loads(cli("report", str(GOLDEN), "--format", "json").stdout)


def test_a_gap_that_grows_with_the_step_lag_reads_as_policy_lag(golden, full_distributions, tmp_path):
    c = _copies(golden, 6)  # 48 sequences: copies 0-2 scored with the sampler's weights (lag 0), 3-5 a step later
    rows = golden["sequence_id"].size
    lag = np.repeat([0, 0, 0, 1, 1, 1], rows)
    c["sampler_step"], c["trainer_step"] = np.full(lag.size, 10), 10 + lag
    later = _later(golden, full_distributions)["trainer_logprob"]
    c["trainer_logprob"] = np.where(lag == 1, np.tile(later, 6), c["trainer_logprob"])
    doc = doctor(_write(tmp_path, c))
    f = _finding(doc, "policy_lag")
    assert doc.top.cause == "policy_lag" and f.status == "detected" and f.confidence == "high"
    # the step columns record the lag: asynchronous by design, not a pipeline problem
    assert not f.pipeline and doc.verdict == "expected"
    # two lags: the slope is the lag-1 sequences' mean |gap| minus the lag-0 ones', per step
    mean_gap = [np.mean(np.abs(lp - golden["sampler_logprob"])) for lp in (golden["trainer_logprob"], later)]
    assert f.estimate["effect_of"] == "step lag (nats per step)"
    assert f.estimate["effect"] == pytest.approx(mean_gap[1] - mean_gap[0], rel=0.1)
    low = f.estimate["effect_low"]
    assert isinstance(low, float) and low > 0


def test_doctor_reads_nothing_of_a_report_its_headline_pass_leaves_out(golden, tmp_path):
    """doctor's pass keeps the report's sums alone (``AnalysisRequest.headline``): its document is the one report's
    full pass gives, on a clean run, the simulated pairs and a run with a cause found (a log2 sampler), its lists
    alone and with the summaries every writer adds now. A cause that came to read a quantile or a top-k bound
    would see None here, and the two would differ."""
    from mismatchscope.analysis.engine import AnalysisRequest, run_plan
    from mismatchscope.analysis.summaries import write_token_shard
    from mismatchscope.doctor.run import examine_result, run_provenance, sampled_pass
    from mismatchscope.documents import to_json

    c = _copy(golden)
    c["sampler_logprob"] = golden["sampler_logprob"] / math.log(2)
    c["sampler_topk_logprobs"] = [v / math.log(2) for v in golden["sampler_topk_logprobs"]]
    listed = _write(tmp_path, c)
    summarised = str(write_token_shard(tmp_path / "summarised.parquet", pq.read_table(listed).to_pydict(), c["meta"]))
    assert "topk_tv_lower" in pq.read_schema(summarised).names
    for path in (str(GOLDEN), str(SIMULATED), listed, summarised):
        plan, collector = sampled_pass(path, AnalysisRequest(report=True, masks=False), None)
        assert not plan.headline
        full = examine_result(
            run_plan(plan, sink=collector.sink()), collector.finish(), None, None, run_provenance(path)
        )
        assert json.dumps(to_json(doctor(path))) == json.dumps(to_json(full)), path
