"""The engines' output goes to the run's log, the tool's own lines to the terminal, and an engine failure
becomes one line naming its root cause.

Pins: descriptor 2 (what a child process writes) and ``sys.stderr`` land in ``engine.log`` while the
terminal stream still reaches the real stderr; descriptor 2 is restored after an error; the root
cause found in vLLM-style output (a missing package first, wrappers never); an exception raised in
vLLM's code becomes an :class:`EngineError` with the log's path and ``--sampler hf``, any other
passes unchanged. The real-engine cases (checkpoints vLLM's CPU build refuses) are at the end, marked
``vllm`` and ``slow``; a real engine's output on screen under ``--verbose`` is checked on a resumed probe
(tests/cli/test_probe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mismatchscope.errors import EngineError, UsageError
from mismatchscope.probe.engine_log import (
    LOG_NAME,
    cause_in_log,
    engine_output,
    root_cause,
)
from tests.helpers import REPO, cli_calls

DENSE = REPO / "sample_data" / "tiny-qwen3"

ENGINE_FAILURE_LOG = """\
(MainProcess pid=10) WARNING 12-04 14:52:17 [cpu.py:224] Triton is not installed.
(EngineCore pid=11) ERROR 12-04 14:54:08 [core.py:900] EngineCore failed to start.
(EngineCore pid=11) ERROR 12-04 14:54:08 [core.py:900] Traceback (most recent call last):
(EngineCore pid=11) ERROR 12-04 14:54:08 [core.py:900]   File "x.py", line 1, in f
(EngineCore pid=11) ERROR 12-04 14:54:08 [core.py:900] ValueError: the MLA kernel has no head size 48 on CPU
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

INSPECTION_LOG = """\
(MainProcess pid=3) ERROR 12-04 14:59:44 [registry.py:1120] Error in inspecting model architecture 'X'
(MainProcess pid=3) ERROR 12-04 14:59:44 [registry.py:1120] RuntimeError: Error raised in subprocess:
(MainProcess pid=3) ERROR 12-04 14:59:44 [registry.py:1120] ModuleNotFoundError: No module named 'torchvision'
(MainProcess pid=3) ERROR 12-04 14:59:44 [registry.py:1120] subprocess.CalledProcessError: Command '[...]' \
returned non-zero exit status 1.
"""


# ---- the root cause ------------------------------------------------------------------------------


def test_the_engine_process_exception_is_the_cause_not_its_wrapper():
    assert root_cause(ENGINE_FAILURE_LOG) == "ValueError: the MLA kernel has no head size 48 on CPU"


def test_a_missing_package_wins_over_the_exceptions_after_it():
    assert root_cause(INSPECTION_LOG) == "ModuleNotFoundError: No module named 'torchvision'"


def test_without_output_the_innermost_real_exception_of_the_chain():
    try:
        try:
            raise KeyError("layers.1.mlp.gate.e_score_correction_bias")
        except KeyError as inner:
            raise RuntimeError("Engine core initialization failed. See root cause above.") from inner
    except RuntimeError as e:
        assert root_cause("", e) == "KeyError: 'layers.1.mlp.gate.e_score_correction_bias'"
    assert root_cause("nothing here\n") == "no cause found in the engine's output"


def test_a_diagnose_variant_reason_that_only_wraps_takes_the_cause_from_its_log(tmp_path):
    log = tmp_path / "variant.log"
    log.write_text(INSPECTION_LOG)
    wrapped = "UsageError: vLLM refused its configuration: Model architectures ['X'] failed to be inspected."
    assert cause_in_log(log, wrapped) == "ModuleNotFoundError: No module named 'torchvision'"
    assert (
        cause_in_log(log, "UsageError: --engine-arg foo is not an option")
        == "UsageError: --engine-arg foo is not an option"
    )
    log.write_text("no exception here\n")
    assert cause_in_log(log, wrapped) == wrapped


# ---- where the output goes -----------------------------------------------------------------------


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "tokens").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")  # a run that scored a shard: the log is moved into it
    (run / "tokens" / "part-00000-00000.parquet").write_bytes(b"")
    return run


