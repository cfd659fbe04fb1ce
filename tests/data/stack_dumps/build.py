"""Builds the SkyRL, verl and ROLL dumps in this folder with each stack's own code.

Each stack is built in a process of its own, its code importable, installed
with ``pip install --no-deps --target <folder>`` from PyPI (tensordict 0.15.3
and jaxtyping too; tensordict's ``pyvers``), never into the project's
environment::

    PYTHONPATH=. python tests/data/stack_dumps/build.py reference
    PYTHONPATH=.:<skyrl 0.4.0>:<deps> python tests/data/stack_dumps/build.py skyrl
    PYTHONPATH=.:<skyrl 0.1.0>:<deps> python tests/data/stack_dumps/build.py skyrl-0.1.0
    PYTHONPATH=.:<skyrl-train 0.3.1>:<deps> python tests/data/stack_dumps/build.py skyrl-train-0.3.1
    PYTHONPATH=.:<verl 0.9.1>:<tensordict>:<deps> python tests/data/stack_dumps/build.py verl
    ROLL=<ROLL checkout> PYTHONPATH=.:<tensordict>:<deps> python tests/data/stack_dumps/build.py roll

(SkyRL's wheels ask for Python 3.12: ``pip download --python-version 3.12
--only-binary=:all: --no-deps`` and unpack them.) What each target runs:

* ``skyrl`` (SkyRL 0.4.0; its package ``__init__`` files, which load the
  unrelated Tinker API, are bypassed): ``convert_prompts_responses_to_batch_tensors``
  and ``make_router_padding_mask`` (``skyrl/train/dataset/preprocess.py``) lay the
  batch out, ``apply_overlong_filtering`` (``skyrl/train/generators/utils.py``,
  the function alone: its module imports the generator stack) zeroes the loss
  mask of a truncated fourth sample, ``pad_training_input_batch``
  (``training_batch.py``) pads the batch to a data-parallel size of 3 as
  ``RayPPOTrainer.convert_to_training_input`` does, and
  ``TrainingInputBatch.save`` pickles it to the path ``RayPPOTrainer.dump_data``
  uses. Two more dumps: ``skyrl_skip_bad/`` (the second sample's engine
  logprob +0.5, a record ``--skip-bad`` skips) and ``skyrl_top1/``
  (top-1 routes of a model whose ``config.json`` is beside the dump, the
  engine having captured fewer rows than SkyRL pads to, as in a multi-turn
  sample: ``router_padding_mask`` marks the rest, SkyRL's dummy route there is
  expert 0).
* ``skyrl-0.1.0``, ``skyrl-train-0.3.1``: that release's own
  ``convert_prompts_responses_to_batch_tensors``, ``RayPPOTrainer.pad_batch``
  (the method alone, its module importing Ray) to a data-parallel size of 2,
  and ``TrainingInputBatch.save``: a plain dict subclass whose items pickle
  through torch (the layout before SkyRL 0.2).
* ``verl`` (verl 0.9.1, ``ray``, ``hydra``, ``omegaconf`` and verl's worker,
  tool, dataset, trainer, profiler and Ray modules stubbed): the agent loop's
  own ``AgentLoopWorker._agent_loop_postprocess`` and ``_postprocess``
  (``verl/experimental/agent_loop/agent_loop.py``) turn four
  ``AgentLoopOutput`` (the fourth generated nothing) into the batch, the
  tiny-qwen3 tokenizer padding, and ``RolloutSkip.prepare_data``
  (``verl/utils/skip/rollout_skip.py``) writes ``{dump_dir}/{exp}_{proj}/GBS{g}_N{n}_in{p}_out{r}/{step}/``
  (``gen_batch.dp`` and ``meta.json``); ``verl_numpy/`` the same with
  ``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``.
* ``roll`` (ROLL is not on PyPI: its files are read from a checkout at commit
  8eb27cc2dc34c4d1310b169d9b86d339004d811a, ``ray``, ``codetiming``,
  ``omegaconf`` and ROLL's platform, logging, config and transfer modules
  stubbed): ``TrajEnvManager.formulate_rollouts``
  (``roll/pipeline/agentic/env_manager/traj_env_manager.py``, the method alone,
  with ``pad_to_length`` and ``aggregate_metrics`` from ``roll/utils/functionals.py``)
  makes each sample's ``DataProto`` (``roll/distributed/scheduler/protocol.py``,
  the module itself), ``DataProto.concat`` joins them as the rollout
  scheduler does, and ``RolloutMockMixin._dump_batch``
  (``rollout_mock_mixin.py``) pickles it to ``{dump_dir}/train/step_{N:06d}.pkl``.
  With tensordict 0.15.3 ROLL's ``tensordict.__version__ >= "0.5.0"`` is false,
  so, as in every real ROLL dump, the batch is not consolidated.

Token ids, routes and logprobs come from the bundled tiny-qwen3-moe (float32,
one sequence at a time): routes are its top-2 experts per layer (top-1 in
``skyrl_top1/``); the trainer logprob is its logprob at temperature 1; the
sampler logprob is that minus 0.1 (minus 0.5 on the tokens listed in
SHIFTED), so every imported gap is known.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SEQS = [  # (prompt ids, completion ids, loss mask over the completion)
    ([11, 45, 97, 130, 7], [201, 33, 64, 90, 17, 2], [1, 1, 1, 1, 1, 1]),
    ([12, 88, 150], [44, 300, 5, 61, 2], [1, 1, 0, 1, 1]),
    ([19, 23, 71, 260, 99, 140], [77, 8, 2], [1, 1, 1]),
]
TRUNCATED = ([14, 15, 16], [70, 71, 72, 73], [1, 1, 1, 1])
"""SkyRL's fourth sample: stopped by the length limit, its loss mask zeroed by overlong filtering."""
SHIFTED = {(0, 1), (2, 0)}  # (sequence, completion index) whose sampler logprob is 0.5 below, not 0.1


