"""ROLL: the rollout batches its dump mode writes (``rollout_mock``), the sampler's side.

Layout, read from ROLL at commit 8eb27cc2dc34c4d1310b169d9b86d339004d811a
(``roll/distributed/scheduler/rollout_mock_mixin.py`` ``_dump_batch``,
``roll/distributed/scheduler/protocol.py`` ``DataProto.__getstate__``,
``roll/pipeline/agentic/env_manager/traj_env_manager.py``): with
``rollout_mock: {enable: true, mode: dump, dump_dir: DIR}`` the rollout
scheduler pickles each step's batch (``pickle.HIGHEST_PROTOCOL``) to
``DIR/{train,val}/step_{N:06d}.pkl``. The DataProto's state is
``(BytesIO of torch.save(consolidated TensorDict), non_tensor_batch,
remote_batch, meta_info)``, read through the allow-list of :mod:`.stack_pickle`.

Tensors (agentic pipeline): ``input_ids``, ``attention_mask`` and
``response_mask`` ``[batch, sequence_length]`` (padded to
``sequence_length``; ``attention_mask`` marks the real tokens, wherever the
padding is), and ``infer_logprobs`` ``[batch, sequence_length - 1]``:
the engine's logprobs laid over the tokens (0 on prompt tokens) and then
shifted by one, ``infer_logprobs[:, 1:]``, so that column ``j - 1`` holds the
logprob of token ``j``, as a trainer's ``log_probs`` of the next token do.
The import undoes the shift: token ``j``'s sampler logprob is
``infer_logprobs[:, j - 1]``.

The dump is taken before the trainer recomputes anything: it holds no
trainer logprob (see :mod:`.dataproto`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError, InputError, NoSamplerLogprobsError, UsageError
from ._base import ImportContext, SourceFile
from ._mask import refuse_mask_values
from .dataproto import Row, SequenceRows, add_sequence, ids, read, require, rewards

_STEP_FILE = re.compile(r"^step_(\d+)\.pkl$")

SEMANTICS = {
    "sampler_logprob": "infer_logprobs: the inference engine's logprob of token j, read at column j - 1",
    "trainer_logprob": "none in the dump (it is taken before the trainer's forward): filled by rescore",
    "alignment": "infer_logprobs is shifted by one ([:, 1:]): column j - 1 holds token j; the import undoes it",
    "mask": "response_mask over the real tokens (attention_mask); prompt tokens and observation tokens of "
    "later turns count as dropped",
    "temperature": "not recorded in the dump: rescore needs --temperature (the rollout's generating config)",
    "policy_lag": "none: rescore scores every token with the one checkpoint it is given",
    "step": "N of step_{N:06d}.pkl",
    "reward": "non_tensor_batch episode_scores",
}


class RollImporter:
    name = "roll"
    columns: tuple[str, ...] = ("step", "reward")

    def __init__(self, columns: dict[str, str] | None = None):
        if columns:
            raise UsageError(
                "--column applies to the jsonl and parquet formats only",
                hint="ROLL dumps have a fixed layout; drop --column",
            )
        self.warnings: list[str] = []
        self.sequence_rows = SequenceRows()

    def discover(self, src: Path) -> list[SourceFile]:
        if src.is_file():
            root, paths = src.parent, [src]
        else:
            root = src
            paths = sorted(src.glob("step_*.pkl")) + sorted(src.glob("train/step_*.pkl"))
            if any(src.glob("val/step_*.pkl")):  # validation rollouts: not what the trainer trained on
                if not paths:  # "no roll files found" would send the user looking for a dump that is there
                    raise InputError(
                        f"{src}: only val/ holds step files (validation rollouts, not the trained batches)",
                        hint=f"point at {src / 'val'} to import them",
                    )
                self.warnings.append("left out val/: validation rollouts (point at val/ to import them)")
        files = []
        for p in paths:
            m = _STEP_FILE.match(p.name)
            if m is not None:
                files.append(SourceFile(path=p, rel=p.relative_to(root).as_posix(), step=int(m.group(1))))
        return sorted(files, key=lambda f: (f.path.parent.as_posix(), f.step or 0))

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return dict(SEMANTICS)

    def read(self, f: SourceFile, ctx: ImportContext) -> None:
        try:
            batch = read(f, ctx.trust_pickle, "roll")
            require(batch, f, "input_ids", "attention_mask", "response_mask")
            if "infer_logprobs" not in batch.tensors:
                raise NoSamplerLogprobsError(
                    "no infer_logprobs: the engine's logprobs were not returned",
                    file=f.rel,
                    hint="run the rollout with logprobs on (generating_args.logprobs)",
                )
            rows = _rows(batch.tensors, f)
        except ImportFormatError as e:
            ctx.bad(e, f)
            return
        reward = rewards(batch.non_tensor.get("episode_scores"), len(rows))
        for k, parts in enumerate(rows):
            if isinstance(parts, ImportFormatError):
                ctx.bad(parts, f)
                continue
            add_sequence(ctx, f, k, self.sequence_rows, parts, float(reward[k]))


def _rows(t: dict[str, np.ndarray], f: SourceFile) -> list[Row | ImportFormatError]:
    tokens = ids(t["input_ids"])
    attn_values, mask_values = np.asarray(t["attention_mask"]), np.asarray(t["response_mask"])
    attn, resp = attn_values != 0, mask_values != 0
    infer = np.asarray(t["infer_logprobs"], dtype=np.float64)
    if tokens.ndim != 2 or attn.shape != tokens.shape or resp.shape != tokens.shape:
        raise ImportFormatError(
            f"misaligned tensors: input_ids {list(tokens.shape)}, attention_mask {list(attn.shape)}, "
            f"response_mask {list(resp.shape)}",
            file=f.rel,
        )
    if infer.shape != (tokens.shape[0], tokens.shape[1] - 1):
        raise ImportFormatError(
            f"infer_logprobs is {list(infer.shape)}; ROLL's agentic dump shifts it by one "
            f"([:, 1:]) to {[tokens.shape[0], tokens.shape[1] - 1]}",
            file=f.rel,
        )
    out: list[Row | ImportFormatError] = []
    for i in range(tokens.shape[0]):
        try:
            refuse_mask_values(attn_values[i], "attention_mask")
            refuse_mask_values(mask_values[i], "response_mask")
        except ImportFormatError as e:
            out.append(ImportFormatError(e.reason, file=f.rel, record=i, hint=e.hint))
            continue
        real = np.flatnonzero(attn[i])
        answer = np.flatnonzero(resp[i] & attn[i])
        if not len(answer) or answer[0] == 0 or not np.array_equal(real, np.arange(real[0], real[-1] + 1)):
            why = (
                "no generated token after a prompt" if len(answer) == 0 or answer[0] == 0 else "gaps in attention_mask"
            )
            out.append(ImportFormatError(why, file=f.rel, record=i))
            continue
        first, last = int(answer[0]), int(real[-1])
        kept = resp[i, first : last + 1]
        cols = np.arange(first, last + 1)[kept] - 1  # undo the shift: token j is column j - 1
        out.append((tokens[i, real[0] : first], tokens[i, first : last + 1], kept, infer[i, cols]))
    return out
