"""slime: the ``--dump-details DIR`` folder.

``--dump-details DIR`` turns on ``--save-debug-train-data
DIR/train_data/{rollout_id}_{rank}.pt`` and ``--save-debug-rollout-data
DIR/rollout_data/{rollout_id}.pt``. (slime's docs name it
``train_data/{rollout_id}.pt``; its code writes ``{rollout_id}_{rank}.pt``. Both
names are accepted.)

Train dump, ``format_version`` 2 (``save_debug_train_data`` /
``_build_dump_payload`` in slime's Megatron backend): only the last pipeline
stage, tensor-parallel rank 0, gathers every data-parallel shard and writes
``{"format_version": 2, "rollout_id", "rank", "samples": [...], "dp_shards",
"raw_reward"}``. Each sample dict holds ``tokens`` (prompt + response,
``total_lengths`` long), ``response_lengths``, and per *response* token
``loss_masks``, ``rollout_log_probs`` (SGLang's), ``log_probs`` (Megatron's
recompute before the update), ``advantages``; plus ``data_parallel_rank``,
``sample_index`` and ``rollout_position`` (the sample's index in the rollout
dump's ``samples``). It holds only tensors and plain values, so it loads with
``torch.load(weights_only=True)``.

Rollout dump: ``{"rollout_id", "samples": [Sample.to_dict(), ...]}`` with
``group_index``, ``index``, ``reward`` (a number, or a dict with a
``reward_key``) and free-form ``metadata``. Metadata can hold any Python
object, so the file may need full unpickling, which runs code stored in the
file: the safe loader is tried first, the full one only with
``--trust-pickle``.

Alignment: slime slices the logits ``[start-1, end-1)`` for the response
tokens ``[start, end)``, so ``log_probs[i]``, ``rollout_log_probs[i]``,
``loss_masks[i]`` and ``advantages[i]`` all refer to response token i, i.e.
``tokens[total_length - response_length + i]``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import (
    ImportFormatError,
    MismatchscopeError,
    NoTrainerLogprobsError,
    UsageError,
)
from ._base import ImportContext, SourceFile, short
from ._mask import add_turns, refuse_mask_values
from ._values import check_record, exact_ints, host_array, missing_fields
from .safe_load import load_torch

FORMAT_VERSION = 2
_TRAIN_FILE = re.compile(r"^(\d+)(?:_(\d+))?\.pt$")

SEMANTICS = {
    "sampler_logprob": "rollout_log_probs: SGLang's logprob of response token i, as the rollout engine returned it",
    "trainer_logprob": "log_probs: Megatron's recompute before the update, logits divided by --rollout-temperature",
    "alignment": "index i of the per-response-token lists refers to tokens[total_length - response_length + i]; "
    "no shift applied",
    "mask": "loss_masks over the response (0 on tool and observation tokens of multi-turn samples); "
    "prompt tokens are outside the response and count as dropped",
    "policy_lag": "none with slime's synchronous train.py; with train_async.py a rollout is generated one "
    "step behind the weights that recompute it, and the gap includes that lag",
    "reward": "the rollout dump's sample reward (raw), else the train dump's raw_reward",
    "prompt_id": "group_index from the rollout dump",
    "sample_index": "order of the sample within its group in the rollout dump",
    "rank": "data_parallel_rank of the sample's shard",
    "step": "rollout_id",
}


@dataclass(frozen=True)
class RolloutIndex:
    """A rollout dump's samples, each as (group, ordinal in its group, reward): by position in the dump, and by
    ``Sample.index`` where the dump records one."""

    by_position: dict[int, tuple[int, int, float]]
    by_index: dict[int, tuple[int, int, float]]


class SlimeImporter:
    name = "slime"

    def __init__(self, columns: dict[str, str] | None = None):
        if columns:
            raise UsageError(
                "--column applies to the jsonl and parquet formats only",
                hint="slime dumps have a fixed layout; drop --column",
            )
        self.warnings: list[str] = []
        self.columns: tuple[str, ...] = ("advantage", "reward", "step", "rank")
        self.rollout_dir: Path | None = None
        self._rollout_cache: tuple[int, RolloutIndex | None] | None = None

    def discover(self, src: Path) -> list[SourceFile]:
        if src.is_file():
            root, paths = src.parent.parent, [src]
        else:
            root = src.parent if src.name == "train_data" else src
            paths = sorted((root / "train_data").glob("*.pt")) if (root / "train_data").is_dir() else []
        files = []
        for p in paths:
            m = _TRAIN_FILE.match(p.name)
            if m is None:  # eval_ dumps and others
                continue
            files.append(
                SourceFile(
                    path=p,
                    rel=p.relative_to(root).as_posix(),
                    step=int(m.group(1)),
                    rank=int(m.group(2)) if m.group(2) else None,
                )
            )
        rollout_dir = root / "rollout_data"
        if rollout_dir.is_dir():
            self.rollout_dir = rollout_dir
            self.columns += ("prompt_id", "sample_index")
        elif files:
            self.warnings.append(
                "no rollout_data/ folder beside train_data/: imported without rewards, prompt ids and sample indices"
            )
        return sorted(files, key=lambda f: (f.step, f.rank or 0, f.rel))

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return dict(SEMANTICS)

    def read(self, f: SourceFile, ctx: ImportContext) -> None:
        assert f.step is not None  # discover names every file by its rollout step
        try:
            data = _load(f.path, f.rel, ctx.trust_pickle)
            samples = self._check_train(f, data)
            rollout = self._rollout(f.step, ctx) if self.rollout_dir is not None else None
        except ImportFormatError as e:
            ctx.bad(e, f)
            return
        except MismatchscopeError:
            raise
        except _SHAPE_ERRORS as e:  # a field of a shape slime does not write
            ctx.bad(ImportFormatError(f"unexpected value ({short(e)})", file=f.rel), f)
            return
        raw_reward = data.get("raw_reward")
        for k, sample in enumerate(samples):
            try:
                values, dropped = self._convert(f, k, sample, rollout, raw_reward)
                check_record(values, file=f.rel, record=k)
            except ImportFormatError as e:
                ctx.bad(e, f)
                continue
            except MismatchscopeError:
                raise
            except _SHAPE_ERRORS as e:
                ctx.bad(ImportFormatError(f"unexpected value ({short(e)})", file=f.rel, record=k), f)
                continue
            ctx.note(
                "nonfinite_logprobs",
                int(
                    len(values["token_id"])
                    - np.count_nonzero(np.isfinite(values["sampler_logprob"]) & np.isfinite(values["trainer_logprob"]))
                ),
            )
            ctx.add(f, values, dropped, record=k)

    # -- the train dump ----------------------------------------------------------
    def _check_train(self, f: SourceFile, data: Any) -> list:
        if not isinstance(data, dict):
            raise ImportFormatError(f"expected a dict, got {type(data).__name__}", file=f.rel)
        version = data.get("format_version")
        if version is None and "rollout_data" in data:
            raise ImportFormatError(
                "a train dump without format_version (one file per rank, tensor-parallel duplicates included)",
                file=f.rel,
                hint=f"this importer reads format_version {FORMAT_VERSION}; dump again with a slime that writes it",
            )
        if version != FORMAT_VERSION:
            raise ImportFormatError(
                f"unknown format_version {version!r}; this importer reads {FORMAT_VERSION}",
                file=f.rel,
                hint="upgrade mismatchscope",
            )
        samples = data.get("samples")
        if not isinstance(samples, list):
            raise ImportFormatError("no 'samples' list", file=f.rel)
        rollout_id = data.get("rollout_id")
        if rollout_id is not None and int(rollout_id) != f.step:
            raise ImportFormatError(f"holds rollout_id {rollout_id}, its name says {f.step}", file=f.rel)
        return samples

    def _convert(
        self, f: SourceFile, k: int, s: Any, rollout: RolloutIndex | None, raw_reward: Any
    ) -> tuple[dict, int]:
        if not isinstance(s, dict):
            raise ImportFormatError(f"sample is a {type(s).__name__}, not a dict", file=f.rel, record=k)
        if s.get("log_probs") is None and s.get("rollout_log_probs") is not None:
            raise NoTrainerLogprobsError(
                "samples carry rollout_log_probs but no log_probs: the trainer did not recompute them "
                "(--use-rollout-logprobs?), so there is no trainer side",
                file=f.rel,
                record=k,
            )
        missing = missing_fields(s, ("tokens", "response_lengths", "rollout_log_probs", "log_probs"), "sample")
        if missing:
            raise ImportFormatError(missing, file=f.rel, record=k)
        tokens, per_token, resp = _per_token(f, k, s)
        keep = _kept(f, k, per_token, resp)
        kept = int(np.count_nonzero(keep))
        values: dict[str, Any] = {
            "token_id": tokens[len(tokens) - resp :][keep],
            "sampler_logprob": per_token["rollout_log_probs"][keep],
            "trainer_logprob": per_token["log_probs"][keep],
            "advantage": per_token["advantages"][keep] if "advantages" in per_token else math.nan,
            "step": f.step,
            "rank": int(_item(s.get("data_parallel_rank", f.rank or 0), "data_parallel_rank")),
        }
        values["reward"] = _sample_reward(f, k, s, rollout, raw_reward, values)
        add_turns(values, keep)
        return values, len(tokens) - kept

    # -- the rollout dump --------------------------------------------------------
    def _rollout(self, rollout_id: int, ctx: ImportContext) -> RolloutIndex:
        if self._rollout_cache is not None and self._rollout_cache[0] == rollout_id:
            cached = self._rollout_cache[1]
            if cached is None:
                raise ImportFormatError(
                    "its rollout dump could not be read (see above)", file=f"rollout_data/{rollout_id}.pt"
                )
            return cached
        self._rollout_cache = (rollout_id, None)
        assert self.rollout_dir is not None
        path = self.rollout_dir / f"{rollout_id}.pt"
        rel = f"rollout_data/{rollout_id}.pt"
        if not path.exists():
            raise ImportFormatError("missing: train_data has this rollout but rollout_data does not", file=rel)
        data = _load(path, rel, ctx.trust_pickle, rollout=True)
        samples = data.get("samples") if isinstance(data, dict) else None
        if not isinstance(samples, list):
            raise ImportFormatError("no 'samples' list", file=rel)
        by_position: dict[int, tuple[int, int, float]] = {}
        by_index: dict[int, tuple[int, int, float]] = {}
        seen: dict[int, int] = {}
        for pos, sample in enumerate(samples):
            group = _field(sample, "group_index")
            group = pos if group is None else int(group)
            ordinal = seen.get(group, 0)
            seen[group] = ordinal + 1
            info = (group, ordinal, _reward(_field(sample, "reward")))
            by_position[pos] = info
            index = _field(sample, "index")
            if index is not None:
                by_index[int(index)] = info
        result = RolloutIndex(by_position, by_index)
        self._rollout_cache = (rollout_id, result)
        return result


_SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError)
"""what reading a field of an unexpected type raises; ImportFormatError (a ValueError) is caught before."""


def _load(path: Path, rel: str, trust_pickle: bool, rollout: bool = False) -> Any:
    """A slime dump through the safe loader (:func:`.safe_load.load_torch`), with slime's reason for a refusal."""
    what = (
        "slime's rollout dump stores Sample.to_dict() with free-form metadata, and this one holds "
        "Python objects that only a full unpickle can rebuild"
        if rollout
        else "this train dump holds Python objects that only a full unpickle can rebuild"
    )
    return load_torch(path, rel, trust_pickle, what)