def _child_writes(text: str) -> None:
    subprocess.run([sys.executable, "-c", f"import sys; sys.stderr.write({text!r})"], check=True)


CAPTURE_SCRIPT = r"""
import logging, subprocess, sys, warnings
from pathlib import Path
from mismatchscope.probe.engine_log import engine_output
from mismatchscope.terminal import terminal
handler = logging.StreamHandler(sys.stderr)  # as vLLM's logger holds it: bound to sys.stderr before the capture
with engine_output(Path(sys.argv[1])):
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child process\\n')"], check=True)
    print("from sys.stderr", file=sys.stderr)
    warnings.warn("a torch-style warning")
    logging.getLogger("engine").addHandler(handler)
    logging.getLogger("engine").warning("from a logger")
    terminal.write("the tool's own progress\n")
print("after the capture", file=sys.stderr)
"""


def _capture_in_a_fresh_process(run: Path) -> str:
    """The script above in its own interpreter, where sys.stderr is the real descriptor 2 (not pytest's)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", CAPTURE_SCRIPT, str(run)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stderr


def test_child_and_python_output_go_to_the_log_the_tools_lines_to_the_terminal(tmp_path):
    run = _run_dir(tmp_path)
    err = _capture_in_a_fresh_process(run)
    log = (run / LOG_NAME).read_text()
    for line in ("from a child process", "from sys.stderr", "a torch-style warning", "from a logger"):
        assert line in log and line not in err, (line, log, err)
    assert "the tool's own progress" in err and "the tool's own progress" not in log
    assert f"{run / LOG_NAME} (--verbose shows it live)" in err and "after the capture" in err
    _capture_in_a_fresh_process(run)  # a resumed run: its log grows
    assert (run / LOG_NAME).read_text().startswith(log) and (run / LOG_NAME).read_text().count("from a logger") == 2


def test_verbose_leaves_the_output_on_screen(tmp_path, capfd):
    run = _run_dir(tmp_path)
    with engine_output(run, verbose=True):
        _child_writes("shown live\n")
    assert "shown live" in capfd.readouterr().err and not (run / LOG_NAME).exists()


def test_descriptor_2_is_restored_after_an_error_and_other_errors_pass_unchanged(tmp_path, capfd):
    before = os.fstat(2)
    with pytest.raises(UsageError, match="^not from the engine$"), engine_output(tmp_path / "never-made"):
        _child_writes("engine noise\n")
        raise UsageError("not from the engine")
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    assert "engine noise" not in capfd.readouterr().err
    _child_writes("after the capture\n")
    assert "after the capture" in capfd.readouterr().err


def _vllm_function(source: str, module: str = "vllm.entrypoints.llm"):
    """A function whose frames count as vLLM's (its module name), standing in for an engine that fails."""
    namespace: dict = {"__name__": module}
    exec(compile(source, f"<{module}>", "exec"), namespace)
    return namespace


def test_an_exception_raised_in_vllm_becomes_one_line_with_its_cause_and_the_log(tmp_path, capfd):
    ns = _vllm_function(
        "class LLM:\n"
        "    def __init__(self):\n"
        "        raise RuntimeError('Engine core initialization failed. See root cause above.')\n"
    )
    with pytest.raises(EngineError) as err, engine_output(tmp_path / "discarded", sampler_kind="vllm"):
        _child_writes(ENGINE_FAILURE_LOG)
        ns["LLM"]()
    message = str(err.value)
    assert message.startswith(
        "vLLM could not start the engine: ValueError: the MLA kernel has no head size 48 on CPU ("
    )
    assert "--sampler hf samples with transformers instead" in message
    log = Path(message.rsplit("see the engine's output: ", 1)[1].rstrip(")"))
    try:
        assert "Engine core initialization failed" in log.read_text()  # kept: the run directory was never made
        assert "EngineCore" not in capfd.readouterr().err
    finally:
        log.unlink()


