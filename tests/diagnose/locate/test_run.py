"""``--locate``: the capture points, the differences, the verdict, on real transformers models.

The pins the feature is judged by: a checkpoint that differs from the sampler's in one tensor is located at that
layer and op with every earlier point byte-equal; a float16 side against a float32 one starts at the embeddings;
eager attention against sdpa starts at the first attention; the float64 reference against itself is 0
everywhere. Each runs the real models (tiny, a few seconds together); the vLLM side is pinned in
tests/probe/samplers/test_vllm_offline_capture.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mismatchscope.diagnose.locate.compare import compare, locate_result, token_differences, verdict
from mismatchscope.diagnose.locate.points import (
    Sequence,
    SideCapture,
    point_names,
    sample_positions,
    source,
)

REPO = Path(__file__).resolve().parents[3]
DENSE = REPO / "sample_data" / "tiny-qwen3"
MOE = REPO / "sample_data" / "tiny-qwen3-moe"
SEQUENCES = [
    Sequence(list(range(3, 15)), list(range(20, 36)), "a"),
    Sequence(list(range(5, 9)), list(range(50, 70)), "b"),
]
META = dict(
    sampler="s",
    trainer="t",
    reference="r",
    sampler_note="",
    sampler_closure=None,
    token_budget=64,
    seconds=0.0,
    measure="",
)


def _capture(info, dtype: str, attn: str | None = None, label: str = "side") -> SideCapture:
    from mismatchscope.diagnose.locate.run import trainer_capture
    from mismatchscope.probe.trainer import HFTrainer
    from mismatchscope.probe.types import TrainerConfig

    return trainer_capture(HFTrainer(info, TrainerConfig(dtype=dtype, attn_implementation=attn)), info, SEQUENCES, 64)


def _locate(info, s: SideCapture, t: SideCapture, ref):
    from mismatchscope.probe.route_capture import moe_layers_of

    reference, r = ref
    moe = moe_layers_of(reference.model, info.model_type)
    names = point_names(info.config["num_hidden_layers"], set(moe.routers) if moe else set())
    return locate_result(s, t, r, names, SEQUENCES, 64, info.config.get("num_experts_per_tok"), META)


def _reference(info):
    from mismatchscope.diagnose.locate.run import reference_capture
    from mismatchscope.diagnose.reference import load_reference

    reference = load_reference(info, dtype="float64")
    return reference, reference_capture(reference, info, SEQUENCES, 64)


@pytest.fixture(scope="module")
def dense():
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    if not DENSE.is_dir():
        pytest.skip("sample checkpoint missing")
    info = inspect_checkpoint(DENSE)
    return info, _reference(info), _capture(info, "float32", "sdpa")


def _one_bit_changed(tmp_path: Path, tensor: str) -> Path:
    """A copy of the dense sample whose ``tensor`` has the last mantissa bit of every element flipped."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / "one-tensor"
    shutil.copytree(DENSE, out)
    [path] = out.glob("*.safetensors")
    weights = load_file(path)
    bits = weights[tensor].clone().view(torch.int32)
    weights[tensor] = (bits ^ 1).view(torch.float32)
    save_file(weights, path, metadata={"format": "pt"})
    return out


def test_a_checkpoint_differing_in_one_tensor_is_located_at_that_layer_and_op(dense, tmp_path):
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    info, ref, sampler = dense
    other = inspect_checkpoint(_one_bit_changed(tmp_path, "model.layers.1.mlp.down_proj.weight"))
    result = _locate(info, sampler, _capture(other, "float32", "sdpa"), ref)
    assert result.verdict.first_difference == "layers.1.mlp"
    names = [p.point for p in result.points]
    before = names[: names.index("layers.1.mlp")]
    assert before and all(p.bit_equal and p.sides.max == 0.0 for p in result.points if p.point in before)
    assert result.points[names.index("layers.1.mlp")].growth == float("inf")  # from exactly 0


def test_float16_against_float32_starts_at_the_embeddings(dense):
    info, ref, trainer = dense
    result = _locate(info, _capture(info, "float16", "sdpa"), trainer, ref)
    assert result.verdict.first_difference == result.verdict.first_parting == "embed"
    embed = result.points[0]
    # the float32 embedding widens to float64 exactly: the trainer equals the reference there
    assert embed.trainer_vs_reference.max == 0.0 and embed.noise_floor == 0.0
    # float16 rounds each element to 11 significant bits: relative error per element <= 2^-11, so the norm ratio too
    assert 0 < embed.sides.max <= 2.0**-11


