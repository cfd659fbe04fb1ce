"""``mismatchscope diagnose``: decomposition, attribution, determinism, cost.

Real vLLM (CPU build) and real transformers on the bundled checkpoint, no
engine mocks. One small diagnose run (4 prompts, 2 samples, 8 tokens; a
float16 sampler against a float32 trainer) is shared by the module: its
variants are chosen for effects known from what they do:

* ``sampler.dtype=float32``: the sampler then runs what the trainer runs, so
  most of the float16 sampler's gap goes away, and the float32-vs-float32
  total gap is at the few-1e-6 level measured for vLLM fp32 vs HF fp32;
* ``trainer.dtype=bfloat16``: bfloat16 keeps 8 mantissa bits, so the
  trainer's error against the float64 reference grows by orders of
  magnitude and the decomposition gives the trainer most of the budget;
* ``trainer.fp32_lm_head=false``: the baseline's own value, so every token
  is scored bit-identically and no effect can be significant;
* ``sampler.engine.max_model_len=100000``: a well-typed engine argument (the
  checks before any engine pass it), but vLLM refuses a context beyond the
  model's 320 positions when the engine starts, so that variant fails, is
  reported with its reason, the others still run and the command exits 3.
  (A misspelt engine argument is refused before any engine starts:
  tests/cli/test_diagnose.py.)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from tests.helpers import REPO, cli

SAMPLE = REPO / "sample_data"
DENSE = SAMPLE / "tiny-qwen3"

needs_sample = pytest.mark.skipif(
    not DENSE.is_dir(), reason="sample checkpoint missing: run sample_data/build_sample_models.py"
)

VARIANTS = [
    "sampler.dtype=float32",
    "trainer.dtype=bfloat16",
    "trainer.fp32_lm_head=false",
    "sampler.engine.max_model_len=100000",
]


# ------------------------------------------------------------ pure parts: hand-derived numbers


def test_decomposition_by_hand():
    from mismatchscope.diagnose.decompose import decompose

    # lq = [-1.0, -2.0], lp = [-1.1, -1.9], lr = [-1.05, -2.0]
    # e_s = lq - lr = [0.05, 0], e_t = lp - lr = [-0.05, 0.1]
    # mean e_s^2 = 0.0025 / 2 = 0.00125; mean e_t^2 = (0.0025 + 0.01) / 2 = 0.00625
    # mean e_s e_t = (-0.0025 + 0) / 2 = -0.00125
    # total: l = e_t - e_s = [-0.1, 0.1], mean l^2 = 0.01 = 0.00125 + 0.00625 + 2 * 0.00125
    # shares: 0.00125 / 0.0075 = 1/6 and 5/6; correlation -0.00125 / sqrt(0.00125 * 0.00625) = -1/sqrt(5)
    d = decompose(np.array([-1.0, -2.0]), np.array([-1.1, -1.9]), np.array([-1.05, -2.0]))
    assert d["tokens"] == 2
    assert d["sampler_mse"] == pytest.approx(0.00125)
    assert d["trainer_mse"] == pytest.approx(0.00625)
    assert d["cross"] == pytest.approx(-0.00125)
    assert d["total_mse"] == pytest.approx(0.01)
    assert d["sampler_share"] == pytest.approx(1 / 6)
    assert d["trainer_share"] == pytest.approx(5 / 6)
    assert d["correlation"] == pytest.approx(-1 / math.sqrt(5))


def test_determinism_compare_by_hand():
    from mismatchscope.diagnose.determinism import compare

    # sequence 1: tokens [1, 2, 3] vs [1, 2, 4]: the prefix stays identical for 2 tokens;
    #   logprobs there: -0.5 == -0.5 (bit-identical), -1.0 vs -1.25 (differs by 0.25)
    # sequence 2: [7] vs [7], -2.0 == -2.0
    # tokens: 4 in the first run, 3 identical -> 0.75; of those 3, 2 bit-identical -> 2/3; max diff 0.25
    r = compare([[1, 2, 3], [7]], [[-0.5, -1.0, -3.0], [-2.0]], [[1, 2, 4], [7]], [[-0.5, -1.25, -9.0], [-2.0]])
    assert r == {
        "tokens": 4,
        "share_tokens_identical": 0.75,
        "share_logprobs_bit_identical": 2 / 3,
        "max_abs_diff": 0.25,
    }


def test_pareto_front_by_hand():
    from mismatchscope.diagnose.cost import pareto_front

    # (mismatch, throughput): a (1, 10) and c (0.1, 5) trade off; b (2, 8) is beaten by a on both; d ties a exactly
    pts = [("a", 1.0, 10.0), ("b", 2.0, 8.0), ("c", 0.1, 5.0), ("d", 1.0, 10.0)]
    assert pareto_front(pts) == ["a", "c", "d"]


def test_paired_bootstrap_of_an_unchanged_variant_is_exactly_zero():
    from types import SimpleNamespace

    from mismatchscope.diagnose.effects import Bootstrap, deltas

    sums = {
        "n": np.array([3.0, 2.0, 5.0]),
        "sum_abs_l": np.array([0.3, 0.1, 0.2]),
        "sum_tv": np.array([0.03, 0.01, 0.02]),
        "sum_k3": np.array([1e-3, 2e-3, 3e-3]),
    }
    r = SimpleNamespace(per_sequence=SimpleNamespace(sequence_id_S=np.array([0, 1, 2]), sums=sums))
    d = deltas(r, r, paired=True, boot=Bootstrap(resamples=200))
    # the same resample applies to both sides, so every replicate of the difference is 0
    for m in d.values():
        assert (m["estimate"], m["ci_low"], m["ci_high"], m["significant"], m["bootstrap"]) == (
            0.0,
            0.0,
            0.0,
            False,
            "paired",
        )
    # mean |l| = (0.3 + 0.1 + 0.2) / 10 = 0.06
    assert d["abs_logprob_diff_mean"]["baseline"] == pytest.approx(0.06)


def test_matrix_file_groups_keys_and_apply_merges_engine_args(tmp_path):
    from mismatchscope.diagnose.variants import Configuration, apply, load_matrix
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    path = tmp_path / "m.toml"
    path.write_text(
        '[variant.fp32_everything]\nsampler.dtype = "float32"\nsampler.engine.hf_overrides = {head_dtype = "float32"}\n'
        '"trainer.fp32_lm_head" = true\n\n[variant.invariant]\nsampler.env.VLLM_BATCH_INVARIANT = 1\n'
    )
    a, b = load_matrix(path)
    assert (a.name, a.side, b.side) == ("fp32_everything", "sampler", "sampler")
    assert a.changes == {
        "sampler.dtype": "float32",
        "sampler.engine.hf_overrides": {"head_dtype": "float32"},
        "trainer.fp32_lm_head": True,
    }
    base = Configuration(SamplerConfig(dtype="float16", engine_args={"seed": 1}), TrainerConfig())
    cfg = apply(base, a)
    assert cfg.sampler.dtype == "float32" and cfg.trainer.fp32_lm_head is True
    assert cfg.sampler.engine_args == {"seed": 1, "hf_overrides": {"head_dtype": "float32"}}
    assert apply(base, b).env == {"VLLM_BATCH_INVARIANT": "1"}


def test_default_matrix_on_cpu_skips_gpu_knobs_with_reasons():
    from mismatchscope.diagnose.variants import Configuration, default_matrix
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    m = default_matrix("cpu", Configuration(SamplerConfig(dtype="float16"), TrainerConfig()))
    run = {v.name: v for v in m if v.skip_reason is None}
    skipped = {v.name: v.skip_reason for v in m if v.skip_reason}
    assert set(run) == {
        "sampler.dtype=float32",
        "sampler.fp32_lm_head",
        "sampler.kv_cache_dtype=fp8",
        "sampler.compile",
        "sampler.max_num_seqs=1",
        "sampler.prefix_caching",
        "trainer.dtype=bfloat16",
        "trainer.attn=eager",
        "trainer.attn=sdpa",
        "trainer.fp32_lm_head",
        "zero",
    }
    assert set(skipped) == {
        "sampler.dtype=bfloat16",
        "sampler.batch_invariant",
        "sampler.attention=FLASHINFER",
        "sampler.chunked_prefill",
        "trainer.attn=flash_attention_2",
    }
    assert all(r.startswith("needs a GPU") for k, r in skipped.items() if k != "sampler.chunked_prefill")
    assert "CPU Generator does not use offset" in skipped["sampler.chunked_prefill"]


# ------------------------------------------------------------ bad input: one line, exit 2, no engine


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--vary", "sampler.dtyp=float32"],
            "error: unknown variant key 'sampler.dtyp' (use sampler.FIELD, sampler.engine.NAME, sampler.env.NAME or trainer.FIELD; "
            "fields: sampler.{kind,dtype,fp32_lm_head,enforce_eager,max_num_seqs,max_model_len,gpu_memory_utilization,"
            "tensor_parallel_size,zero}, trainer.{dtype,attn_implementation,fp32_lm_head,batch_tokens,lm_head_chunk,"
            "replay_routes,zero})",
        ),
        (["--vary", "trainer.fp32_lm_head=3"], "error: trainer.fp32_lm_head takes true or false, got 3"),
        (["--vary", "sampler.max_num_seqs=many"], 'error: sampler.max_num_seqs takes an integer, got "many"'),
        (
            ["--matrix", "{bad}"],
            "error: {bad} is not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 11)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_engine(tmp_path, args, message):
    bad = tmp_path / "bad.toml"
    bad.write_text("[variant.x\nsampler.dtype = 1\n")
    args = [a.replace("{bad}", str(bad)) for a in args]
    out = tmp_path / "out"
    r = cli("diagnose", str(DENSE), "--out", str(out), *args)
    assert r.returncode == 2
    assert r.stderr == message.replace("{bad}", str(bad)) + "\n"
    assert r.stdout == ""
    assert not out.exists()  # nothing was started


# the reference forward: tests/diagnose/test_reference.py pins it against a float64 forward written there


# ------------------------------------------------------------ one real diagnose run


@pytest.fixture(scope="module")
def diag(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diagnose")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text("".join((SAMPLE / "prompts.jsonl").read_text().splitlines(keepends=True)[:4]))
    out = tmp / "out"
    args = [
        "diagnose",
        str(DENSE),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "-n",
        "2",
        "--max-tokens",
        "8",
        "--sampler-dtype",
        "float16",
        "--trainer-dtype",
        "float32",
        "--bootstrap",
        "500",
        "--format",
        "json",
        "--plots",
        str(tmp / "plots"),
        "--locate",
        "--locate-sequences",
        "2",
    ]
    for v in VARIANTS:
        args += ["--vary", v]
    r = cli(*args, timeout=900)
    assert r.returncode in (0, 3), r.stderr[-3000:]
    return {"rc": r.returncode, "payload": json.loads(r.stdout), "out": out, "tmp": tmp, "stderr": r.stderr}


def _variant(diag, name):
    return next(v for v in diag["payload"]["variants"] if v["name"] == name)


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_locate_runs_inside_each_engine_and_its_chain_closes(diag):
    """--locate on the real run (docs/diagnose.md): the float16 engine parts from the float32 trainer at the
    embeddings; the float32 engine's embedding equals the trainer's to the bit; every vLLM capture's logprob
    point equals that engine's own prompt logprobs; a failed variant has no localisation."""
    entries = {e["configuration"]: e for e in diag["payload"]["locate"]}
    assert set(entries) == {"baseline", "sampler.dtype=float32", "trainer.dtype=bfloat16", "trainer.fp32_lm_head=false"}
    base, f32 = entries["baseline"], entries["sampler.dtype=float32"]
    assert base["status"] == f32["status"] == "ok"
    assert base["verdict"]["first_difference"] == base["verdict"]["first_parting"] == "embed"
    assert f32["points"][0]["bit_equal"] and f32["verdict"]["first_difference"] != "embed"
    assert base["sampler_closure"] == f32["sampler_closure"] == 0.0
    assert entries["trainer.dtype=bfloat16"]["sequences"] == base["sequences"]  # the baseline's tokens, reused
    assert (diag["tmp"] / "plots" / "diagnose_locate.png").is_file()


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_a_failing_engine_is_reported_and_the_others_still_run(diag):
    failed = _variant(diag, "sampler.engine.max_model_len=100000")
    assert failed["status"] == "failed"
    assert "max_model_len" in failed["reason"]
    assert diag["rc"] == 3
    assert all(_variant(diag, v)["status"] == "ok" for v in VARIANTS[:3])
    assert "sampler.engine.max_model_len=100000 failed to run" in diag["payload"]["reading"]


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_float16_sampler_gap_is_owned_by_the_sampler(diag):
    p = diag["payload"]
    assert p["reference"]["dtype"] == "float64"
    shares = p["decomposition"]["shares"]
    assert shares["sampler_share"] > 0.9
    total = p["decomposition"]["total"]["metrics"]["abs_logprob_diff_mean"]
    s_ref = p["decomposition"]["sampler_vs_reference"]["metrics"]["abs_logprob_diff_mean"]
    t_ref = p["decomposition"]["trainer_vs_reference"]["metrics"]["abs_logprob_diff_mean"]
    assert t_ref < 0.01 * s_ref
    assert s_ref == pytest.approx(total, rel=0.05)


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_float32_sampler_removes_most_of_the_gap_and_fp32_vs_fp32_is_tiny(diag):
    base = diag["payload"]["baseline"]["metrics"]["abs_logprob_diff_mean"]
    v = _variant(diag, "sampler.dtype=float32")
    d = v["delta"]["abs_logprob_diff_mean"]
    # resampled tokens: independent bootstrap, unless the new sampler drew every token of the baseline again
    assert d["bootstrap"] == ("paired" if v["tokens_changed_share"] == 0 else "independent")
    assert d["significant"] and d["ci_high"] < 0
    assert v["metrics"]["abs_logprob_diff_mean"] < 0.1 * base
    assert v["metrics"]["abs_logprob_diff_mean"] < 1e-4  # float32 vs float32
    assert v["throughput"]["startup_s"] > 0 and v["throughput"]["sampler_tokens_per_s"] > 0


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_bfloat16_trainer_adds_a_gap_attributed_to_the_trainer(diag):
    p = diag["payload"]
    v = _variant(diag, "trainer.dtype=bfloat16")
    d = v["delta"]["abs_logprob_diff_mean"]
    assert d["bootstrap"] == "paired" and d["significant"] and d["ci_low"] > 0
    base_t = p["decomposition"]["trainer_vs_reference"]["metrics"]["abs_logprob_diff_mean"]
    assert v["gaps"]["trainer_vs_reference"]["metrics"]["abs_logprob_diff_mean"] > 100 * base_t
    assert v["decomposition"]["trainer_share"] > p["decomposition"]["shares"]["trainer_share"]
    assert v["tokens_changed_share"] > 0.5
    assert v["throughput"]["startup_s"] is None  # no sampling: the baseline's samples were rescored


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_resetting_the_baselines_own_value_changes_nothing(diag):
    v = _variant(diag, "trainer.fp32_lm_head=false")
    assert v["tokens_changed_share"] == 0.0
    assert not any(d["significant"] for d in v["delta"].values())
    assert v["name"] in diag["payload"]["no_effect"]
    assert "sampler.dtype=float32" not in diag["payload"]["no_effect"]


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_determinism_and_self_consistency_are_measured(diag):
    det = diag["payload"]["determinism"]
    assert set(det) == {
        "sampler_repeat_same_seed",
        "sampler_prefill_alone_vs_batch",
        "sampler_prefill_shuffled_vs_batch",
        "trainer_alone_vs_batch",
        "trainer_shuffled_vs_batch",
    }
    for d in det.values():
        assert d["tokens"] > 0 and 0 <= d["share_logprobs_bit_identical"] <= 1 and d["max_abs_diff"] >= 0
    # the same engine, prompts, batch and per-request seeds: the same tokens
    assert det["sampler_repeat_same_seed"]["share_tokens_identical"] == 1.0
    sc = diag["payload"]["decomposition"]["sampler_decode_vs_prefill"]
    assert sc["status"] == "ok" and "raw" in sc["note"]  # T = 1, no truncation: like with like


