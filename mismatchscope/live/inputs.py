"""A training step's tensors -> compact host columns of the token-pair format, checked.

Training loops hold ``[B, T]`` padded tensors and a mask of the tokens that
count (the response tokens, without padding or tool output). :func:`prepare`
copies exactly those tokens to host memory (torch tensors on any device, numpy
arrays or nested lists), checks them, and returns 1-D columns named as in
``schema.py``. Nothing of the caller's is kept: boolean indexing copies, and
the per-sequence arrays are copied explicitly.

The checks follow the reader's, so a step ``add()`` accepts is a step every
command can read: positive logprobs beyond ``POSITIVE_LOGPROB_TOLERANCE``
are an error; a non-finite logprob (NaN, -inf, the -9999 sentinel) is
recorded as given, and the reader (and the ``Monitor``) count it and leave it
out of every number, with a warning.

torch is never imported here: a tensor is recognised by its type's module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import InputError, RecorderInputError, UsageError
from ..schema import (
    MAX_ABS_STEP,
    NOT_RECORDED_ID,
    POSITIVE_LOGPROB_TOLERANCE,
    TOKEN_ID_RULE,
    first_refused,
    positive_logprobs,
)
from ..turns import row_turns


@dataclass
class StepBatch:
    """One ``add()`` call's tokens, host-side, in the token-pair format."""

    step: int
    columns: dict[str, np.ndarray]
    """1-D per-token columns (``*_topk_*``: 2-D ``[N, K]``); ``sequence_id`` and ``position`` filled in."""
    sequences: int
    """rows of the batch with at least one token under the mask."""
    rows: int
    """B, the batch size as given."""
    experts: dict[str, np.ndarray] | None = None
    """side -> the masked tokens' expert ids ``[N, layers, k]`` (MoE runs); checked against the run's routing
    layout and cut to the MoE layers by ``live.routes.check_experts`` (``routed`` then True)."""
    routed: bool = False

    @property
    def tokens(self) -> int:
        return int(self.columns["sampler_logprob"].size)


def is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def to_host(x: Any) -> np.ndarray:
    """A numpy view or copy of ``x`` on the host. Callers copy what they keep."""
    if is_tensor(x):
        t = x.detach()
        if t.is_floating_point() and t.element_size() < 4:  # bfloat16 / float16: numpy has no bfloat16
            t = t.float()
        return t.cpu().numpy()
    return np.asarray(x)


STEP_TIMING_KEYS = ("sampling_seconds", "training_seconds", "sampling_tokens", "training_tokens")
"""``Recorder.add()``'s optional per-step measurements, in :class:`StepTiming`'s order."""


