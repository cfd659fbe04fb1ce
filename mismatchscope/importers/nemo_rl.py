"""NeMo-RL GRPO: the ``train_data_step{N}.jsonl`` files its logger writes every step.

Layout, as written by ``grpo_train`` in ``nemo_rl/algorithms/grpo.py`` through
``Logger.log_batched_dict_as_jsonl`` (``nemo_rl/utils/logger.py``): one line
per training sample, each field sliced from the step's batch as a batch of
one, so per-token lists arrive as ``[[...]]`` and per-sample values as
``[x]``, plus an ``idx`` key. Files live in the experiment's log directory
(``logs/exp_NNN/``); ``N`` is the 1-based step.

Per line: ``token_ids`` (the whole sequence, prompt included, right-padded to
the batch's longest), ``token_loss_mask`` (1 on generated tokens; 0 on prompt,
tool/environment and padding tokens), ``generation_logprobs`` (the generation
backend's logprob, 0 on non-generated tokens), ``prev_logprobs`` (the policy's
recompute before the update), ``advantages`` (per token; older versions logged
one per sample), ``rewards``, ``input_lengths`` (unpadded length),
``sample_loss_mask``, ``content``; with dynamic sampling also
``filtered_rewards``.

Alignment: NeMo-RL's ``get_logprobs`` puts "the logprob of input token i at
position i" (position 0 holds 0), and the generation logprobs are stored per
token the same way, so index i of every list refers to token i. No shift.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError, InputError, NoTrainerLogprobsError, UsageError
from ._base import SourceFile, note
from ._mask import add_turns, mask_span
from ._values import check_lengths, require, scalar, take_floats, take_floats_or_constant, take_ints, unwrap

_STEP_FILE = re.compile(r"^train_data_step(\d+)\.jsonl$")

SEMANTICS = {
    "sampler_logprob": "generation_logprobs: the generation backend's (vLLM) logprob of token i",
    "trainer_logprob": "prev_logprobs: the policy's logprob of token i given tokens < i, "
    "recomputed before the update (policy.get_logprobs)",
    "alignment": "index i of every per-token list refers to token i (position 0 holds 0); no shift applied",
    "mask": "token_loss_mask; sample_loss_mask is not applied (a sample the loss ignored still has both logprobs)",
    "advantage": "advantages as logged (per token; a per-sample value is repeated on each token)",
    "reward": "filtered_rewards when present (dynamic sampling: aligned with the trained rows), else rewards",
    "temperature": "not recorded in the dump: both sides are meant to be at policy.generation.temperature; "
    "check the run's config",
    "policy_lag": "none for synchronous GRPO (prev_logprobs use the weights that generated the batch); with "
    "grpo.async_grpo.enabled trajectories can be up to max_trajectory_age_steps old, and the gap "
    "then includes that lag",
    "force_on_policy_ratio": "refused: prev_logprobs are all zeros in that mode (no trainer side)",
}


class NemoRLImporter:
    name = "nemo-rl"
    columns: tuple[str, ...] = ("advantage", "reward", "step")

    def __init__(self, columns: dict[str, str] | None = None):
        if columns:
            raise UsageError(
                "--column applies to the jsonl and parquet formats only",
                hint="nemo-rl files have a fixed layout; drop --column",
            )
        self.warnings: list[str] = []

    def discover(self, src: Path) -> list[SourceFile]:
        if src.is_file():
            paths = [src]
            root = src.parent
        else:
            paths = [p for p in src.rglob("train_data_step*.jsonl") if _STEP_FILE.match(p.name)]
            root = src
        files = []
        for p in paths:
            m = _STEP_FILE.match(p.name)
            if m is None:
                raise InputError(
                    f"{p}: cannot tell the step from the file name",
                    hint="NeMo-RL names its files train_data_step{N}.jsonl",
                )
            files.append(SourceFile(path=p, rel=p.relative_to(root).as_posix(), step=int(m.group(1))))
        return sorted(files, key=lambda f: (f.step, f.rel))

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return dict(SEMANTICS)

    def convert(self, f: SourceFile, line: int, rec: dict[str, Any], notes: dict[str, int]) -> tuple[dict, int]:
        per_token, length = _per_token_lists(f, line, rec)
        lo, hi, keep = mask_span(per_token["token_loss_mask"], length, "token_loss_mask")
        if lo == hi:
            raise ImportFormatError("token_loss_mask selects no token", file=f.rel, line=line)
        token_id, sampler, trainer, advantage, reward = _taken(f, line, rec, per_token, lo, hi, keep)
        kept = len(token_id)
        if kept >= 2 and not trainer.any() and sampler.any():
            raise NoTrainerLogprobsError(
                "prev_logprobs are all zeros on generated tokens: this run used NeMo-RL's "
                "force_on_policy_ratio mode, which skips the trainer recompute, so there is no trainer side "
                "to compare with",
                file=f.rel,
                line=line,
                hint="re-run with loss_fn.force_on_policy_ratio=false (or set grpo.seq_logprob_error_threshold)",
            )
        note(notes, "nonfinite_logprobs", int(kept - np.count_nonzero(np.isfinite(sampler) & np.isfinite(trainer))))
        if scalar(rec.get("sample_loss_mask"), 1) == 0:
            note(notes, "sequences_with_sample_loss_mask_0")
        values = {
            "token_id": token_id,
            "sampler_logprob": sampler,
            "trainer_logprob": trainer,
            "advantage": advantage,
            "reward": reward,
            "step": f.step,
        }
        add_turns(values, keep)
        return values, length - kept


@json_edge
def _per_token_lists(f: SourceFile, line: int, rec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The record's per-token lists (``token_ids`` first; ``advantages`` when it is one), of one length, and
    where the prompt ends (``input_lengths``)."""
    require(f, line, None, rec, "token_ids", "token_loss_mask", "generation_logprobs", "prev_logprobs")
    ids = unwrap(rec["token_ids"])
    if not isinstance(ids, list):
        raise ImportFormatError("token_ids is not a list", file=f.rel, line=line)
    n = len(ids)
    adv = unwrap(rec.get("advantages"))
    per_token = {
        "token_loss_mask": unwrap(rec["token_loss_mask"]),
        "generation_logprobs": unwrap(rec["generation_logprobs"]),
        "prev_logprobs": unwrap(rec["prev_logprobs"]),
    }
    if isinstance(adv, list) and (len(adv) != 1 or n == 1):
        per_token["advantages"] = adv
    check_lengths(f, line, None, per_token, n)
    length = scalar(rec.get("input_lengths"), n)
    if not isinstance(length, int) or not 0 < length <= n:
        raise ImportFormatError(f"input_lengths {length!r} does not fit {n} token_ids", file=f.rel, line=line)
    return {"token_ids": ids, **per_token}, length