def test_eager_attention_against_sdpa_starts_at_the_first_attention(dense):
    info, ref, sdpa = dense
    result = _locate(info, sdpa, _capture(info, "float32", "eager"), ref)
    assert result.verdict.first_difference == "layers.0.attn"
    assert [p.bit_equal for p in result.points[:2]] == [True, True]  # embed, layers.0.input_norm


def test_the_float64_reference_against_itself_is_zero_everywhere(dense):
    info, ref, _ = dense
    result = _locate(info, ref[1], ref[1], ref)
    assert all(p.sides.max == 0.0 and p.bit_equal for p in result.points)
    assert result.verdict.first_difference is None and result.verdict.first_parting is None
    assert not result.missing and len(result.points) == 1 + 6 * 2 + 3  # six ops a dense layer: no router


@pytest.mark.slow
def test_the_moe_sample_has_router_points_and_route_flips():
    from mismatchscope.probe.checkpoint import inspect_checkpoint

    if not MOE.is_dir():
        pytest.skip("sample checkpoint missing")
    info = inspect_checkpoint(MOE)
    ref = _reference(info)
    result = _locate(info, _capture(info, "float16"), _capture(info, "float32"), ref)
    routers = [p for p in result.points if p.op == "router"]
    assert [p.layer for p in routers] == [0, 1] and all(p.route_flips is not None for p in routers)
    assert all(p.route_flips.k == 2 for p in routers)  # pyright: ignore[reportOptionalMemberAccess]
    assert result.verdict.first_difference == "embed" and not result.missing


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "mistral", "gemma2"])
def test_held_out_families_locate_eager_against_sdpa_at_the_first_attention(tmp_path, model_type):
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from tests.diagnose.test_reference import _random_checkpoint

    info = inspect_checkpoint(_random_checkpoint(tmp_path, model_type))
    result = _locate(info, _capture(info, "float32", "sdpa"), _capture(info, "float32", "eager"), _reference(info))
    assert not result.missing and len(result.points) == 1 + 6 * 2 + 3
    assert result.verdict.first_difference == "layers.0.attn"


# ------------------------------------------------------------ the arithmetic, by hand


def test_token_differences_are_relative_to_the_reference_and_absolute_for_logprobs():
    a = np.array([[3.0, 4.0], [1.0, 1.0]])
    b = np.array([[0.0, 0.0], [1.0, 1.0]])
    ref = np.array([[0.0, 10.0], [2.0, 0.0]])
    # row 0: ||(3,4)|| / ||(0,10)|| = 5/10; row 1: 0 / 2 = 0
    assert token_differences(a, b, ref, "layers.0.attn").tolist() == [0.5, 0.0]
    # logprob: |a - b| in nats, whatever the reference
    assert token_differences(np.array([[-1.5]]), np.array([[-1.25]]), np.array([[-9.0]]), "logprob").tolist() == [0.25]


def test_the_token_sample_keeps_the_budget_spread_over_all_completions():
    seqs = [Sequence([1, 2, 3], [4] * 10, "a"), Sequence([1], [5] * 30, "b")]
    full = sample_positions(seqs, 100)
    assert full[0].tolist() == list(range(2, 12)) and full[1].tolist() == list(range(30))  # all 40 fit
    kept = sample_positions(seqs, 8)
    # 8 of 40 evenly: concatenated indices round(linspace(0, 39, 8)) = 0, 6, 11, 17, 22, 28, 33, 39
    assert kept[0].tolist() == [2, 8] and kept[1].tolist() == [1, 7, 12, 18, 23, 29]


def test_growth_sources_follow_the_hidden_state_path():
    names = point_names(2, {1})
    assert source("layers.0.input_norm", names) == "embed"
    assert source("layers.1.mlp", names) == "layers.1.mlp_norm"
    assert source("layers.1.router", names) == "layers.1.mlp_norm"
    assert source("layers.1.output", names) == "layers.1.mlp"
    assert source("final_norm", names) == "layers.1.output"


