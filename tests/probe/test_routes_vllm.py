"""The MoE sample probed with vLLM on the CPU: the trainer's routes are recorded, the sampler's absence is explained.

vLLM's CPU build cannot return routed experts (``enable_return_routed_experts``
needs Model Runner V2, which runs on GPUs only). The probe must still finish,
record the trainer's routes, and say in one line, and in the manifest, why the
sampler's are missing. Uses the session's shared MoE engine (fp32, raw logprobs).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mismatchscope.probe.command import run_probe
from mismatchscope.probe.options import ProbeOptions
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig
from mismatchscope.progress import Progress
from mismatchscope.reader import read_routes
from mismatchscope.routing.io import read_meta

from .conftest import sample_data_dir

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


class Notes(Progress):
    def __init__(self):
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        self.lines.append(message)


def test_vllm_probe_records_trainer_routes_and_says_why_not_the_samplers(vllm_sampler, moe_info, tmp_path):
    engine = vllm_sampler(moe_info, "float32", "raw_logprobs")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join((sample_data_dir() / "prompts.jsonl").read_text().splitlines()[:3]) + "\n")
    notes = Notes()
    opts = ProbeOptions(
        checkpoint=Path(moe_info.path),
        prompts=prompts,
        out=tmp_path / "run",
        sampling=SamplingConfig(n=2, max_tokens=8, logprobs_mode="raw_logprobs"),
        sampler=SamplerConfig(kind="vllm", dtype="float32"),
        trainer=TrainerConfig(dtype="float32"),
    )
    run = run_probe(opts, notes, sampler=engine)
    meta = read_meta(run)
    assert meta.trainer.recorded and not meta.sampler.recorded
    assert "CPU build cannot return routed experts" in meta.sampler.why
    said = [line for line in notes.lines if line.startswith("routes:")]
    assert len(said) == 1 and meta.sampler.why in said[0] and "\n" not in said[0]
    table = read_routes(run)
    assert table.num_rows > 0
    assert table["sampler_experts"].null_count == table.num_rows
    assert table["trainer_experts"].null_count == 0