REFERENCE = HERE / "reference.json"


def write_reference() -> None:
    """``reference.json``: per sequence (the three, then the truncated one), the trainer's and the sampler's
    logprob of each completion token and the routes (top-2 and top-1 per layer), computed once so that every
    stack's dump, built in its own process, holds the very same numbers."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(ROOT / "sample_data/tiny-qwen3-moe"), dtype=torch.float32).eval()
    out = []
    for k, (prompt, completion, _) in enumerate([*SEQS, TRUNCATED]):
        ids = prompt + completion
        with torch.inference_mode():
            res = model(input_ids=torch.tensor([ids]), output_router_logits=True, use_cache=False)
        routes = {
            n: np.stack([torch.topk(rl.float(), n).indices.numpy() for rl in res.router_logits], 1) for n in (1, 2)
        }
        lp = torch.log_softmax(res.logits[0].float(), -1)
        trainer = np.array([float(lp[len(prompt) - 1 + j, t]) for j, t in enumerate(completion)], dtype=np.float32)
        offsets = np.array([0.5 if (k, j) in SHIFTED else 0.1 for j in range(len(completion))], dtype=np.float32)
        out.append(
            {
                "trainer": trainer.tolist(),
                "sampler": (trainer - offsets).tolist(),
                "routes": routes[2].tolist(),
                "routes_top1": routes[1].tolist(),
            }
        )
    REFERENCE.write_text(json.dumps(out) + "\n")


def reference(top_k: int = 2):
    """``(routes int16, trainer float32, sampler float32)`` per sequence, from ``reference.json``."""
    key = "routes" if top_k == 2 else "routes_top1"
    return [
        (np.asarray(r[key], dtype=np.int16), np.asarray(r["trainer"], np.float32), np.asarray(r["sampler"], np.float32))
        for r in json.loads(REFERENCE.read_text())
    ]


# -- the stand-ins for what a stack imports but the dump does not use ------------------------------------------------


class _StubMeta(type):
    """A stub class: any attribute is another stub, calling it with one callable returns that (a decorator)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _StubMeta(name, (_Stub,), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return super().__call__()

    def __getitem__(cls, item):
        return cls


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _StubMeta(name, (_Stub,), {})
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names):
        self.names = tuple(names)

    def find_spec(self, fullname, path, target=None):
        if any(fullname == n or fullname.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def stub(*names: str) -> None:
    """Modules a stack's file imports for code the dump never runs: any name in them is a stub."""
    sys.meta_path.insert(0, _StubFinder(names))


def function_from(path: Path, name: str, namespace: dict, cls: str | None = None):
    """One function (or ``cls``'s method) of a stack's source file, compiled on its own in ``namespace``: the
    stack's own code, without the module around it and what that imports."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    node.decorator_list = []
    exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # the stack's own code
    return namespace[name]


def module_from(path: Path, name: str):
    """A stack's source file loaded as its own module name (so pickles name its classes as the stack does)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# -- SkyRL --------------------------------------------------------------------------------------------------------


def _skyrl_namespace() -> Path:
    import skyrl  # its own __init__ only: the packages below it are entered without theirs

    root = Path(skyrl.__path__[0]).parent
    for name in (
        "skyrl.backends",
        "skyrl.backends.skyrl_train",
        "skyrl.backends.skyrl_train.utils",
        "skyrl.train",
        "skyrl.train.dataset",
        "skyrl.train.generators",
    ):
        mod = types.ModuleType(name)
        mod.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = mod
    return root


def skyrl(ref) -> None:
    """SkyRL 0.4.0: the three sequences, the truncated fourth, padded to 6 rows (data-parallel size 3)."""
    root = _skyrl_namespace()

    samples = [*SEQS, TRUNCATED]
    routes = [e[: len(p) + len(c) - 1] for (p, c, _), (e, _, _) in zip(samples, ref, strict=True)]
    overlong = function_from(root / "skyrl/train/generators/utils.py", "apply_overlong_filtering", {"List": list})
    loss_masks = overlong([s[2] for s in samples], ["stop", "stop", "stop", "length"])
    batch = _skyrl_batch(samples, loss_masks, [r[2].tolist() for r in ref], [r[1] for r in ref], routes)
    from skyrl.backends.skyrl_train.training_batch import pad_training_input_batch

    batch = pad_training_input_batch(batch, 2)  # 4 samples, data-parallel size 3: convert_to_training_input's pad
    _save_skyrl(batch, HERE / "skyrl", 3)

    # a second engine logprob above 0 (a broken engine): the record --skip-bad skips, its routes with it
    bad = [r[2].tolist() for r in ref[:3]]
    bad[1][1] = 0.5
    batch = _skyrl_batch(SEQS, [s[2] for s in SEQS], bad, [r[1] for r in ref[:3]], routes[:3])
    _save_skyrl(pad_training_input_batch(batch, 0), HERE / "skyrl_skip_bad", 5)

    # top-1 routes; the engine captured 4, 3 and all but the last token's: the rest are SkyRL's dummy route
    top1 = reference(top_k=1)
    captured = [4, 3, len(SEQS[2][0]) + len(SEQS[2][1]) - 1]
    routes1 = [e[:n] for (e, _, _), n in zip(top1, captured, strict=False)]
    batch = _skyrl_batch(SEQS, [s[2] for s in SEQS], [r[2].tolist() for r in ref[:3]], [r[1] for r in ref[:3]], routes1)
    _save_skyrl(pad_training_input_batch(batch, 0), HERE / "skyrl_top1", 6)
    config = json.loads((ROOT / "sample_data/tiny-qwen3-moe/config.json").read_text())
    keep = ("model_type", "num_hidden_layers", "num_experts", "decoder_sparse_step", "mlp_only_layers")
    config = {k: config[k] for k in keep} | {"num_experts_per_tok": 1}
    (HERE / "skyrl_top1/config.json").write_text(json.dumps(config, indent=1) + "\n")


def _skyrl_batch(samples, loss_masks, sampler, trainer, routes):
    from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
    from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors, make_router_padding_mask

    seq, attn, resp, rewards, loss, rollout, experts, _ = convert_prompts_responses_to_batch_tensors(
        0,
        [s[0] for s in samples],
        [s[1] for s in samples],
        [[0.0] * (len(s[1]) - 1) + [1.0] for s in samples],
        loss_masks,
        sampler,
        routes,
    )
    width = resp.shape[1]
    action = torch.zeros(len(samples), width)
    advantages = torch.zeros(len(samples), width)
    for i, (_, c, _) in enumerate(samples):
        action[i, width - len(c) :] = torch.from_numpy(np.asarray(trainer[i], dtype=np.float32))
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
            "action_log_probs": action,  # fwd_logprobs_values_reward's, before the update
            "advantages": advantages,
        }
    )
    batch.metadata = {"response_length": width}
    return batch