@pytest.mark.vllm
@pytest.mark.slow
@needs_sample
def test_every_pair_is_an_ordinary_run_directory(diag, capsys):
    from mismatchscope.cli.main import main

    p = diag["payload"]
    dirs = [
        p["decomposition"][k]["run_dir"]
        for k in ("total", "sampler_vs_reference", "trainer_vs_reference", "sampler_decode_vs_prefill")
    ]
    dirs += [_variant(diag, v)["run_dir"] for v in VARIANTS[:3]]
    for d in dirs:
        with pytest.raises(SystemExit) as e:
            main(["report", d, "--format", "json"])
        assert e.value.code in (0, None)
        report = json.loads(capsys.readouterr().out)
        assert report["tokens"] > 0 and report["metrics"]["abs_logprob_diff_mean"] is not None
    # the numbers diagnose printed are report's numbers
    written = json.loads(Path(diag["out"] / "diagnose.json").read_text())
    jsonschema.validate(written, json.loads((REPO / "docs" / "schemas" / "diagnose.json").read_text()))
    total = written["decomposition"]["total"]["metrics"]
    assert total["abs_logprob_diff_mean"] == p["baseline"]["metrics"]["abs_logprob_diff_mean"]
    assert (diag["tmp"] / "plots" / "diagnose_pareto.png").stat().st_size > 1000
    assert "baseline" in p["pareto_front"] or any(v["name"] in p["pareto_front"] for v in p["variants"])


