"""What verl's and ROLL's rollout dumps share: a pickled DataProto holding only the sampler's side.

Both stacks dump the rollout's output, before the trainer recomputes
anything: the token ids, the masks and the inference engine's logprobs. An
import of them is the sampler's half of a token-pair run plus every
sequence's prompt and completion ids (``sequences.parquet``), so that
``rescore IMPORTED --trainer-checkpoint CKPT --temperature T`` adds the
trainer's side with the checkpoint the stack trained. Until then
``trainer_logprob`` is empty (NaN) on every token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ImportFormatError
from ._base import ImportContext, SourceFile, short
from ._mask import add_turns
from ._values import check_record, exact_ints, host_array
from .stack_pickle import (
    STACK_NAMES,
    DataProtoState,
    PickledBytesIO,
    load_stack_pickle,
    load_tensordict,
    refuse_other_stack,
)

NO_TRAINER_WARNING = "the {stack} dump holds the sampler's side only: rescore adds the trainer's"
"""one line of 80 columns on a terminal's stderr; the command itself is the import's ``next:`` line."""


Row = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""one sequence: prompt ids, completion ids, kept mask over the completion, sampler logprobs of the kept tokens."""


@dataclass
class Batch:
    """One DataProto: its tensors (numpy), its ``non_tensor_batch`` and ``meta_info``."""

    tensors: dict[str, np.ndarray]
    non_tensor: dict[str, Any]
    meta: dict[str, Any]


def read(f: SourceFile, trust_pickle: bool, stack: str) -> Batch:
    """The DataProto at ``f`` through the allow-list (:mod:`.stack_pickle`); ``stack`` is the import format."""
    obj = load_stack_pickle(f.path, f.rel, trust_pickle, STACK_NAMES[stack])
    refuse_other_stack(obj, f.rel, stack)
    if isinstance(obj, DataProtoState):
        state = obj.state
        if not isinstance(state, tuple) or len(state) not in (3, 4):
            raise ImportFormatError(
                "the DataProto's state is not the stack's (batch, non_tensor_batch, ...)", file=f.rel
            )
        blob = state[0].value if isinstance(state[0], PickledBytesIO) else state[0]
        if isinstance(blob, tuple):  # verl's numpy serialization mode
            tensors: dict[str, Any] = numpy_tensordict(blob, f.rel)
        elif blob is not None and not isinstance(blob, bytes):
            raise ImportFormatError(
                f"the DataProto's batch is a {type(blob).__name__}, not torch.save bytes", file=f.rel
            )
        else:
            tensors = load_tensordict(blob, f.rel, trust_pickle) if blob else {}
        non_tensor, meta = state[1], state[-1]
    elif hasattr(obj, "batch") and hasattr(obj, "non_tensor_batch"):  # a full unpickle: the stack's own DataProto
        tensors = {k: obj.batch[k] for k in obj.batch.keys()} if obj.batch is not None else {}
        non_tensor, meta = obj.non_tensor_batch, obj.meta_info
    else:
        raise ImportFormatError(f"expected {STACK_NAMES[stack]}'s DataProto, got {type(obj).__name__}", file=f.rel)
    return Batch({str(k): _numpy(v) for k, v in tensors.items()}, dict(non_tensor or {}), dict(meta or {}))


_TORCH_DTYPES = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16, "int32": np.int32,
                 "int64": np.int64, "float16": np.float16, "float32": np.float32, "float64": np.float64}  # fmt: skip