def _save_skyrl(batch, export_path: Path, step: int) -> None:
    out = export_path / "dumped_data"
    out.mkdir(parents=True, exist_ok=True)
    batch.save(out / f"global_step_{step}_training_input.pkl")  # RayPPOTrainer.dump_data's own call


def skyrl_old(ref, release: str) -> None:
    """SkyRL before 0.2 (skyrl 0.1.0, skyrl-train 0.3.1): prompts left-, responses right-padded; the batch a
    dict subclass pickled with its items; one row of padding (three samples, data-parallel size 2)."""
    if release == "skyrl-0.1.0":
        root = _skyrl_namespace()
        pkg = root / "skyrl"
        from skyrl.backends.skyrl_train.training_batch import TrainingInputBatch
        from skyrl.train.dataset.preprocess import convert_prompts_responses_to_batch_tensors

        trainer = pkg / "train/trainer.py"
    else:
        import skyrl_train
        from skyrl_train.dataset.preprocess import convert_prompts_responses_to_batch_tensors
        from skyrl_train.training_batch import TrainingInputBatch

        trainer = Path(skyrl_train.__path__[0]) / "trainer.py"
    seq, attn, resp, _, loss, rollout = convert_prompts_responses_to_batch_tensors(
        SimpleNamespace(pad_token_id=0),
        [s[0] for s in SEQS],
        [s[1] for s in SEQS],
        [[0.0] * (len(s[1]) - 1) + [1.0] for s in SEQS],
        [s[2] for s in SEQS],
        [r[2].tolist() for r in ref[:3]],
    )
    width = resp.shape[1]
    action = torch.zeros(len(SEQS), width)
    advantages = torch.zeros(len(SEQS), width)
    for i, (_, c, _) in enumerate(SEQS):
        action[i, : len(c)] = torch.from_numpy(ref[i][1])
        advantages[i, : len(c)] = 0.25 * (i + 1)
    batch = TrainingInputBatch(
        {
            "sequences": seq,
            "attention_mask": attn,
            "response_mask": resp,
            "loss_mask": loss,
            "rollout_logprobs": rollout,
            "action_log_probs": action,
            "advantages": advantages,
        }
    )
    batch.metadata = {"uids": ["a", "a", "b"], "response_length": width}
    import copy
    import math

    pad_batch = function_from(
        trainer, "pad_batch", {"TrainingInputBatch": TrainingInputBatch, "torch": torch, "copy": copy, "math": math},
        cls="RayPPOTrainer",
    )  # fmt: skip
    policy = SimpleNamespace(actor_infos=[SimpleNamespace(rank=SimpleNamespace(dp_size=2))])  # skyrl-train's way
    holder = SimpleNamespace(
        dispatch=SimpleNamespace(get_lcm_dp_size=lambda: 2), policy_model=policy, critic_model=None, ref_model=None
    )
    batch = pad_batch(holder, batch)
    batch.metadata.pop("uids")  # the trainer's own step before dump_data
    _save_skyrl(batch, HERE / release, 2)