def test_timing_ratios_by_hand():
    """Rounds of 100 tokens; the other side costs 0.01 s a token on both. Baseline 2 s, variant 1 s: (0.02 + 0.01)
    / (0.01 + 0.01) = 1.5; 4 s and 2 s: 0.05 / 0.03 = 1.667; 2 s and 2 s: 1. Median 1.5. Its bootstrap interval:
    a resample's median is 1 when at least two of its three draws are (3 (1/3)^2 (2/3) + (1/3)^3 = 7/27 of
    resamples, above 2.5%), 1.667 likewise: so 1 to 1.667, wider than 1.25x: not rankable. Rounds alternate
    baseline, variant, baseline, ..."""
    from mismatchscope.diagnose.timing import MIN_ROUNDS, SLOW_MIN_ROUNDS, Round, interleave, summarize

    s = summarize(
        [(Round(2, 100), Round(1, 100)), (Round(4, 100), Round(2, 100)), (Round(2, 100), Round(2, 100))],
        "sampler",
        0.01,
    )
    assert s["ratios"] == pytest.approx([1.5, 5 / 3, 1.0])
    assert (s["median"], s["low"], s["high"]) == pytest.approx((1.5, 1.0, 5 / 3))
    assert s["rankable"] is False and s["rounds"] == 3
    steady = summarize([(Round(2, 100), Round(1, 100))] * 3, "sampler", 0.0)
    assert steady["median"] == pytest.approx(2.0) and steady["rankable"] is True
    calls = []

    def side(name, seconds):
        def one():
            calls.append(name)
            return Round(seconds, 10)

        return one

    pairs = interleave(side("b", 1.0), side("v", 2.0))  # 3 s a pair, over the 6 s budget after 2: the minimum
    assert len(pairs) == MIN_ROUNDS and calls == ["b", "v"] * MIN_ROUNDS
    calls.clear()
    pairs = interleave(side("b", 1.0), side("v", 30.0))  # a variant this slow: the smaller minimum
    assert len(pairs) == SLOW_MIN_ROUNDS and calls == ["b", "v"] * SLOW_MIN_ROUNDS
    calls.clear()
    assert len(interleave(side("b", 0.1), side("v", 0.1))) == 30  # short rounds: up to the most rounds


