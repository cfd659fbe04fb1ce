"""Builds the SkyRL, verl and ROLL dumps in this folder with each stack's own dumping code.

Run with the project's environment plus, importable, SkyRL 0.4.0 (its wheel
unpacked: it asks for Python 3.12, so its package ``__init__`` files, which
load the unrelated Tinker API, are bypassed and the three modules below are
imported directly), verl 0.9.1 and tensordict 0.15.3 (each installed with
``--no-deps`` into a folder of its own, with ray, omegaconf and the few
modules verl's ``protocol.py`` imports)::

    PYTHONPATH=.:<skyrl>:<verl>:<tensordict> python tests/data/stack_dumps/build.py

* SkyRL: ``convert_prompts_responses_to_batch_tensors`` and
  ``make_router_padding_mask`` (``skyrl/train/dataset/preprocess.py``) lay the
  batch out, ``TrainingInputBatch.save`` pickles it to the path
  ``RayPPOTrainer.dump_data`` uses (``{export_path}/dumped_data/global_step_{N}_training_input.pkl``).
* verl: ``DataProto.from_dict`` with the fields the agent loop's
  ``_postprocess`` writes, saved by ``RolloutSkip.prepare_data`` itself
  (``verl/utils/skip/rollout_skip.py``): ``{dump_dir}/{exp}_{proj}/GBS{g}_N{n}_in{p}_out{r}/{step}/``
  holds ``gen_batch.dp`` and ``meta.json``.
* ROLL does not install here (not on PyPI; its ``protocol.py`` imports its
  Ray scheduler stack): its file is written to the layout of ROLL commit
  8eb27cc2dc34c4d1310b169d9b86d339004d811a, ``DataProto.__getstate__`` in
  ``roll/distributed/scheduler/protocol.py`` (``(BytesIO of torch.save(consolidated TensorDict),
  non_tensor_batch, remote_batch, meta_info)``), pickled by a class of that
  qualified name with ``pickle.HIGHEST_PROTOCOL`` to ``{dump_dir}/train/step_{N:06d}.pkl``
  (``rollout_mock_mixin._dump_batch``), the batch laid out as
  ``traj_env_manager.formulate_rollouts`` does: right-padded to the sequence
  length, ``infer_logprobs[:, 1:]``.

Token ids, routes and logprobs come from the bundled tiny-qwen3-moe (float32,
one sequence at a time): routes are its top-2 experts per layer; the trainer
logprob is its logprob at temperature 1; the sampler logprob is that minus
0.1 (minus 0.5 on the tokens listed in SHIFTED), so every imported gap is known.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
import types
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SEQS = [  # (prompt ids, completion ids, loss mask over the completion)
    ([11, 45, 97, 130, 7], [201, 33, 64, 90, 17, 2], [1, 1, 1, 1, 1, 1]),
    ([12, 88, 150], [44, 300, 5, 61, 2], [1, 1, 0, 1, 1]),
    ([19, 23, 71, 260, 99, 140], [77, 8, 2], [1, 1, 1]),
]
SHIFTED = {(0, 1), (2, 0)}  # (sequence, completion index) whose sampler logprob is 0.5 below, not 0.1


def reference():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(ROOT / "sample_data/tiny-qwen3-moe"), dtype=torch.float32).eval()
    out = []
    for k, (prompt, completion, _) in enumerate(SEQS):
        ids = prompt + completion
        with torch.inference_mode():
            res = model(input_ids=torch.tensor([ids]), output_router_logits=True, use_cache=False)
        experts = np.stack([torch.topk(rl.float(), 2).indices.numpy() for rl in res.router_logits], 1)
        lp = torch.log_softmax(res.logits[0].float(), -1)
        trainer = np.array([float(lp[len(prompt) - 1 + j, t]) for j, t in enumerate(completion)], dtype=np.float32)
        offsets = np.array([0.5 if (k, j) in SHIFTED else 0.1 for j in range(len(completion))], dtype=np.float32)
        out.append((experts.astype(np.int16), trainer, trainer - offsets))
    return out


def skyrl(ref):
    root = Path(sys.modules["skyrl"].__path__[0]).parent
    for name in (
        "skyrl.backends",
        "skyrl.backends.skyrl_train",
        "skyrl.backends.skyrl_train.utils",
        "skyrl.train",
        "skyrl.train.dataset",
    ):
        mod = types.ModuleType(name)
        mod.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = mod
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors, make_router_padding_mask

    # the last token: no forward
    routes = [e[: len(p) + len(c) - 1] for (p, c, _), (e, _, _) in zip(SEQS, ref, strict=True)]
    seq, attn, resp, rewards, loss, rollout, experts, _ = convert_prompts_responses_to_batch_tensors(
        0,
        [s[0] for s in SEQS],
        [s[1] for s in SEQS],
        [[0.0] * (len(s[1]) - 1) + [1.0] for s in SEQS],
        [s[2] for s in SEQS],
        [r[2].tolist() for r in ref],
        routes,
    )
    width = resp.shape[1]
    trainer = torch.zeros(len(SEQS), width)
    advantages = torch.zeros(len(SEQS), width)
    for i, (_, c, _) in enumerate(SEQS):
        trainer[i, width - len(c) :] = torch.from_numpy(ref[i][1])
        advantages[i, width - len(c) :] = 0.25 * (i + 1)
    batch = TrainingInputBatch(
        {
            "sequences": seq,
            "attention_mask": attn,
            "response_mask": resp,
            "loss_mask": loss,
            "rollout_logprobs": rollout,
            "rollout_expert_indices": experts,
            "router_padding_mask": make_router_padding_mask(attn, [len(r) for r in routes]),
            "action_log_probs": trainer,
            "advantages": advantages,
        }
    )
    batch.metadata = {"response_length": width}
    out = HERE / "skyrl/dumped_data"
    out.mkdir(parents=True, exist_ok=True)
    batch.save(out / "global_step_3_training_input.pkl")  # RayPPOTrainer.dump_data's own call


def _padded(prompt_len: int, resp_len: int, ref):
    """verl's agent-loop layout: prompts left-padded to prompt_len, responses right-padded to resp_len."""
    b = len(SEQS)
    prompts = torch.zeros(b, prompt_len, dtype=torch.long)
    responses = torch.zeros(b, resp_len, dtype=torch.long)
    resp_mask = torch.zeros(b, resp_len, dtype=torch.long)
    attn = torch.zeros(b, prompt_len + resp_len, dtype=torch.long)
    logprobs = torch.zeros(b, resp_len)
    for i, (p, c, m) in enumerate(SEQS):
        prompts[i, prompt_len - len(p) :] = torch.tensor(p)
        responses[i, : len(c)] = torch.tensor(c)
        resp_mask[i, : len(c)] = torch.tensor(m)
        attn[i, prompt_len - len(p) : prompt_len + len(c)] = 1
        logprobs[i, : len(c)] = torch.from_numpy(ref[i][2])
    return prompts, responses, resp_mask, attn, logprobs