# -- verl ---------------------------------------------------------------------------------------------------------


def verl(ref) -> None:
    """verl 0.9.1's agent loop: the three samples and a fourth that generated nothing; pickle and numpy modes."""
    import transformers  # noqa: F401  (real: before the stubs)

    stub(
        "ray", "hydra", "omegaconf", "verl.tools", "verl.workers", "verl.utils.dataset", "verl.utils.rollout_trace",
        "verl.trainer", "verl.utils.profiler", "verl.utils.ray_utils", "verl.utils.import_utils",
    )  # fmt: skip
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop import agent_loop
    from verl.utils.skip.rollout_skip import RolloutSkip

    worker = agent_loop.AgentLoopWorker.__new__(agent_loop.AgentLoopWorker)
    worker.tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "sample_data/tiny-qwen3"))
    worker.processor, worker.mm_processor_kwargs = None, {}
    worker.reward_loop_worker_handles, worker.distillation_enabled = None, False
    worker.rollout_config = SimpleNamespace(prompt_length=8, response_length=7)
    samples = [*SEQS, ([9, 10], [], [])]  # the fourth: an empty response
    sampler = [r[2].tolist() for r in ref[:3]] + [[]]
    outputs = []
    for (prompt, completion, mask), logprobs in zip(samples, sampler, strict=True):
        out = agent_loop.AgentLoopOutput(
            prompt_ids=prompt,
            response_ids=completion,
            response_mask=mask,
            response_logprobs=logprobs,
            num_turns=2,
            metrics=agent_loop.AgentLoopMetrics(),
        )
        outputs.append(asyncio.run(worker._agent_loop_postprocess(out, validate=False, raw_prompt="q")))
    batch = worker._postprocess(outputs)
    batch.non_tensor_batch["uid"] = np.array(["a", "a", "b", "b"], dtype=object)
    batch.meta_info["global_steps"] = 4
    for folder, method in (("verl", None), ("verl_numpy", "numpy")):
        if method is None:
            os.environ.pop("VERL_DATAPROTO_SERIALIZATION_METHOD", None)
        else:
            os.environ["VERL_DATAPROTO_SERIALIZATION_METHOD"] = method
        skip = RolloutSkip.__new__(RolloutSkip)
        skip.dump_dir, skip.exp_name, skip.project_name = str(HERE / folder), "exp", "proj"
        skip.gbs, skip.n, skip.prompt_length, skip.response_length = 2, 2, 8, 7
        skip.prepare_data(4, batch)