def test_the_verdict_names_the_first_parting_above_the_noise_floor():
    rng = np.random.default_rng(0)
    ref = SideCapture("r")
    s, t = SideCapture("s"), SideCapture("t")
    names = ["embed", "layers.0.input_norm", "final_norm"]
    base = rng.normal(size=(4, 8))
    for n, (ds, dt) in zip(names, [(0.0, 0.0), (1e-3, 1e-3), (1e-3, 1e-1)], strict=True):
        ref.add(n, 0, base)
        s.add(n, 0, base + ds)
        t.add(n, 0, base + dt)
    points, missing = compare(s, t, ref, names, 1)
    v = verdict(points)
    assert not missing and v.first_difference == "final_norm" and v.first_parting == "final_norm"
    # embed and input_norm: s and t both moved by the same constant, so byte-equal to each other
    assert [p.bit_equal for p in points] == [True, True, False]


# ------------------------------------------------------------ the command line and the table


def test_rescore_locate_refuses_a_run_whose_sampler_cannot_start_again(tmp_path):
    import json

    from tests.helpers import cli_no_engine

    run = tmp_path / "served"
    shutil.copytree(REPO / "tests" / "data" / "golden-probe", run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["sampler"]["kind"] = "vllm-server"
    (run / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    r = cli_no_engine("rescore", str(run), "--out", str(out), "--locate")
    assert r.returncode == 2, r.stderr
    assert "--locate starts the run's sampler again" in r.stderr and "--sampler vllm-server" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()  # refused before any rescoring


def _entry(layers: int, configuration: str = "baseline"):
    """A localisation of ``layers`` MoE layers with the widest numbers the table prints."""
    from mismatchscope.diagnose.document import LocateOk
    from mismatchscope.documents import from_json

    names = point_names(layers, set(range(layers)))
    spread = {"median": 1.234e-05, "max": 1.234e-05}  # the widest a difference prints
    points = []
    for n in names:
        layer, op = n.split(".")[1:] if n.startswith("layers.") else (None, n)
        points.append(
            {
                "point": n,
                "layer": None if layer is None else int(layer),
                "op": op,
                "width": 128,
                "sides": spread,
                "sampler_vs_reference": spread,
                "trainer_vs_reference": spread,
                "noise_floor": 1e-7,
                "bit_equal": False,
                "growth": 123.456,
                **(
                    {"route_flips": {"k": 8, "sides": 0.123, "sampler_vs_reference": 0.5, "trainer_vs_reference": 1.0}}
                    if op == "router"
                    else {}
                ),
            }
        )
    verdict_ = {"first_difference": "embed", "first_parting": "embed", "largest_growth": ["embed"], "reading": "r"}
    entry = {
        "configuration": configuration,
        "status": "ok",
        "sampler": "vllm float16",
        "trainer": "transformers float32",
        "reference": "float64",
        "sampler_note": "n",
        "sampler_closure": 0.0,
        "token_budget": 256,
        "tokens": 256,
        "sequences": ["a"],
        "capture_bytes": 0,
        "seconds": 1.0,
        "measure": "relative",
        "points": points,
        "missing": {},
        "verdict": verdict_,
    }
    return from_json(LocateOk, entry)


def test_the_table_reads_whole_at_80_columns_for_a_40_layer_model():
    import io

    from rich.console import Console

    from mismatchscope.render.locate_table import render_locate

    buf = io.StringIO()
    render_locate(Console(file=buf, width=80, color_system=None), _entry(40).result, "baseline")
    text = buf.getvalue()
    rows = [line for line in text.splitlines() if "attn_residual" in line]
    assert len(rows) == 40 and all(len(line) <= 80 for line in text.splitlines())
    from mismatchscope.formatting import num

    widest = num(1.234e-05, 3)
    assert "layers" not in rows[-1] and "39" in rows[-1] and rows[-1].count(widest) == 4  # no number cut


def test_locate_sequences_without_locate_is_refused(tmp_path):
    from tests.helpers import cli_no_engine

    out = tmp_path / "out"
    r = cli_no_engine(
        "rescore", str(REPO / "tests" / "data" / "golden-probe"), "--out", str(out), "--locate-sequences", "2"
    )
    assert r.returncode == 2 and "--locate-sequences needs --locate" in r.stderr and not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("family", ["mixtral", "olmoe", "qwen2_moe", "deepseek_v3"])
def test_moe_families_locate_with_their_routers(tmp_path, family):
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from mismatchscope.probe.route_capture import moe_layers_of
    from tests.probe.test_routes_families import _build

    info = inspect_checkpoint(_build(family, tmp_path))
    ref = _reference(info)
    result = _locate(info, _capture(info, "float32", "sdpa"), _capture(info, "float32", "eager"), ref)
    moe = moe_layers_of(ref[0].model, info.model_type)
    assert moe is not None and [p.layer for p in result.points if p.op == "router"] == sorted(moe.routers)
    assert not result.missing and all(p.route_flips is not None for p in result.points if p.op == "router")
    assert result.verdict.first_difference == "layers.0.attn"


def test_the_token_budget_shrinks_to_keep_the_captures_under_a_gibibyte():
    from mismatchscope.diagnose.locate.run import LocateOptions, fit_budget

    # 40 layers of width 4096, vocabulary 152,064: per token 40 x 6 x 4096 + 2 x 4096 + 152,064 + 1 = 1,143,297
    # numbers at 16 bytes (float32 on each side, float64 in the reference) = 18,292,752 bytes; 2^30 / that = 58.7
    wide = {"hidden_size": 4096, "num_hidden_layers": 40, "vocab_size": 152064}
    assert fit_budget(LocateOptions(), wide).budget == 58
    # the bundled size keeps the default: 16 x (2 x 6 x 128 + 256 + 320 + 1) = 33,808 bytes a token, 256 fit
    assert fit_budget(LocateOptions(), {"hidden_size": 128, "num_hidden_layers": 2, "vocab_size": 320}).budget == 256


def test_the_document_matches_its_generated_schema(dense):
    import json

    jsonschema = pytest.importorskip("jsonschema")
    from mismatchscope.documents import document, jsonable

    info, ref, sdpa = dense
    result = _locate(info, sdpa, _capture(info, "float32", "eager"), ref)  # growth "new" at layers.0.attn: inf
    doc = json.loads(json.dumps(jsonable(document(result)), allow_nan=False))
    jsonschema.validate(doc, json.loads((REPO / "docs" / "schemas" / "locate.json").read_text()))
    assert next(p["growth"] for p in doc["points"] if p["point"] == "layers.0.attn") == "inf"


def test_the_hf_sampler_is_captured_by_the_same_hooks_and_equals_a_like_trainer(dense, tmp_path):
    from mismatchscope.diagnose.locate.run import capture_sampler
    from mismatchscope.probe.samplers import make_sampler
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig

    info, ref, sdpa = dense
    sampler = make_sampler(SamplerConfig(kind="hf", dtype="float32"), info)
    got = capture_sampler(sampler, SamplingConfig(), SEQUENCES, 64, tmp_path / "s.npz")
    assert got.closure is None and "transformers" in got.note
    result = _locate(info, SideCapture.load(tmp_path / "s.npz"), sdpa, ref)
    # the same transformers code on the same weights, one sequence at a time on each side: equal to the bit
    assert result.verdict.first_difference is None and all(p.bit_equal for p in result.points)


def test_a_variant_name_with_brackets_is_printed_as_written():
    import io

    from rich.console import Console

    from mismatchscope.diagnose.document import LocateNotRun
    from mismatchscope.render.locate_table import render_all

    entry = _entry(1, "sampler.engine.x=[1, 2]")
    failed = LocateNotRun("sampler.env.A=[red]", "failed", "why [b]")
    buf = io.StringIO()
    render_all(Console(file=buf, width=80, color_system=None), [entry, failed])
    assert "locate sampler.engine.x=[1, 2]: r" in buf.getvalue()
    assert "locate sampler.env.A=[red]: failed: why [b]" in buf.getvalue()


def test_the_html_section_and_the_picture_of_a_localisation(tmp_path):
    pytest.importorskip("matplotlib")
    from mismatchscope.diagnose.document import LocateNotRun
    from mismatchscope.render.locate_pictures import html_section, write_locate

    entry = _entry(2)
    failed = LocateNotRun("sampler.compile", "failed", "needs eager <mode>")
    html = html_section([entry, failed])
    assert "Where the gap enters" in html and "needs eager &lt;mode&gt;" in html and "<img" in html
    [png] = write_locate([entry, failed], tmp_path)  # a failed entry draws nothing
    assert png.name == "diagnose_locate.png" and png.read_bytes()[:4] == b"\x89PNG"


def test_rescore_locate_of_no_run_says_what_rescore_says(tmp_path):
    from tests.helpers import cli_no_engine

    r = cli_no_engine("rescore", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"), "--locate")
    assert r.returncode == 2 and "is not a probe run directory" in r.stderr and "--locate" not in r.stderr