def verl(ref):
    from verl.protocol import DataProto
    from verl.utils.skip.rollout_skip import RolloutSkip

    prompts, responses, resp_mask, attn, logprobs = _padded(8, 7, ref)
    ids = torch.cat([prompts, responses], 1)
    batch = DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "response_mask": resp_mask,
            "input_ids": ids,
            "attention_mask": attn,
            "position_ids": (attn.cumsum(-1) - 1).clamp(min=0),
            "rollout_log_probs": logprobs,
        },
        non_tensors={
            "uid": np.array(["a", "a", "b"], dtype=object),
            "__num_turns__": np.array([2, 2, 2], dtype=np.int32),
        },
        meta_info={"global_steps": 4},
    )
    skip = RolloutSkip.__new__(RolloutSkip)
    skip.dump_dir, skip.exp_name, skip.project_name = str(HERE / "verl"), "exp", "proj"
    skip.gbs, skip.n, skip.prompt_length, skip.response_length = 2, 2, 8, 7
    skip.prepare_data(4, batch)


def roll(ref):
    from tensordict import TensorDict

    class DataProto:  # ROLL's DataProto.__getstate__, as written at the commit named above
        def __init__(self, batch, non_tensor_batch, meta_info):
            self._batch, self._non_tensor_batch, self._remote_batch, self.meta_info = (
                batch,
                non_tensor_batch,
                {},
                meta_info,
            )

        def __getstate__(self):
            buffer = io.BytesIO()
            self._batch = self._batch.contiguous().consolidate()
            torch.save(self._batch, buffer)
            return buffer, self._non_tensor_batch, self._remote_batch, self.meta_info

    for parent in ("roll", "roll.distributed", "roll.distributed.scheduler"):
        sys.modules.setdefault(parent, types.ModuleType(parent))
    mod = types.ModuleType("roll.distributed.scheduler.protocol")
    DataProto.__module__, DataProto.__qualname__ = mod.__name__, "DataProto"
    setattr(mod, "DataProto", DataProto)  # noqa: B010  (a module made here)
    sys.modules[mod.__name__] = mod
    length = 20  # pipeline_config.sequence_length
    b = len(SEQS)
    input_ids = torch.zeros(b, length, dtype=torch.long)
    attn = torch.zeros(b, length, dtype=torch.long)
    resp = torch.zeros(b, length, dtype=torch.bool)
    infer = torch.zeros(b, length)
    for i, (p, c, m) in enumerate(SEQS):
        n = len(p) + len(c)
        input_ids[i, :n] = torch.tensor(p + c)
        attn[i, :n] = 1
        resp[i, len(p) : n] = torch.tensor(m, dtype=torch.bool)  # ROLL's response_mask: the generated tokens
        infer[i, len(p) : n] = torch.from_numpy(ref[i][2])  # [0] * prompt + the engine's logprobs
    batch = TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attn,
            "position_ids": (attn.cumsum(-1) - 1),
            "response_mask": resp,
            "infer_logprobs": infer[:, 1:],
        },
        batch_size=b,
    )
    non_tensor = {
        "group_ids": np.array([0, 0, 1], dtype=object),
        "episode_scores": np.array([1.0, 0.0, 1.0], dtype=object),
    }
    out = HERE / "roll/train"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "step_000002.pkl", "wb") as f:
        pickle.dump(DataProto(batch, non_tensor, {"global_step": 2}), f, protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    ref = reference()
    skyrl(ref)
    verl(ref)
    roll(ref)
    (HERE / "reference.json").write_text(
        json.dumps([{"trainer": r[1].tolist(), "sampler": r[2].tolist(), "routes": r[0].tolist()} for r in ref]) + "\n"
    )