def test_a_vllm_usage_error_keeps_its_message_and_gains_the_log(tmp_path):
    ns = _vllm_function("def refuse():\n    raise ValueError('max_model_len 9999 is larger than the model allows')\n")
    run = _run_dir(tmp_path)
    with pytest.raises(UsageError) as err, engine_output(run, sampler_kind="vllm"):
        try:
            ns["refuse"]()
        except ValueError as e:
            raise UsageError(f"vLLM refused its configuration: {e}") from e
    # nothing was written to the log: no log to name
    assert str(err.value) == "vLLM refused its configuration: max_model_len 9999 is larger than the model allows"
    with pytest.raises(UsageError) as err, engine_output(run, sampler_kind="vllm"):
        _child_writes("engine noise\n")
        try:
            ns["refuse"]()
        except ValueError as e:
            raise UsageError(f"vLLM refused its configuration: {e}", hint="lower --max-model-len") from e
    assert str(err.value).endswith(f"(lower --max-model-len; see the engine's output: {run / LOG_NAME})")


# ---- real engines ----------------------------------------------------------------------------------


def _qwen35_moe(folder: Path) -> Path:
    """A tiny Qwen3.5-MoE: transformers runs it; vLLM's model module for it imports torchvision."""
    import shutil

    import torch
    from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

    cfg = Qwen3_5MoeTextConfig(
        vocab_size=384,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=320,
        layer_types=["linear_attention", "full_attention"],
        linear_num_value_heads=2,
        linear_num_key_heads=1,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    Qwen3_5MoeForCausalLM(cfg).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(DENSE / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def refused_starts(tmp_path_factory) -> dict:
    """Two checkpoints vLLM's CPU build does not start, probed one after the other in one process (one vLLM
    import for both): a tiny Qwen3.5-MoE (its model module imports torchvision, which the install removes) and
    a tiny DeepSeek-V3 in float32 (the engine core refuses it)."""
    pytest.importorskip("vllm")
    pytest.importorskip("transformers")
    from tests.probe.test_routes_families import _build

    tmp = tmp_path_factory.mktemp("refused")
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1="}) + "\n")
    checkpoints = {}
    try:
        import torchvision  # noqa: F401
    except ImportError:
        checkpoints["qwen35_moe"] = _qwen35_moe(tmp / "qwen35-moe")
    # else torchvision is installed: vLLM loads that model class
    try:
        checkpoints["deepseek_v3"] = _build("deepseek_v3", tmp)
    except pytest.skip.Exception:
        pass  # this transformers has no DeepSeek-V3: the Qwen3.5-MoE case still runs
    calls = [
        ["probe", str(ckpt), "--prompts", str(prompts), "--out", str(tmp / f"run-{name}")]
        + ["--sampler", "vllm", "--sampler-dtype", "float32", "-n", "1", "--max-tokens", "2"]
        for name, ckpt in checkpoints.items()
    ]
    done = cli_calls(calls, tmp / "calls")
    return {name: (r, tmp / f"run-{name}") for name, r in zip(checkpoints, done, strict=True)}


def _one_line_refusal(r) -> tuple[str, Path]:
    """The refused start's last line and the engine log it names, after checking that nothing of the engine's
    reached the screen."""
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "WARNING" not in r.stderr, r.stderr[-3000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: vLLM could not start an engine for "), line  # the sampler names its checkpoint
    assert "See root cause above" not in line and "--sampler hf" in line, line
    return line, Path(line.rsplit("see the engine's output: ", 1)[1].rstrip(")"))


@pytest.mark.vllm
@pytest.mark.slow
def test_a_checkpoint_vllm_cannot_load_gets_one_line_naming_the_missing_package(refused_starts):
    if "qwen35_moe" not in refused_starts:
        pytest.skip("torchvision is installed: vLLM loads this model class")
    r, out = refused_starts["qwen35_moe"]
    line, log = _one_line_refusal(r)
    assert "ModuleNotFoundError: No module named 'torchvision'" in line, line
    try:
        assert "Error in inspecting model architecture" in log.read_text()
        assert not out.exists()  # the failed start takes its run directory back
    finally:
        log.unlink(missing_ok=True)


@pytest.mark.vllm
@pytest.mark.slow
def test_a_refused_engine_start_is_one_line_naming_the_cause(refused_starts):
    """A DeepSeek-V3 checkpoint in float32: the engine core refuses it; the line says why, not where to look."""
    if "deepseek_v3" not in refused_starts:
        pytest.skip("this transformers has no DeepSeek-V3")
    r, out = refused_starts["deepseek_v3"]
    line, log = _one_line_refusal(r)
    try:
        # vLLM's CPU build loads no e_score_correction_bias for it: the engine core's own exception, named
        assert "KeyError: 'layers.1.mlp.gate.e_score_correction_bias'" in line, line
        assert not out.exists()
    finally:
        log.unlink(missing_ok=True)


def test_a_refusal_by_the_tool_changes_no_run_log(tmp_path):
    run = _run_dir(tmp_path)
    with pytest.raises(UsageError), engine_output(run):
        _child_writes("tokenizer noise\n")
        raise UsageError("cannot resume: its configuration differs")
    assert not (run / LOG_NAME).exists()


def test_a_run_that_sampled_nothing_gets_no_log_that_would_block_its_rerun(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(
        '{"fingerprint": {}, "status": "running"}'
    )  # a start that failed before its first round
    with engine_output(run):
        _child_writes("engine noise\n")
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json"]


DIAGNOSE_LOADING = r"""
import sys
from pathlib import Path
from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.engine_log import engine_output
from mismatchscope.probe.trainer import HFTrainer
from mismatchscope.probe.types import TrainerConfig
with engine_output(Path(sys.argv[1]), any_dir=True):  # as the diagnose command holds it around its work
    HFTrainer(inspect_checkpoint(Path(sys.argv[2])), TrainerConfig())
"""


def test_diagnoses_model_loading_prints_only_the_tools_line(tmp_path):
    """diagnose loads transformers models in its own process (the reference, the trainers); transformers draws
    a "Loading weights" bar on stderr for each. Under the capture diagnose holds, the one line on stderr is the
    tool's, naming the log in diagnose's output folder (no --verbose there), and the bar is in the log."""
    out = tmp_path / "diag"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-c", DIAGNOSE_LOADING, str(out), str(DENSE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"the engines' output: {out / LOG_NAME}\n", r.stderr
    assert "Loading weights" in (out / LOG_NAME).read_text()


def test_commands_on_hostile_data_print_only_their_own_lines(tmp_path):
    """Ratios that overflow (log q = -1000) and a -inf logprob, through every command that reads pairs: stderr
    holds the tool's warnings and nothing else (numpy's RuntimeWarnings were leaking from the gate's
    bootstrap: a sequence drawn 0 times times its infinite sum)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.helpers import cli

    path = tmp_path / "hostile.parquet"
    pq.write_table(
        pa.table(
            {
                "sequence_id": [1, 1, 2, 2, 3, 3],
                "position": [0, 1, 0, 1, 0, 1],
                "token_id": [5, 6, 7, 8, 9, 10],
                "sampler_logprob": [-0.5, -1000.0, -0.5, float("-inf"), -0.5, -0.4],
                "trainer_logprob": [-0.6, -0.6, -0.6, -0.6, -0.6, -0.6],
                "step": [0, 0, 1, 1, 2, 2],
            }
        ),
        path,
    )
    for args in (
        ("report", "--worst", "2"),
        ("compare-masks", "--sweep", "icepop.beta=1.5,2"),
        ("compare-masks", "--readings", "dppo-kl"),
        ("gate", "--absolute-only", "--bootstrap", "200"),
        ("timeline",),
    ):
        r = cli(args[0], str(path), *args[1:])
        assert r.returncode in (0, 1), (args, r.stderr)
        assert r.stderr and all(line.startswith("warning: ") for line in r.stderr.splitlines()), (args, r.stderr)