def numpy_tensordict(value: tuple, rel: str) -> dict[str, np.ndarray]:
    """verl's ``serialize_tensordict`` (``VERL_DATAPROTO_SERIALIZATION_METHOD=numpy``): ``(batch_size, device,
    {key: (dtype name, shape, uint8 array of the bytes)})``, each tensor rebuilt as ``deserialize_single_tensor``
    views it (bfloat16 widened to float32). A nested tensor (``(layout, [...])``) is left out: no field read
    here is one."""
    if len(value) != 3 or not isinstance(value[2], dict):
        raise ImportFormatError("the DataProto's batch is neither torch.save bytes nor verl's numpy form", file=rel)
    out: dict[str, np.ndarray] = {}
    for key, item in value[2].items():
        if not isinstance(item, tuple) or len(item) != 3:
            continue  # a nested tensor
        dtype, shape, data = item
        try:
            raw = np.frombuffer(memoryview(data), dtype=np.uint8)
            if dtype == "bfloat16":  # the upper half of a float32
                arr: np.ndarray = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            else:
                arr = raw.view(_TORCH_DTYPES[str(dtype)])
            out[str(key)] = arr.reshape(tuple(int(n) for n in shape))
        except (KeyError, TypeError, ValueError) as e:
            raise ImportFormatError(
                f"field {key} ({dtype} {list(shape)}) does not decode ({short(e)})", file=rel
            ) from None
    return out


def _numpy(value: Any) -> np.ndarray:
    return np.asarray(host_array(value))


def require(batch: Batch, f: SourceFile, *names: str) -> None:
    missing = [n for n in names if n not in batch.tensors]
    if missing:
        shown = ", ".join(sorted(batch.tensors)[:15])
        raise ImportFormatError(f"missing tensor(s) {', '.join(missing)} (the batch has: {shown})", file=f.rel)


def rewards(values: Any, rows: int) -> np.ndarray:
    """One reward per row from a per-row array (NaN where a value is not a number, or none was given)."""
    out = np.full(rows, np.nan)
    if values is None or len(values) != rows:
        return out
    for i, v in enumerate(np.asarray(values, dtype=object).reshape(rows, -1)):
        if v.size == 1 and isinstance(v[0], (int, float, np.number)) and not isinstance(v[0], bool):
            out[i] = float(v[0])
    return out


def ids(value: np.ndarray) -> np.ndarray:
    return exact_ints(np.asarray(value).reshape(-1), "token ids").reshape(np.shape(value))


@dataclass
class SequenceRows:
    """Each imported sequence's prompt and completion ids: ``sequences.parquet``, what ``rescore`` scores."""

    rows: dict[str, list] = field(
        default_factory=lambda: {
            "sequence_id": [],
            "prompt_token_ids": [],
            "completion_token_ids": [],
            "completion_kept": [],
            "routes_start": [],
        }
    )

    def add(self, seq_id: int, prompt: np.ndarray, completion: np.ndarray, kept: np.ndarray) -> None:
        for name, value in zip(
            self.rows, (seq_id, prompt.tolist(), completion.tolist(), kept.astype(bool).tolist(), None), strict=True
        ):
            self.rows[name].append(value)

    def write(self, out: Path) -> None:
        from ..rundir import atomic_path
        from ..schema import WRITE_OPTIONS
        from .routes import _SEQUENCES_SCHEMA, SEQUENCES

        with atomic_path(out / SEQUENCES) as tmp:
            pq.write_table(pa.Table.from_pydict(self.rows, schema=_SEQUENCES_SCHEMA), tmp, **WRITE_OPTIONS)


def add_sequence(
    ctx: ImportContext,
    f: SourceFile,
    k: int,
    seqs: SequenceRows,
    parts: Row,
    reward: float = float("nan"),
) -> None:
    """One row: ``(prompt ids, completion ids, kept mask over the completion, sampler logprobs of the kept)``."""
    prompt, completion, kept, sampler = parts
    try:
        if not kept.any():
            raise ImportFormatError("the response mask selects no token", file=f.rel, record=k)
        if not len(prompt):
            raise ImportFormatError("no prompt token: the trainer has nothing to condition on", file=f.rel, record=k)
        values = {
            "token_id": completion[kept],
            "sampler_logprob": sampler,
            "trainer_logprob": np.full(len(sampler), np.nan),
            "step": f.step,
            "reward": reward,
        }
        add_turns(values, kept)
        check_record(values, file=f.rel, record=k)
    except ImportFormatError as e:
        ctx.bad(e, f)
        return
    ctx.note("nonfinite_logprobs", int(len(sampler) - np.count_nonzero(np.isfinite(sampler))))
    seq_id = ctx.add(f, values, len(prompt) + len(completion) - int(kept.sum()))
    seqs.add(seq_id, prompt, completion, kept)