@pytest.mark.vllm
@pytest.mark.slow
def test_throughput_ratios_come_from_interleaved_rounds(diag):
    from mismatchscope.diagnose.timing import MAX_ROUNDS, SLOW_MIN_ROUNDS

    timed = [v for v in diag["payload"]["variants"] if v["status"] == "ok"]
    assert timed
    for v in timed:
        t = v["throughput"]["timing"]
        assert SLOW_MIN_ROUNDS <= t["rounds"] <= MAX_ROUNDS and len(t["ratios"]) == t["rounds"]
        assert t["low"] <= t["median"] <= t["high"] and v["throughput"]["relative_to_baseline"] == t["median"]
        assert t["side_timed"] == v["side"]


@pytest.mark.vllm
@pytest.mark.slow
def test_diagnose_tables_fit_80_columns_and_agree_with_the_json(diag):
    from io import StringIO

    from rich.console import Console

    from mismatchscope.render.diagnose_tables import render
    from tests.contracts.test_tables_at_80_columns import WIDTH, assert_readable

    buf = StringIO()
    render(Console(file=buf, width=WIDTH, soft_wrap=False), diag["payload"])
    assert_readable(buf.getvalue(), diag["payload"])


@pytest.mark.vllm
@pytest.mark.slow
def test_diagnose_prints_only_its_own_lines(diag):
    """Its progress notes, its warnings and the line naming the log: no loading bars, no torch notices."""
    own = (
        "baseline: ",
        "reference forward",
        "determinism: ",
        "variant ",
        "locate: ",
        "warning: ",
        "the engines' output",
    )
    lines = [line for line in diag["stderr"].splitlines() if line.strip()]
    assert lines and all(line.startswith(own) for line in lines), diag["stderr"]
    assert (diag["out"] / "engine.log").is_file()