def _per_token(f: SourceFile, k: int, s: dict) -> tuple[np.ndarray, dict[str, np.ndarray], int]:
    """The sample's tokens, its per-token lists (one value per response token each) and its response length."""
    resp = _count(s["response_lengths"], "response_lengths", f, k)
    try:
        tokens = _array(s["tokens"], np.int64)
        per_token = {
            key: _array(s[key], np.float64)
            for key in ("rollout_log_probs", "log_probs", "loss_masks", "advantages")
            if s.get(key) is not None
        }
    except (TypeError, ValueError) as e:
        raise ImportFormatError(f"non-numeric value ({e})", file=f.rel, record=k) from None
    bad = {key: len(v) for key, v in per_token.items() if len(v) != resp}
    if bad or not 0 < resp <= len(tokens):
        shown = ", ".join(f"{key}={v}" for key, v in bad.items()) or f"tokens={len(tokens)}"
        raise ImportFormatError(
            f"misaligned per-token lists: response_lengths {resp} but {shown}", file=f.rel, record=k
        )
    return tokens, per_token, resp


def _kept(f: SourceFile, k: int, per_token: dict[str, np.ndarray], resp: int) -> np.ndarray:
    """The response tokens the loss counts (``loss_masks``; all without one); a sample that keeps none is bad."""
    if "loss_masks" in per_token:
        try:
            refuse_mask_values(per_token["loss_masks"], "loss_masks")
        except ImportFormatError as e:
            raise ImportFormatError(e.reason, file=f.rel, record=k, hint=e.hint) from None
    keep = per_token["loss_masks"] != 0 if "loss_masks" in per_token else np.ones(resp, dtype=bool)
    if not np.count_nonzero(keep):
        raise ImportFormatError("loss_masks selects no token", file=f.rel, record=k)
    return keep