@dataclass(frozen=True)
class StepTiming:
    """A step's clock: when it was recorded, and where the loop says, its sampling and training cost.

    Written as per-token columns (constant over the step's tokens), so every
    reader that groups tokens by step reads them with no second file; the
    repeated values compress to almost nothing in Parquet.
    """

    wall_time: float
    sampling_seconds: float | None = None
    training_seconds: float | None = None
    sampling_tokens: int | None = None
    training_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("wall_time", "sampling_seconds", "training_seconds", "sampling_tokens", "training_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
                raise RecorderInputError(f"{name} must be a number >= 0, got {v!r}")
            if v is not None and name.endswith("tokens") and v != int(v):
                raise RecorderInputError(f"{name} must be a whole number of tokens, got {v!r}")

    def columns(self, rows: int) -> dict[str, np.ndarray]:
        cols: dict[str, np.ndarray] = {"wall_time": np.full(rows, float(self.wall_time), np.float64)}
        for name, dtype in (
            ("sampling_seconds", np.float64),
            ("training_seconds", np.float64),
            ("sampling_tokens", np.int64),
            ("training_tokens", np.int64),
        ):
            v = getattr(self, name)
            if v is not None:
                cols[f"step_{name}"] = np.full(rows, v, dtype)
        return cols


def prepare(
    step: int,
    sampler_logprobs: Any,
    trainer_logprobs: Any,
    mask: Any = None,
    *,
    advantages: Any = None,
    rewards: Any = None,
    sequence_ids: Any = None,
    group_ids: Any = None,
    token_ids: Any = None,
    sampler_topk_ids: Any = None,
    sampler_topk_logprobs: Any = None,
    trainer_logprobs_at_sampler_topk: Any = None,
    sampler_steps: Any = None,
    sampler_experts: Any = None,
    trainer_experts: Any = None,
    timing: StepTiming | None = None,
    training_forward_logprobs: Any = None,
    turn_ids: Any = None,
    **unknown: Any,
) -> StepBatch:
    """Check one step's arrays and copy the masked tokens out as token-pair columns.

    ``sequence_ids`` left out are filled in by the caller (the Recorder numbers
    them per rank); here they default to the row index. ``turn_ids`` (``[B, T]``
    integers) name each token's assistant turn; without them a row whose mask
    has several runs of 1s (tool spans masked out between turns) is that many
    turns (``mismatchscope.turns``).
    """
    if unknown:
        _refuse_unknown(unknown)
    step = _step(step)
    lq, lp = _logprob_pair(sampler_logprobs, trainer_logprobs)
    b, t = lq.shape
    rows, pos = _masked_tokens(step, mask, (b, t))
    cols = _pair_columns(step, lq, lp, rows, pos)
    seq_B = np.arange(b, dtype=np.int64) if sequence_ids is None else _sequence_ids(sequence_ids, b)
    cols["sequence_id"] = seq_B[rows]
    cols["token_id"] = (
        np.full(rows.size, -1, np.int64)
        if token_ids is None
        else _token_ids(_same_shape("token_ids", token_ids, (b, t))[rows, pos])
    )
    cols.update(_optional_columns(step, (b, t), rows, pos, group_ids, rewards, advantages, sampler_steps))
    topk = _topk(rows, pos, (b, t), sampler_topk_ids, sampler_topk_logprobs, trainer_logprobs_at_sampler_topk)
    if topk and token_ids is None:
        raise RecorderInputError(
            "the top-k columns need token_ids: the bounds look for the sampled token among the listed ids"
        )
    cols.update(topk)
    experts = _experts(rows, pos, (b, t), {"sampler": sampler_experts, "trainer": trainer_experts})
    if timing is not None:
        cols.update(timing.columns(rows.size))
    if training_forward_logprobs is not None:  # the loss's own forward: the third value certify pairs
        forward = _floats("training_forward_logprobs", training_forward_logprobs)
        forward = _same_shape("training_forward_logprobs", forward, (b, t))
        cols["trainer_forward_logprob"] = forward[rows, pos].astype(np.float64)
    cols.update(_turn_columns(step, turn_ids, rows, pos, (b, t)))
    return StepBatch(step, cols, int(np.unique(rows).size), b, experts)


def _turn_columns(
    step: int, turn_ids: Any, rows: np.ndarray, pos: np.ndarray, shape: tuple[int, int]
) -> dict[str, np.ndarray]:
    """``turn`` and ``turn_position`` of the masked tokens: from ``turn_ids``, else the mask's runs; none for a
    step of single turns."""
    turn = None
    if turn_ids is not None:
        ids = _same_shape("turn_ids", turn_ids, shape)
        if ids.dtype.kind not in "iu":
            raise RecorderInputError(f"turn_ids must hold integers, got dtype {ids.dtype}")
        turn = ids[rows, pos]
    try:
        turns = row_turns(rows, pos, turn)
    except InputError as e:
        raise RecorderInputError(f"step {step}: turn_ids: {e}") from None
    return {} if turns is None else {"turn": turns[0], "turn_position": turns[1]}


def _refuse_unknown(unknown: dict[str, Any]) -> None:
    """A keyword add() does not record: name it, and the keywords it does."""
    import inspect

    known = [n for n, p in inspect.signature(prepare).parameters.items() if p.kind is p.KEYWORD_ONLY]
    known = [n for n in known if n != "timing"] + list(STEP_TIMING_KEYS)  # the Recorder turns those into timing
    raise UsageError(
        f"add() got {', '.join(map(repr, unknown))}, which is not a column it records",
        hint=f"its keywords: {', '.join(known)}",
    )


def _logprob_pair(sampler_logprobs: Any, trainer_logprobs: Any) -> tuple[np.ndarray, np.ndarray]:
    """The two ``[B, T]`` logprob arrays, on the host, of one shape."""
    lq = _floats("sampler_logprobs", sampler_logprobs)
    lp = _floats("trainer_logprobs", trainer_logprobs)
    if lq.ndim != 2:
        raise RecorderInputError(
            f"sampler_logprobs must be [B, T] (a batch of padded sequences), got shape {lq.shape}",
            hint="add a batch axis for a single sequence, e.g. x[None]",
        )
    if lp.shape != lq.shape:
        raise RecorderInputError(
            f"sampler_logprobs has shape {lq.shape} and trainer_logprobs {lp.shape}: they must match",
            hint="pass both as [B, T] over the same tokens",
        )
    return lq, lp


def _masked_tokens(step: int, mask: Any, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The row and position of every token under the mask (all without one); a mask of none is refused."""
    m = np.ones(shape, bool) if mask is None else _mask(to_host(mask), shape)
    rows, pos = np.nonzero(m)
    if rows.size == 0:
        raise RecorderInputError(
            f"step {step}: the mask selects no token, nothing to record",
            hint="pass the response mask (1 for each generated token that counts)",
        )
    return rows, pos


def _pair_columns(
    step: int, lq: np.ndarray, lp: np.ndarray, rows: np.ndarray, pos: np.ndarray
) -> dict[str, np.ndarray]:
    """The masked tokens' logprob pair, position and step, checked as the readers will check them."""
    cols: dict[str, np.ndarray] = {
        "sampler_logprob": lq[rows, pos].astype(np.float64),
        "trainer_logprob": lp[rows, pos].astype(np.float64),
    }
    _check_logprobs(step, cols["sampler_logprob"], cols["trainer_logprob"], rows, pos)
    refused = first_refused({"position": pos})  # T beyond the readers' limit: int32 would wrap it
    if refused is not None:
        raise RecorderInputError(
            f"step {step}: {refused.reason} at row {int(rows[refused.row])}",
            hint="position is the index along T; no completion is 16.7M tokens long",
        )
    cols["position"] = pos.astype(np.int32)
    cols["step"] = np.full(rows.size, step, np.int64)
    return cols


def _optional_columns(
    step: int,
    shape: tuple[int, int],
    rows: np.ndarray,
    pos: np.ndarray,
    group_ids: Any,
    rewards: Any,
    advantages: Any,
    sampler_steps: Any,
) -> dict[str, np.ndarray]:
    """The per-sequence and per-token values given beside the logprobs, one per masked token."""
    b = shape[0]
    cols: dict[str, np.ndarray] = {}
    if group_ids is not None:
        cols["prompt_id"] = _per_sequence("group_ids", group_ids, b, ids=True)[rows]
    if rewards is not None:
        cols["reward"] = _per_sequence("rewards", rewards, b)[rows]
    if advantages is not None:
        cols["advantage"] = _advantages(step, advantages, shape, rows, pos)
    if sampler_steps is not None:  # the policy version each rollout was generated with, against the one scoring it
        cols["sampler_step"] = _per_sequence("sampler_steps", sampler_steps, b, ids=True)[rows]
        cols["trainer_step"] = np.full(rows.size, step, np.int64)
    return cols


def _experts(
    rows: np.ndarray, pos: np.ndarray, shape: tuple[int, int], given: dict[str, Any]
) -> dict[str, np.ndarray] | None:
    """The masked tokens' expert ids of each side given, ``[N, layers, k]`` (copies); None when neither is."""
    out = {}
    for side, x in given.items():
        if x is None:
            continue
        a = to_host(x)
        if a.ndim != 4 or a.shape[:2] != shape:
            raise RecorderInputError(
                f"{side}_experts has shape {a.shape}, expected [B, T, layers, top_k] with [B, T] = {shape}",
                hint="each token's expert ids per decoder layer, aligned with the logprobs",
            )
        out[side] = a[rows, pos]
    return out or None


def _step(step: Any) -> int:
    if isinstance(step, (bool, np.bool_)) or not isinstance(step, (int, np.integer)) or step < 0:
        raise RecorderInputError(f"step must be a non-negative integer, got {step!r}")
    if step > MAX_ABS_STEP:
        raise RecorderInputError(
            f"step {step} is beyond 2^52, where timeline stops reading steps", hint="pass the training step counter"
        )
    return int(step)


@json_edge
def strict_meta(meta: Any) -> dict[str, Any]:
    """``Recorder(meta=...)`` as a copy that strict JSON can hold, or a one-line error naming the first bad entry.

    The manifest and every shard's metadata carry it. Python's json writes NaN and infinities as bare
    ``NaN``/``Infinity``, which no strict JSON reader (jq, JavaScript, Go, Rust) accepts, so a ``meta`` holding
    one is refused rather than written or silently rewritten (null would lose the value, a string would change
    its type); so is anything json cannot write at all (a tensor, a set, a non-text key).
    """
    import math

    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise UsageError(f"meta must be a dict of JSON values, got {type(meta).__name__}")

    def walk(x: Any, where: str) -> Any:
        if isinstance(x, np.generic):  # a numpy scalar: its Python value
            x = x.item()
        if isinstance(x, float) and not math.isfinite(x):
            raise UsageError(
                f"meta{where} is {x}, which strict JSON cannot hold",
                hint="record it as null or as a string such as 'nan', or leave it out",
            )
        if isinstance(x, dict):
            bad = next((k for k in x if not isinstance(k, str)), None)
            if bad is not None:
                raise UsageError(f"meta{where} has the key {bad!r}; JSON keys are strings", hint="use str keys")
            return {k: walk(v, f"{where}[{k!r}]") for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(x)]
        if not (x is None or isinstance(x, (str, int, float))):
            raise UsageError(
                f"meta{where} is a {type(x).__name__}, not a JSON value",
                hint="pass numbers, strings, booleans, None, lists and dicts (e.g. float(x) for a tensor)",
            )
        return x

    return walk(meta, "")


def _floats(name: str, x: Any) -> np.ndarray:
    a = to_host(x)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise RecorderInputError(f"{name} must hold numbers, got dtype {a.dtype}")
    return a


def _mask(m: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    if m.shape != shape:
        raise RecorderInputError(f"mask has shape {m.shape} and the logprobs {shape}: they must match")
    if m.dtype == bool:
        return m
    if not np.isin(m, (0, 1)).all():
        raise RecorderInputError(
            "mask must hold only 0/1 or booleans", hint="pass the response mask, not lengths or weights"
        )
    return m.astype(bool)


def _token_ids(ids: np.ndarray) -> np.ndarray:
    """The recorded tokens' ids as int64; a fractional, non-finite or non-numeric id is refused (a cast would
    write 1.5 as token 1 without a word), and so is a negative one other than -1 (every reader refuses it)."""
    out = _integral_ids(ids)
    if out.size and out.min() < NOT_RECORDED_ID:
        raise RecorderInputError(
            f"token_ids holds {int(out[out < NOT_RECORDED_ID][0])} among the recorded tokens ({TOKEN_ID_RULE})",
            hint="pass the sampled token ids; a padding id must not fall on a recorded token",
        )
    return out


def _integral_ids(ids: np.ndarray) -> np.ndarray:
    if ids.dtype.kind in "iu":
        return ids.astype(np.int64)
    if ids.dtype.kind != "f":
        raise RecorderInputError(f"token_ids must hold integers, got dtype {ids.dtype}")
    bad = np.flatnonzero(~np.isfinite(ids) | (ids != np.round(ids)))
    if bad.size:
        raise RecorderInputError(
            f"token_ids must hold integers, got {float(ids[bad[0]])!r} among the recorded tokens",
            hint="pass the sampled token ids (an integer tensor), not logits or probabilities",
        )
    return ids.astype(np.int64)


def _same_shape(name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    a = to_host(x)
    if a.shape != shape:
        raise RecorderInputError(f"{name} has shape {a.shape}, expected {shape}")
    return a


def _check_logprobs(step: int, lq: np.ndarray, lp: np.ndarray, rows: np.ndarray, pos: np.ndarray) -> None:
    """The reader's check, on the masked tokens: clearly positive values are not logprobs."""
    too_high = positive_logprobs(lq, lp)
    if too_high.any():
        i = int(np.flatnonzero(too_high)[0])
        raise RecorderInputError(
            f"step {step}: {int(too_high.sum())} positive logprob(s) beyond rounding (> {POSITIVE_LOGPROB_TOLERANCE:g}), "
            f"e.g. sampler {lq[i]:.4g} / trainer {lp[i]:.4g} at row {int(rows[i])} position {int(pos[i])}",
            hint="logprobs are natural logs <= 0; are these logits or probabilities?",
        )


def _per_sequence(name: str, x: Any, b: int, ids: bool = False) -> np.ndarray:
    a = to_host(x)
    if a.shape != (b,):
        raise RecorderInputError(f"{name} has shape {a.shape}, expected one value per sequence: ({b},)")
    if ids:
        if a.dtype.kind in "OUS":  # string ids (verl's uid): a stable 63-bit hash, equal on every rank
            return np.array([_hash_id(v) for v in a.tolist()], np.int64)
        if not np.issubdtype(a.dtype, np.integer):
            raise RecorderInputError(f"{name} must hold integers or strings, got dtype {a.dtype}")
        return a.astype(np.int64)  # a copy
    return a.astype(np.float64)


def _sequence_ids(x: Any, b: int) -> np.ndarray:
    ids = _per_sequence("sequence_ids", x, b, ids=True)
    _uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise RecorderInputError(
            f"sequence_ids repeat within the batch ({int((counts > 1).sum())} id(s) more than once): "
            "each row is one sequence",
            hint="pass a prompt's id (shared by its samples) as group_ids, or leave sequence_ids out",
        )
    return ids


def _hash_id(value: Any) -> int:
    digest = hashlib.blake2b(str(value).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _advantages(step: int, x: Any, shape: tuple[int, int], rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
    a = to_host(x)
    if a.shape == shape[:1]:
        a = a.astype(np.float64)
        checked, out = a[np.unique(rows)], a[rows]  # one value per sequence that has a token
    elif a.shape == shape:
        checked = out = a[rows, pos].astype(np.float64)
    else:
        raise RecorderInputError(
            f"advantages has shape {a.shape}, expected per sequence {shape[:1]} or per token {shape}"
        )
    bad = int((~np.isfinite(checked)).sum())
    if bad:
        raise RecorderInputError(f"step {step}: advantages has {bad} non-finite value(s) under the mask")
    return out


def _topk(
    rows: np.ndarray, pos: np.ndarray, shape: tuple[int, int], ids: Any, lq: Any, lp: Any
) -> dict[str, np.ndarray]:
    given = {"sampler_topk_ids": ids, "sampler_topk_logprobs": lq, "trainer_logprobs_at_sampler_topk": lp}
    present = [k for k, v in given.items() if v is not None]
    if not present:
        return {}
    if len(present) != 3:
        missing = [k for k in given if k not in present]
        raise RecorderInputError(f"top-k columns come as a set of three; missing {', '.join(missing)}")
    arrays = {k: to_host(v) for k, v in given.items()}
    k_shape = arrays["sampler_topk_ids"].shape
    if len(k_shape) != 3 or k_shape[:2] != shape:
        raise RecorderInputError(f"sampler_topk_ids has shape {k_shape}, expected [B, T, K] with [B, T] = {shape}")
    for name, a in arrays.items():
        if a.shape != k_shape:
            raise RecorderInputError(f"{name} has shape {a.shape} and sampler_topk_ids {k_shape}: they must match")
    out: dict[str, np.ndarray] = {"sampler_topk_ids": arrays["sampler_topk_ids"][rows, pos].astype(np.int64)}
    for name in ("sampler_topk_logprobs", "trainer_logprobs_at_sampler_topk"):
        v = arrays[name][rows, pos].astype(np.float64)
        if positive_logprobs(v).any():
            raise RecorderInputError(
                f"{name} holds positive logprob(s) beyond rounding (> {POSITIVE_LOGPROB_TOLERANCE:g})",
                hint="logprobs are natural logs <= 0",
            )
        out[name] = v
    return out


class RecordedIds:
    """The sequence ids a Recorder was given, as disjoint ``[start, end)`` runs with the step of each.

    ``report`` reads a run as one set of ``(sequence_id, position)`` rows, so
    an id given again in a later ``add()`` (of any step) would make its tokens
    duplicates and the whole run unreadable. Ids arrive as runs (``0..B-1``, or
    a counter), so memory grows with the number of ``add()`` calls, not ids.
    """

    def __init__(self) -> None:
        self.start = np.empty(0, np.int64)
        self.end = np.empty(0, np.int64)
        self.step = np.empty(0, np.int64)

    def check(self, step: int, ids_B: np.ndarray) -> None:
        """Refuse an id recorded before; call before the batch is queued."""
        if not self.start.size:
            return
        i = np.searchsorted(self.start, ids_B, side="right") - 1
        used = (i >= 0) & (ids_B < self.end[np.maximum(i, 0)])
        if used.any():
            k = int(np.flatnonzero(used)[0])
            raise RecorderInputError(
                f"step {step}: sequence id {int(ids_B[k])} was already recorded at step "
                f"{int(self.step[i[k]])}: report would read both as one sequence, its tokens twice",
                hint="pass sequence ids unique in the whole run (all steps and ranks), or leave sequence_ids out",
            )

    def add(self, step: int, ids_B: np.ndarray) -> None:
        u = np.unique(ids_B)
        if not u.size:
            return
        brk = np.flatnonzero(np.diff(u) != 1)
        start = u[np.concatenate(([0], brk + 1))]
        end = u[np.concatenate((brk, [u.size - 1]))] + 1
        order = np.argsort(np.concatenate((self.start, start)), kind="stable")
        self.start = np.concatenate((self.start, start))[order]
        self.end = np.concatenate((self.end, end))[order]
        self.step = np.concatenate((self.step, np.full(start.size, step, np.int64)))[order]
