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
from pathlib import Path

import jsonschema
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
    # the printed document and diagnose.json both name the pictures they drew
    written = json.loads((diag["out"] / "diagnose.json").read_text())
    assert written["plots"] == diag["payload"]["plots"]
    assert Path(diag["payload"]["plots"]["locate"]).name == "diagnose_locate.png"
    assert Path(diag["payload"]["plots"]["pareto"]).is_file()


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

    from mismatchscope.diagnose.document import DiagnoseDocument
    from mismatchscope.documents import from_json
    from mismatchscope.render.diagnose_table import render
    from tests.project.test_tables_at_80_columns import WIDTH, assert_readable

    # the JSON diagnose printed, typed again (its schema version is the document's, not a field)
    doc = from_json(DiagnoseDocument, {k: v for k, v in diag["payload"].items() if k != "schema_version"})
    buf = StringIO()
    render(Console(file=buf, width=WIDTH, soft_wrap=False), doc)
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
