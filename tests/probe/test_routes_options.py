"""Route options refused before anything exists: one line, exit 2, no run directory."""

from __future__ import annotations

import pytest

from tests.helpers import cli_no_engine as cli

from .conftest import checkpoint_dir, sample_data_dir

pytestmark = pytest.mark.slow  # each starts the CLI and reads the checkpoint: about 15 s


@pytest.mark.parametrize(
    "ckpt, args, message",
    [
        ("tiny-qwen3", ["--sampler", "hf", "--replay-routes"], "--replay-routes needs an MoE checkpoint"),
        (
            "tiny-qwen3-moe",
            ["--sampler", "vllm", "--replay-routes"],
            "--replay-routes needs the sampler's routes: vLLM",
        ),
        (
            "tiny-qwen3-moe",
            ["--sampler", "hf", "--replay-weights"],
            "--replay-weights replays the sampler's gate weights with its expert ids (add --replay-routes)",
        ),
        (
            "tiny-qwen3-moe",
            ["--sampler", "hf", "--replay-routes", "--no-routes"],
            "--replay-routes records the replayed routes; it cannot run with --no-routes",
        ),
    ],
)
def test_refused_before_the_run_exists(tmp_path, ckpt, args, message):
    out = tmp_path / "run"
    r = cli(
        "probe",
        str(checkpoint_dir(ckpt)),
        "--prompts",
        str(sample_data_dir() / "prompts.jsonl"),
        "--out",
        str(out),
        *args,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, last
    assert "Traceback" not in r.stderr
    assert not out.exists()
