"""Writers of small dumps in each framework's exact on-disk layout.

Each one mirrors the framework code cited in the importer's docstring: file
names, nesting, batch-of-one wrapping, placeholder zeros on prompt/tool
tokens, right padding, the serializer's handling of non-finite floats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.helpers import cli
from tests.inputs import error_line

# -- NeMo-RL -----------------------------------------------------------------


def nemo_sample(
    prompt: list[int],
    response: list[int],
    gen_lp: list[float],
    prev_lp: list[float],
    adv: float | list[float],
    reward: float,
    *,
    width: int | None = None,
    prompt_prev: list[float] | None = None,
    mask: list[int] | None = None,
) -> dict[str, Any]:
    """One training sample as the GRPO loop holds it: the whole sequence, right-padded to ``width``.

    ``prev_lp`` covers the response; prompt positions get ``prompt_prev`` (the
    trainer's logprobs of prompt tokens, position 0 = 0) and the sampler's
    placeholder zeros. ``mask`` overrides the response part of the loss mask
    (0 for a tool token inside the response).
    """
    n = len(prompt) + len(response)
    width = width or n
    pad = width - n
    resp_mask = mask if mask is not None else [1] * len(response)
    adv_resp = adv if isinstance(adv, list) else [adv] * len(response)
    pp = prompt_prev if prompt_prev is not None else [0.0] + [-1.0] * (len(prompt) - 1)
    return {
        "token_ids": prompt + response + [0] * pad,
        "token_loss_mask": [0] * len(prompt) + resp_mask + [0] * pad,
        "generation_logprobs": [0.0] * len(prompt) + gen_lp + [0.0] * pad,
        "prev_logprobs": pp + prev_lp + [0.0] * pad,
        "advantages": [0.0] * len(prompt) + adv_resp + [0.0] * pad,
        "rewards": reward,
        "input_lengths": n,
        "sample_loss_mask": 1.0,
        "content": "<decoded text>",
    }


def write_nemo_step(
    logdir: Path, step: int, samples: list[dict[str, Any]], raw_lines: dict[int, str] | None = None
) -> Path:
    """``logdir/train_data_step{step}.jsonl`` as ``Logger.log_batched_dict_as_jsonl`` writes it:
    each field sliced as a batch of one (``[value]``), plus ``idx``, via ``json.dumps``."""
    logdir.mkdir(parents=True, exist_ok=True)
    path = logdir / f"train_data_step{step}.jsonl"
    lines = [json.dumps({**{k: [v] for k, v in s.items()}, "idx": i}) for i, s in enumerate(samples)]
    for lineno, text in (raw_lines or {}).items():
        lines.insert(lineno - 1, text)
    path.write_text("".join(line + "\n" for line in lines))
    return path


# -- prime-rl ----------------------------------------------------------------


def prime_record(
    prompt: list[int],
    response: list[int],
    inf_lp: list[float | None],
    tr_lp: list[float | None],
    adv: float,
    reward: float,
    *,
    step: int,
    rank: int,
    idx: int,
    mask: list[bool] | None = None,
    entropy: list[float] | None = None,
    schema_version: int = 1,
) -> dict[str, Any]:
    """One exported sequence, as ``TokenExporter.export`` slices it (None = a non-finite value)."""
    n = len(prompt) + len(response)
    resp_mask = mask if mask is not None else [True] * len(response)
    loss_mask = [False] * len(prompt) + resp_mask
    return {
        "schema_version": schema_version,
        "step": step,
        "export_step": step,
        "rank": rank,
        "micro_step": 0,
        "micro_sequence_idx": idx,
        "export_sequence_idx": idx,
        "run_id": None,
        "env_name": "math",
        "token_ids": prompt + response,
        "position_ids": list(range(n)),
        "loss_mask": loss_mask,
        "advantages": [adv if m else 0.0 for m in loss_mask],
        "losses": [{"rl": {"advantage": adv if m else 0.0, "mask": m}} for m in loss_mask],
        "rewards": [reward] * n,
        "inference_logprobs": [0.0] * len(prompt) + inf_lp,
        "trainer_logprobs": [-2.0] * len(prompt) + tr_lp,
        "entropy": entropy if entropy is not None else [0.5] * n,
        "mismatch_kl": [0.0] * n,
        "log_importance_ratio": [0.0] * n,
        "importance_ratio": [1.0] * n,
        "prob_delta": [0.0] * n,
        "is_masked": [False] * n,
        "is_masked_high": [False] * n,
        "is_masked_low": [False] * n,
    }


def write_prime_step(
    out_dir: Path,
    step: int,
    rank: int,
    records: list[dict[str, Any]],
    *,
    stable: bool = True,
    run_id: str | None = None,
    raw_lines: dict[int, str] | None = None,
) -> Path:
    """``OUTPUT_DIR[/run_id]/token_exports/step_{N}/rank_{R}.jsonl``, compact JSON, allow_nan=False."""
    base = out_dir / run_id if run_id else out_dir
    step_dir = base / "token_exports" / f"step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    path = step_dir / f"rank_{rank}.jsonl"
    lines = [json.dumps(r, separators=(",", ":"), allow_nan=False) for r in records]
    for lineno, text in (raw_lines or {}).items():
        lines.insert(lineno - 1, text)
    path.write_text("".join(line + "\n" for line in lines))
    if stable:
        (step_dir / "STABLE").touch()
    return path


# -- slime -------------------------------------------------------------------


def slime_train_sample(
    prompt: list[int],
    response: list[int],
    rollout_lp: list[float],
    lp: list[float],
    adv: float,
    *,
    loss_mask: list[int] | None = None,
    position: int,
    sample_index: int,
    dp_rank: int = 0,
) -> dict[str, Any]:
    """One entry of the format_version 2 ``samples`` list (tensors as slime keeps them)."""
    import torch

    r = len(response)
    return {
        "data_parallel_rank": dp_rank,
        "sample_index": sample_index,
        "rollout_position": position,
        "tokens": torch.tensor(prompt + response, dtype=torch.long),
        "response_lengths": r,
        "total_lengths": len(prompt) + r,
        "loss_masks": torch.tensor(loss_mask if loss_mask is not None else [1] * r, dtype=torch.int),
        "rollout_log_probs": torch.tensor(rollout_lp, dtype=torch.float32),
        "log_probs": torch.tensor(lp, dtype=torch.float32),
        "ref_log_probs": torch.tensor(lp, dtype=torch.float32),
        "advantages": torch.tensor([adv] * r, dtype=torch.float32),
        "returns": torch.tensor([adv] * r, dtype=torch.float32),
        "rewards": adv,
        "truncated": 0,
    }


def write_slime(
    dump: Path,
    rollout_id: int,
    samples: list[dict[str, Any]],
    rollout_samples: list[dict[str, Any]] | None,
    *,
    rank: int = 0,
    raw_reward: list[float] | None = None,
    format_version: int | None = 2,
) -> Path:
    """``DIR/train_data/{rollout_id}_{rank}.pt`` and ``DIR/rollout_data/{rollout_id}.pt``."""
    import torch

    (dump / "train_data").mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "rollout_id": rollout_id,
        "rank": rank,
        "samples": samples,
        "dp_shards": [
            {
                "rank": rank,
                "data_parallel_rank": 0,
                "sample_indices": [s["sample_index"] for s in samples],
                "partition": [s["rollout_position"] for s in samples],
                "micro_batch_indices": [[0]],
                "num_microbatches": [1],
                "global_batch_sizes": [len(samples)],
            }
        ],
    }
    if format_version is not None:
        payload["format_version"] = format_version
    if raw_reward is not None:
        payload["raw_reward"] = raw_reward
    path = dump / "train_data" / f"{rollout_id}_{rank}.pt"
    torch.save(payload, path)
    if rollout_samples is not None:
        (dump / "rollout_data").mkdir(parents=True, exist_ok=True)
        torch.save({"rollout_id": rollout_id, "samples": rollout_samples}, dump / "rollout_data" / f"{rollout_id}.pt")
    return path


def slime_rollout_sample(
    group_index: int, index: int, reward: Any, tokens: list[int], response_length: int, metadata: Any = None
) -> dict[str, Any]:
    """``Sample.to_dict()``: the dataclass fields, status as its value."""
    return {
        "group_index": group_index,
        "index": index,
        "prompt": "question",
        "tokens": tokens,
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "response": "answer",
        "response_length": response_length,
        "label": "42",
        "reward": reward,
        "loss_mask": None,
        "weight_versions": ["3"],
        "rollout_log_probs": None,
        "rollout_routed_experts": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "status": "completed",
        "metadata": metadata if metadata is not None else {},
        "generate_function_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": 0,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
    }


class ToolTrace:
    """Free-form metadata a custom generate function might attach: only a full unpickle rebuilds it."""

    def __init__(self, calls: int):
        self.calls = calls


def f32(values: list[float]) -> np.ndarray:
    """What a float32 tensor holds, as float64 (slime's logprobs are float32 tensors)."""
    return np.asarray(values, dtype=np.float32).astype(np.float64)


# ---- hostile dumps: the good record and the files around it ----

# The good record: two tokens, 5 and 6, log q = -0.5, -1.0 and log p = -0.4, -1.1 (GOOD is its JSON text
# without the closing brace, so a case appends its own fields).
GOOD = '{"token_ids": [5, 6], "sampler_logprobs": [-0.5, -1.0], "trainer_logprobs": [-0.4, -1.1]'
GOOD_COLUMNS = {"token_ids": [[5, 6]], "sampler_logprobs": [[-0.5, -1.0]], "trainer_logprobs": [[-0.4, -1.1]]}


def import_cli(fmt: str, src, out, *args: str):
    """``mismatchscope import FMT SRC --out OUT ARGS``."""
    return cli("import", fmt, str(src), "--out", str(out), *args)


def imported_tokens(out) -> dict:
    """The imported run's token columns."""
    return pq.read_table(out / "tokens").to_pydict()


def jsonl_file(tmp_path, text: str | bytes, name: str = "d.jsonl"):
    """A dump file holding exactly ``text`` (bytes as given: a file need not be UTF-8)."""
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def parquet_file(tmp_path, columns: dict, name: str = "d.parquet", **options):
    """A Parquet dump of ``columns`` as pyarrow writes them (``options`` to the writer)."""
    path = tmp_path / name
    pq.write_table(pa.table(columns), path, **options)
    return path


def slime_torch_sample(**changes):
    """One sample of a slime rollout dump as torch tensors (changes replace fields)."""
    import torch

    s = {
        "tokens": torch.tensor([1, 2, 3, 4]),
        "response_lengths": 2,
        "loss_masks": torch.tensor([1, 1]),
        "rollout_log_probs": torch.tensor([-0.5, -0.6]),
        "log_probs": torch.tensor([-0.4, -0.7]),
        "advantages": torch.tensor([1.0, 1.0]),
        "rollout_position": 0,
    }
    s.update(changes)
    return s


def slime_dump(tmp_path, data: bytes):
    """A slime dump folder holding one train_data file of these bytes."""
    train = tmp_path / "dump" / "train_data"
    train.mkdir(parents=True, exist_ok=True)
    (train / "0_0.pt").write_bytes(data)
    return tmp_path / "dump"


def import_error(fmt, src, tmp_path) -> str:
    """The one error line of an import expected to fail."""
    return error_line(cli("import", fmt, str(src), "--out", str(tmp_path / "out")))
