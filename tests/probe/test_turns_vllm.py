"""``probe --turns`` with real vLLM: the session's in-process dense engine (float16) and its vLLM server (float32),
each sampling three-turn conversations of the bundled ``tiny-qwen3-chat`` (``tiny-qwen3``'s weights: the engines
started on ``tiny-qwen3`` serve them) against the float32 transformers trainer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from mismatchscope.doctor import doctor
from mismatchscope.probe.command import run_probe
from mismatchscope.probe.options import ProbeOptions
from mismatchscope.probe.turns import TurnsConfig
from mismatchscope.probe.types import SamplerConfig, SamplingConfig, TrainerConfig

from .conftest import sample_data_dir

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CHAT = sample_data_dir() / "tiny-qwen3-chat"


def _opts(tmp_path: Path, name: str, mode: str, sampler: SamplerConfig) -> ProbeOptions:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join((sample_data_dir() / "prompts.jsonl").read_text().splitlines()[:6]) + "\n")
    return ProbeOptions(
        checkpoint=CHAT,
        prompts=prompts,
        out=tmp_path / name,
        sampling=SamplingConfig(n=2, max_tokens=60),
        sampler=sampler,
        trainer=TrainerConfig(dtype="float32"),
        turns=TurnsConfig(3, turn_ids=mode),  # type: ignore[arg-type]  # a mode
    )


def _rows(run: Path) -> dict:
    return pq.read_table(run / "tokens").sort_by([("sequence_id", "ascending"), ("position", "ascending")]).to_pydict()


def test_vllm_samples_conversations_in_both_modes(vllm_sampler, dense_info, tmp_path):
    engine = vllm_sampler(dense_info, "float16")
    # the shared engine served other sampling before (as in a session of tests): the run records its own
    engine.sample([[1, 22, 13]], SamplingConfig(n=1, max_tokens=2, temperature=0.7, top_p=0.9))
    runs = {
        mode: run_probe(
            _opts(tmp_path, f"run-{mode}", mode, SamplerConfig(kind="vllm", dtype="float16")), sampler=engine
        )
        for mode in ("tokens", "messages")
    }
    tokens, messages = _rows(runs["tokens"]), _rows(runs["messages"])
    assert set(tokens["turn"]) == {0, 1, 2} and "trainer_token_id" not in tokens
    # vLLM float16 against transformers float32 on the ids the sampler sampled: the fp16 gap (README: max 0.024)
    assert np.max(np.abs(np.subtract(tokens["trainer_logprob"], tokens["sampler_logprob"]))) < 0.1
    recorded = json.loads((runs["tokens"] / "manifest.json").read_text())["provenance"]["sampler"]["identities"]
    assert (recorded["sampling"]["temperature"], recorded["sampling"]["top_p"]) == (1.0, 1.0)
    # the run's own request (its first turn's): n = 2 and its seed, not the last turn's n = 1 and seed + 2
    assert (recorded["sampling"]["n"], recorded["sampling"]["seed"]) == (2, SamplingConfig().seed)
    assert doctor(str(runs["tokens"])).verdict == "numerics"
    differ = np.not_equal(messages["trainer_token_id"], messages["token_id"])
    found = next(f for f in doctor(str(runs["messages"])).findings if f.cause == "retokenized")
    assert found.status == ("detected" if differ.any() else "clear")


def test_a_vllm_server_samples_conversations(vllm_server, dense_dir, tmp_path):
    sampler = SamplerConfig(kind="vllm-server", dtype="float32", url=vllm_server, engine_args={"model": str(dense_dir)})
    run = run_probe(_opts(tmp_path, "server", "tokens", sampler))
    rows = _rows(run)
    assert set(rows["turn"]) == {0, 1, 2}
    # the server's float32 against the float32 trainer, the same ids: rounding only
    assert np.max(np.abs(np.subtract(rows["trainer_logprob"], rows["sampler_logprob"]))) < 1e-3
