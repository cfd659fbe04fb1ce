"""TRL's GRPOTrainer with MismatchscopeCallback: a few real GRPO steps on the bundled model, read by timeline.

TRL on these CPUs has no vLLM, so the inference engine is a ``rollout_func``
(TRL's hook for custom generation): a float32 copy of the model sampling with
transformers ``generate``, synced from the bfloat16 trainer each step, and
returning the sampled tokens' logprobs as vLLM would. ``num_iterations=2``
makes TRL recompute the trainer's logprobs (``old_per_token_logps``), as it
does whenever vLLM importance-sampling correction is on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mismatchscope import rundir
from tests.helpers import cli


def _import_trl() -> None:
    """Import TRL, leaving ``VLLM_LOGGING_LEVEL`` as it was.

    TRL's import sets ``VLLM_LOGGING_LEVEL=ERROR`` in ``os.environ`` when it is unset, to quiet vLLM. Collection
    imports this module into every test process: every vLLM engine its tests start afterwards, in the process or
    in a command it runs, would hide its warnings, which the tests of the engine's output read.
    """
    before = os.environ.get("VLLM_LOGGING_LEVEL")
    try:
        pytest.importorskip("trl", reason="needs TRL (the trl extra)")
    finally:
        if before is None:
            os.environ.pop("VLLM_LOGGING_LEVEL", None)
        else:
            os.environ["VLLM_LOGGING_LEVEL"] = before


_import_trl()
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "sample_data" / "tiny-qwen3"


def _rollout(tok, sampler):
    synced = [-1]

    def rollout(prompts, trainer):
        if synced[0] != trainer.state.global_step:  # weight sync, as a vLLM engine gets it
            sampler.load_state_dict({k: v.float() for k, v in trainer.model.state_dict().items()})
            synced[0] = trainer.state.global_step
        enc = tok(list(prompts), return_tensors="pt", padding=True)
        with torch.no_grad():
            g = sampler.generate(
                **enc,
                do_sample=True,
                max_new_tokens=8,
                min_new_tokens=3,
                top_k=0,
                top_p=1.0,
                temperature=1.0,
                output_logits=True,
                return_dict_in_generate=True,
                pad_token_id=tok.pad_token_id,
            )
        comp = g.sequences[:, enc.input_ids.shape[1] :]
        lp = torch.log_softmax(torch.stack(g.logits, 1).float(), -1).gather(-1, comp[..., None])[..., 0]
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": []}
        for i in range(len(prompts)):
            c = comp[i].tolist()
            k = c.index(tok.eos_token_id) + 1 if tok.eos_token_id in c else len(c)
            out["prompt_ids"].append(enc.input_ids[i][enc.attention_mask[i].bool()].tolist())
            out["completion_ids"].append(c[:k])
            out["logprobs"].append(lp[i, :k].tolist())
        return out

    return rollout


@pytest.mark.slow
def test_grpo_steps_recorded_and_read_by_timeline(tmp_path, monkeypatch):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from mismatchscope.live.trl_callback import MismatchscopeCallback

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(CHECKPOINT)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.bfloat16)
    sampler = AutoModelForCausalLM.from_pretrained(CHECKPOINT, dtype=torch.float32).eval()
    lines = (CHECKPOINT.parent / "prompts.jsonl").read_text().splitlines()[:8]
    data = Dataset.from_dict({"prompt": [json.loads(x)["prompt"] for x in lines]})

    def reward(completions, **_kw):  # digits are rewarded: a signal the policy can move
        return [float(sum(ch.isdigit() for ch in c)) for c in completions]

    args = GRPOConfig(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=4,
        num_iterations=2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        learning_rate=1e-3,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=data,
        processing_class=tok,
        rollout_func=_rollout(tok, sampler),
    )
    out = tmp_path / "run"
    cb = MismatchscopeCallback(out, meta={"sampler": "generate fp32"}).attach(trainer)
    trainer.add_callback(cb)
    trainer.train()

    assert (cb.batches, cb.skipped) == (2, 0)  # num_iterations=2: one generation batch every second step
    assert rundir.completion(out) == rundir.Completion(True, "")
    logged = [h for h in trainer.state.log_history if "mismatch/k3_mean" in h]
    assert len(logged) == 2  # the Monitor's values went out with TRL's own metrics

    tl = cli("timeline", str(out), "--format", "json")
    assert tl.returncode == 0 and tl.stderr == "", tl.stderr
    rows = json.loads(tl.stdout)["rows"]
    assert [r["step"] for r in rows] == [0, 2]
    for row, h in zip(rows, logged, strict=True):
        assert row["k3_mean"] == pytest.approx(h["mismatch/k3_mean"], rel=1e-9)
        assert row["tokens"] == h["mismatch/tokens"]
    manifest = rundir.read_manifest(out)
    assert manifest["meta"] == {"framework": "trl", "trainer": "GRPOTrainer", "sampler": "generate fp32"}
