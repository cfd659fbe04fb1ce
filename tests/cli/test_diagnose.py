"""``diagnose`` checks the baseline and every variant as ``probe`` checks its options, before any engine starts.

Each refusal is one ``error:`` line, exit code 2, and nothing written: no
``--out``, no engine. The cases run the CLI in-process (``--sampler hf``: no
vLLM import) except one, which runs the real console script. A failure after
the checks removes what the diagnose wrote, so the same command can run again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import REPO, cli

SAMPLE = REPO / "sample_data"
DENSE = SAMPLE / "tiny-qwen3"
MOE = SAMPLE / "tiny-qwen3-moe"
PROMPTS = SAMPLE / "prompts.jsonl"
DTYPES = "float32, float16, bfloat16"

pytestmark = pytest.mark.skipif(not DENSE.is_dir(), reason="sample checkpoint missing")


def _diagnose(capsys, *args: str) -> tuple[int, str, str]:
    from mismatchscope.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["diagnose", *args])
    captured = capsys.readouterr()
    return exit_.value.code, captured.out, captured.err


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--vary", "sampler.dtype=float99"],
            f"variant 'sampler.dtype=float99': --sampler-dtype 'float99' is not a dtype (use one of {DTYPES})",
        ),
        (
            ["--vary", "trainer.dtype=fp99"],
            f"variant 'trainer.dtype=fp99': --trainer-dtype 'fp99' is not a dtype (use one of {DTYPES})",
        ),
        (
            ["--trainer-dtype", "float99", "--vary", "trainer.dtype=float32"],
            f"--trainer-dtype 'float99' is not a dtype (use one of {DTYPES})",
        ),
        (
            ["--vary", "trainer.attn_implementation=flashy"],
            "variant 'trainer.attn_implementation=flashy': --attn-implementation 'flashy' is not an attention implementation "
            "(use one of eager, sdpa, flash_attention_2, flash_attention_3, flash_attention_4, flex_attention "
            "(or a hub kernel, org/repo))",
        ),
        (
            ["--vary", "sampler.engine.foo=1"],
            "variant 'sampler.engine.foo=1': the hf sampler does not take engine args ['foo'] "
            "(it takes attn_implementation, trust_remote_code, batch_size)",
        ),
        (
            ["--vary", "trainer.batch_tokens=0"],
            "variant 'trainer.batch_tokens=0': --trainer-batch-tokens must be at least 1, got 0",
        ),
        (
            ["--vary", "trainer.batch_tokens=-5"],
            "variant 'trainer.batch_tokens=-5': --trainer-batch-tokens must be at least 1, got -5",
        ),
        (
            ["--vary", "trainer.lm_head_chunk=0"],
            "variant 'trainer.lm_head_chunk=0': the trainer's lm_head_chunk must be at least 1, got 0",
        ),
        (
            ["--vary", "sampler.max_num_seqs=0"],
            "variant 'sampler.max_num_seqs=0': --max-num-seqs must be at least 1, got 0",
        ),
        (
            ["--vary", "sampler.gpu_memory_utilization=NaN"],
            "variant 'sampler.gpu_memory_utilization=NaN': --gpu-memory-utilization must be in (0, 1], got nan",
        ),
        (
            ["--vary", "sampler.tensor_parallel_size=0"],
            "variant 'sampler.tensor_parallel_size=0': --tensor-parallel-size must be at least 1, got 0",
        ),
        (
            ["--vary", "sampler.max_model_len=100000"],
            "variant 'sampler.max_model_len=100000': --max-model-len 100000 is beyond the model's context of 320 tokens "
            "(pass at most --max-model-len 320, or leave it out)",
        ),
        (
            ["--vary", "trainer.replay_routes=true"],
            f"variant 'trainer.replay_routes=true': trainer.replay_routes needs a mixture-of-experts checkpoint, and {DENSE} "
            "is dense (drop the variant, or diagnose an MoE checkpoint)",
        ),
        (["--vary", "trainer.replay_routes=1"], "trainer.replay_routes takes true or false, got 1"),
        (
            ["--sampler", "vllm-server"],
            "diagnose starts its own samplers; --sampler vllm-server is not one of them (use --sampler vllm or --sampler hf)",
        ),
        (
            ["--top-k-logprobs", "1000"],
            "--top-k-logprobs 1000 is more than the model's 320 tokens (pass at most --top-k-logprobs 320)",
        ),
        (["--logprobs-mode", "cooked"], "--logprobs-mode 'cooked' (use processed_logprobs or raw_logprobs)"),
    ],
)
def test_every_configuration_is_checked_before_any_engine(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    args = ["--sampler", "hf", *args] if "--sampler" not in args else args
    code, stdout, stderr = _diagnose(capsys, str(DENSE), "--out", str(out), *args)
    assert (code, stdout, stderr) == (2, "", f"error: {message}\n")
    assert not out.exists()


def test_variant_names_are_unique_across_vary_and_matrix_and_own_their_folder(tmp_path, capsys):
    out = tmp_path / "out"
    twice = tmp_path / "twice.toml"
    twice.write_text('[variant."sampler.dtype=float32"]\nsampler.dtype = "float32"\n')
    clash = tmp_path / "clash.toml"
    clash.write_text('[variant."a b"]\nsampler.dtype = "float32"\n[variant.a_b]\ntrainer.dtype = "bfloat16"\n')
    folded = tmp_path / "folded.toml"  # one folder on a case-insensitive file system
    folded.write_text('[variant.Fp32]\nsampler.dtype = "float32"\n[variant.fp32]\ntrainer.dtype = "bfloat16"\n')
    reserved = tmp_path / "reserved.toml"
    reserved.write_text('[variant.baseline]\ntrainer.dtype = "bfloat16"\n')
    cases = [
        (
            ["--vary", "sampler.dtype=float32", "--matrix", str(twice)],
            "variant 'sampler.dtype=float32' is given twice (give each variant once, under one name)",
        ),
        (
            ["--matrix", str(clash)],
            "variants 'a b' and 'a_b' would both be written to a_b/ (rename one of them in the matrix file)",
        ),
        (
            ["--matrix", str(folded)],
            "variants 'Fp32' and 'fp32' would both be written to fp32/ (rename one of them in the matrix file)",
        ),
        (
            ["--matrix", str(reserved)],
            "variant 'baseline' would be written to baseline/, which the baseline uses "
            "(rename the variant in the matrix file)",
        ),
    ]
    for args, message in cases:
        code, stdout, stderr = _diagnose(capsys, str(DENSE), "--sampler", "hf", "--out", str(out), *args)
        assert (code, stdout, stderr) == (2, "", f"error: {message}\n")
        assert not out.exists()


def test_outputs_never_land_on_an_input_or_inside_a_run(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "tokens").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "diagnose_pareto.png").symlink_to(PROMPTS)  # the picture's name, linked to an input
    out = tmp_path / "out"
    cases = [
        (
            ["--out", str(run / "sub")],
            f"--out {run / 'sub'} is inside the run directory {run} (give each run its own folder, outside other runs)",
        ),
        (
            ["--out", str(out), "--html", str(PROMPTS)],
            f"--html {PROMPTS} is an input of this command ({PROMPTS}); writing it would destroy the data "
            "(choose another output path)",
        ),
        (
            ["--out", str(out), "--html", str(DENSE / "config.json")],
            f"--html {DENSE / 'config.json'} is an input of this command ({DENSE / 'config.json'}); writing it would "
            "destroy the data (choose another output path)",
        ),
        (
            ["--out", str(out), "--plots", str(plots)],
            f"--plots {plots / 'diagnose_pareto.png'} is an input of this command ({PROMPTS}); writing it would destroy "
            "the data (choose another output path)",
        ),
    ]
    for args, message in cases:
        code, stdout, stderr = _diagnose(
            capsys, str(DENSE), "--prompts", str(PROMPTS), "--sampler", "hf", "--vary", "trainer.dtype=bfloat16", *args
        )
        assert (code, stdout, stderr) == (2, "", f"error: {message}\n")
        assert not out.exists() and not (run / "sub").exists()
        assert sorted(p.name for p in run.iterdir()) == ["manifest.json", "tokens"]


def test_the_console_script_refuses_a_bad_variant_in_one_line():
    r = cli("diagnose", str(DENSE), "--sampler", "hf", "--vary", "sampler.tensor_parallel_size=0", "--out", "never")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == (
        "error: variant 'sampler.tensor_parallel_size=0': --tensor-parallel-size must be at least 1, got 0\n"
    )


def test_a_diagnose_that_fails_after_its_checks_leaves_nothing_behind(tmp_path, monkeypatch):
    """The baseline's engine dies: the error is raised, and --out is as it was (absent, or empty), so a rerun works."""
    from mismatchscope.diagnose import run as diagnose_run
    from mismatchscope.diagnose.options import DiagnoseOptions
    from mismatchscope.diagnose.run import run_diagnose
    from mismatchscope.errors import SamplerError
    from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig

    def dies(opts, info, progress):
        (opts.out / "baseline").mkdir()
        (opts.out / "baseline.log").write_text("engine died\n")
        raise SamplerError("the baseline sampler failed (engine start-up): boom")

    monkeypatch.setattr(diagnose_run, "_diagnose_locked", dies)
    for existed in (False, True):
        out = tmp_path / f"out-{existed}"
        if existed:
            out.mkdir()
        opts = DiagnoseOptions(
            checkpoint=DENSE,
            prompts=PROMPTS,
            out=out,
            sampling=SamplingConfig(n=1, max_tokens=2),
            sampler=SamplerConfig(kind="hf", dtype="float32"),
            trainer=TrainerConfig(),
            variants=[],
        )
        with pytest.raises(SamplerError):
            run_diagnose(opts)
        assert out.exists() == existed
        assert not existed or list(out.iterdir()) == []