def _sample_reward(
    f: SourceFile, k: int, s: dict, rollout: RolloutIndex | None, raw_reward: Any, values: dict[str, Any]
) -> float:
    """The sample's reward (the rollout dump's when it has one); with a rollout dump, also its group and ordinal."""
    pos = s.get("rollout_position")
    reward = math.nan
    if isinstance(raw_reward, (list, tuple)) and pos is not None and int(pos) < len(raw_reward):
        reward = _reward(raw_reward[int(pos)])
    if rollout is None:
        return reward
    info = rollout.by_position.get(int(pos)) if pos is not None else None
    if info is None and s.get("sample_index") is not None:
        info = rollout.by_index.get(int(_item(s["sample_index"], "sample_index")))
    if info is None:
        raise ImportFormatError(
            f"no matching sample in rollout_data/{f.step}.pt "
            f"(rollout_position {pos!r}, sample_index {s.get('sample_index')!r})",
            file=f.rel,
            record=k,
        )
    group, ordinal, rollout_reward = info
    values["prompt_id"], values["sample_index"] = group, ordinal
    return reward if math.isnan(rollout_reward) else rollout_reward


def _array(value: Any, dtype: type) -> np.ndarray:
    value = np.asarray(host_array(value)).reshape(-1)  # a torch tensor (possibly bf16) or a list
    if np.dtype(dtype).kind in "iu":
        return exact_ints(value, "token ids")
    return value.astype(dtype, copy=False)


def _item(value: Any, name: str = "a per-sample field") -> Any:
    """A per-sample number that may arrive as a tensor or array of one value; more values are refused (ValueError)."""
    size = value.numel() if hasattr(value, "numel") else value.size if isinstance(value, np.ndarray) else 1
    if size != 1:
        raise ValueError(f"{name} holds {size} values, not one")
    return value.item() if hasattr(value, "item") else value


def _count(value: Any, name: str, f: SourceFile, k: int) -> int:
    """``response_lengths``: one integer (a Python int or a one-value tensor), or the sample is bad."""
    try:
        v = _item(value, name)
    except ValueError as e:
        raise ImportFormatError(f"{e}: it must be one integer per sample", file=f.rel, record=k) from None
    if isinstance(v, float) and v.is_integer():  # a float tensor of a whole number
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ImportFormatError(f"{name} is {v!r}, not an integer", file=f.rel, record=k)
    return int(v)


def _field(sample: Any, name: str) -> Any:
    return sample.get(name) if isinstance(sample, dict) else getattr(sample, name, None)


def _reward(value: Any) -> float:
    value = _item(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan  # a dict of reward parts: which key slime used is not in the dump
    return float(value)