def _taken(
    f: SourceFile, line: int, rec: dict[str, Any], per_token: dict[str, Any], lo: int, hi: int, keep: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any, float]:
    """The kept tokens' ids, logprobs and advantages (a list, or one number per sequence), and the reward."""
    adv = per_token.get("advantages", unwrap(rec.get("advantages")))
    try:
        token_id = take_ints(per_token["token_ids"], lo, hi, keep)
        sampler = take_floats(per_token["generation_logprobs"], lo, hi, keep, "generation_logprobs")
        trainer = take_floats(per_token["prev_logprobs"], lo, hi, keep, "prev_logprobs")
        if "advantages" in per_token:
            advantage: Any = take_floats_or_constant(adv, lo, hi, keep, "advantages")
        else:
            advantage = _number(scalar(adv), f, line, "advantages")
        reward = _number(scalar(rec.get("filtered_rewards", rec.get("rewards"))), f, line, "rewards")
    except (TypeError, ValueError) as e:
        if isinstance(e, ImportFormatError) and e.file is not None:  # already says where (``_number``)
            raise
        raise ImportFormatError(f"non-numeric value in a per-token list ({e})", file=f.rel, line=line) from None
    return token_id, sampler, trainer, advantage, reward


def _number(value: Any, f: SourceFile, line: int, name: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ImportFormatError(f"{name} is not a number: {value!r}", file=f.rel, line=line)
    return float(value)