def test_hf_default_matrix_varies_what_the_transformers_sampler_has():
    from mismatchscope.diagnose.variants import ZERO_OPT_IN, Configuration, default_matrix
    from mismatchscope.probe.types import SamplerConfig, TrainerConfig

    m = default_matrix("cpu", Configuration(SamplerConfig(kind="hf", dtype="float16"), TrainerConfig()))
    assert {v.name: v.skip_reason for v in m} == {
        "sampler.dtype=float32": None,
        "sampler.dtype=bfloat16": None,
        "sampler.attn=eager": None,
        "sampler.attn=sdpa": None,
        "trainer.dtype=bfloat16": None,
        "trainer.attn=eager": None,
        "trainer.attn=sdpa": None,
        "trainer.fp32_lm_head": None,
        "trainer.attn=flash_attention_2": "needs a GPU: flash_attention_2 is a CUDA kernel",
        "zero": ZERO_OPT_IN,
    }


def test_trainer_config_records_replay_only_when_asked():
    """Runs recorded before the field existed keep their fingerprint (and so their --resume)."""
    from mismatchscope.probe.types import TrainerConfig

    assert "replay_routes" not in TrainerConfig().to_dict()
    assert TrainerConfig(replay_routes=True).to_dict()["replay_routes"] is True
    assert TrainerConfig(**TrainerConfig(replay_routes=True).to_dict()) == TrainerConfig(replay_routes=True)


def test_diagnose_library_does_not_import_the_cli():
    imports_cli = re.compile(r"^\s*(from\s+(\.\.cli|mismatchscope\.cli)\b|import\s+mismatchscope\.cli\b)", re.M)
    offenders = [
        p.name for p in (REPO / "mismatchscope" / "diagnose").glob("*.py") if imports_cli.search(p.read_text())
    ]
    assert offenders == []


def test_dtypes_are_declared_once():
    hits = [
        str(p.relative_to(REPO))
        for p in (REPO / "mismatchscope").rglob("*.py")
        if re.search(r"^DTYPES\b", p.read_text(), re.M)
    ]
    assert hits == [str(Path("mismatchscope/probe/hf_model.py"))]