# -- ROLL ---------------------------------------------------------------------------------------------------------


def roll(ref) -> None:
    """ROLL's agentic pipeline: each sample's DataProto from formulate_rollouts, concatenated, dumped."""
    import copy

    import tensordict
    from tensordict import TensorDict

    src = Path(os.environ["ROLL"])
    stub(
        "ray", "codetiming", "omegaconf", "roll.platforms", "roll.utils.logging", "roll.configs",
        "roll.pipeline.rlvr", "roll.utils.kl_controller", "roll.distributed.scheduler.transfer_backend",
    )  # fmt: skip
    for name in ("roll", "roll.distributed", "roll.distributed.scheduler", "roll.utils"):
        mod = types.ModuleType(name)
        mod.__path__ = [str(src / name.replace(".", "/"))]
        sys.modules[name] = mod
    helpers = types.ModuleType("roll.utils.functionals")  # the two functions the dump path calls, from the file
    for name in ("pad_to_length", "aggregate_metrics", "union_two_dict", "divide_by_chunk_size"):
        ns = {"torch": torch, "np": np, "Dict": dict, "List": list, "Optional": None, "Union": None}
        setattr(helpers, name, function_from(src / "roll/utils/functionals.py", name, ns))
    sys.modules[helpers.__name__] = helpers
    module_from(src / "roll/distributed/scheduler/remote_protocol.py", "roll.distributed.scheduler.remote_protocol")
    protocol = module_from(src / "roll/distributed/scheduler/protocol.py", "roll.distributed.scheduler.protocol")
    mixin = module_from(
        src / "roll/distributed/scheduler/rollout_mock_mixin.py", "roll.distributed.scheduler.rollout_mock_mixin"
    )
    namespace = {
        "copy": copy, "torch": torch, "np": np, "TensorDict": TensorDict, "DataProto": protocol.DataProto,
        "pad_to_length": helpers.pad_to_length, "aggregate_metrics": helpers.aggregate_metrics,
        "RolloutCache": SimpleNamespace,
    }  # fmt: skip
    formulate = function_from(
        src / "roll/pipeline/agentic/env_manager/traj_env_manager.py",
        "formulate_rollouts",
        namespace,
        cls="TrajEnvManager",
    )
    parts = []
    for k, ((prompt, completion, mask), (_, _, sampler)) in enumerate(zip(SEQS, ref, strict=False)):
        manager = SimpleNamespace(
            pipeline_config=SimpleNamespace(sequence_length=20), tokenizer=SimpleNamespace(pad_token_id=0)
        )
        # one turn per kept run of the mask: a masked token is an observation ROLL's next turn puts in its prompt
        turns = []
        cut = mask.index(0) if 0 in mask else len(mask)
        turns.append({"prompt_ids": prompt, "response_ids": completion[:cut], "infer_logprobs": sampler[:cut].tolist(),
                      "reward": [1.0, 0.0, 1.0][k]})  # fmt: skip
        if cut < len(mask):
            turns.append({"prompt_ids": completion[cut : cut + 1], "response_ids": completion[cut + 1 :],
                          "infer_logprobs": sampler[cut + 1 :].tolist(), "reward": 0.0})  # fmt: skip
        history = [*turns, {"observation": "done"}]
        manager.rollout_cache = SimpleNamespace(
            history=history, env_id=k, group_id=[0, 0, 1][k], tag="t", step=len(turns)
        )
        parts.append(formulate(manager, manager.rollout_cache))
    batch = protocol.DataProto.concat(parts)
    batch.meta_info["metrics"] = {}
    scheduler = SimpleNamespace(mock_config=SimpleNamespace(dump_dir=str(HERE / "roll")), mode="train")
    scheduler._get_mode_str = lambda: "train"
    asyncio.run(mixin.RolloutMockMixin._dump_batch(scheduler, batch, 2))
    assert not tensordict.__version__ >= "0.5.0"  # ROLL's own test: the batch went unconsolidated


if __name__ == "__main__":
    target = sys.argv[1]
    if target == "reference":  # first: every other target reads it
        write_reference()
        raise SystemExit(0)
    ref = reference()
    if target == "skyrl":
        skyrl(ref)
    elif target in ("skyrl-0.1.0", "skyrl-train-0.3.1"):
        skyrl_old(ref, target)
    elif target == "verl":
        verl(ref)
    elif target == "roll":
        roll(ref)
    else:
        raise SystemExit(f"unknown target {target!r}")
