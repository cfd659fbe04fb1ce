"""verl: the rollout batches ``skip.rollout`` dumps (``gen_batch.dp``), the sampler's side.

Layout, read from verl 0.9.1 (``verl/utils/skip/rollout_skip.py``
``RolloutSkip.prepare_data``, ``verl/protocol.py`` ``DataProto.__getstate__``,
``verl/experimental/agent_loop/agent_loop.py`` ``_postprocess``): with
``skip.rollout.enable=true`` (action ``cache``) every step's generation output
is pickled to
``{dump_dir}/{experiment_name}_{project_name}/GBS{gen_batch_size}_N{rollout.n}_in{max_prompt_length}_out{max_response_length}/{step}/gen_batch.dp``
beside ``meta.json`` (``{"global_steps": step}``); ``dump_dir`` defaults to
``~/.verl/rollout_dump``. The DataProto's state is ``(torch.save bytes of a
consolidated TensorDict, non_tensor_batch, meta_info)``, read through the
allow-list of :mod:`.stack_pickle`.

Tensors: ``prompts`` ``[batch, prompt_length]`` left-padded; ``responses``,
``response_mask`` (0 on tool and observation tokens and on padding) and
``rollout_log_probs`` (the engine's logprob of response token j, present
with ``actor_rollout_ref.rollout.calculate_log_probs=true``)
``[batch, response_length]``, right-padded; ``attention_mask``
``[batch, prompt_length + response_length]`` marks the real tokens. No shift.

The dump is taken before the trainer recomputes anything: it holds no
trainer logprob (see :mod:`.dataproto`). verl's other dump,
``trainer.rollout_data_dir``, writes ``{step}.jsonl`` lines of text and
scores only: pointed at it, the import says so and stops.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError, InputError, NoSamplerLogprobsError, UsageError
from ._base import ImportContext, SourceFile, short
from ._mask import refuse_mask_values
from .dataproto import Row, SequenceRows, add_sequence, ids, read, require, rewards

DUMP_NAME = "gen_batch.dp"

SEMANTICS = {
    "sampler_logprob": "rollout_log_probs: the rollout engine's logprob of response token j",
    "trainer_logprob": "none in the dump (it is taken before the trainer's forward): filled by rescore",
    "alignment": "responses, response_mask and rollout_log_probs are right-padded and index response token j; "
    "prompts are left-padded; attention_mask marks real tokens; no shift applied",
    "mask": "response_mask (0 on tool and observation tokens); prompt tokens count as dropped",
    "temperature": "not recorded in the dump: rescore needs --temperature (actor_rollout_ref.rollout.temperature)",
    "policy_lag": "none: rescore scores every token with the one checkpoint it is given",
    "step": "the {step} folder name (meta.json global_steps)",
    "reward": "rm_scores summed over the response (the agent loop's score on its last token), where present",
}


class VerlImporter:
    name = "verl"
    columns: tuple[str, ...] = ("step", "reward")

    def __init__(self, columns: dict[str, str] | None = None):
        if columns:
            raise UsageError(
                "--column applies to the jsonl and parquet formats only",
                hint="verl dumps have a fixed layout; drop --column",
            )
        self.warnings: list[str] = []
        self.sequence_rows = SequenceRows()

    def discover(self, src: Path) -> list[SourceFile]:
        paths = [src] if src.is_file() else sorted(src.rglob(DUMP_NAME))
        if (src.is_file() and src.suffix == ".jsonl") or (not paths and (src.is_dir() and any(src.glob("*.jsonl")))):
            raise InputError(
                f"{src}: verl's rollout_data_dir JSONL holds text and scores only, no token ids or logprobs",
                hint="dump with skip.rollout.enable=true and point at its dump_dir (gen_batch.dp files)",
            )
        root = src.parent if src.is_file() else src
        files = []
        for p in paths:
            try:
                step = int(p.parent.name)
            except ValueError:
                step = None
            rel = p.name if src.is_file() else p.relative_to(root).as_posix()
            files.append(SourceFile(path=p, rel=rel, step=step))
        return sorted(files, key=lambda f: (f.path.parent.parent.as_posix(), f.step or 0))

    @json_edge
    def semantics(self) -> dict[str, Any]:
        return dict(SEMANTICS)

    def read(self, f: SourceFile, ctx: ImportContext) -> None:
        try:
            batch = read(f, ctx.trust_pickle, "verl")  # first: a file of another stack is named as such
            _check_step(f)
            require(batch, f, "prompts", "responses", "response_mask", "attention_mask")
            if "rollout_log_probs" not in batch.tensors:
                raise NoSamplerLogprobsError(
                    "no rollout_log_probs: the engine's logprobs were not kept",
                    file=f.rel,
                    hint="run with actor_rollout_ref.rollout.calculate_log_probs=true",
                )
            rows = _rows(batch.tensors, f)
        except ImportFormatError as e:
            ctx.bad(e, f)
            return
        scores = batch.tensors.get("rm_scores")  # the score on the last response token, 0 elsewhere
        reward = rewards(None if scores is None else np.asarray(scores, dtype=np.float64).sum(-1), len(rows))
        for k, parts in enumerate(rows):
            if parts is None:  # an agent-loop sample that generated nothing: no token to compare
                ctx.skip_row(f, EMPTY_RESPONSE)
            elif isinstance(parts, ImportFormatError):
                ctx.bad(parts, f)
            else:
                add_sequence(ctx, f, k, self.sequence_rows, parts, float(reward[k]))


def _check_step(f: SourceFile) -> None:
    if f.step is None:
        raise ImportFormatError("not in a {step} folder: verl writes {dump}/.../{step}/gen_batch.dp", file=f.rel)
    meta = f.path.parent / "meta.json"
    if meta.is_file():
        try:
            recorded = json.loads(meta.read_text()).get("global_steps")
        except (ValueError, OSError, AttributeError) as e:
            raise ImportFormatError(f"meta.json beside it does not read ({short(e)})", file=f.rel) from None
        if recorded is not None and recorded != f.step:
            raise ImportFormatError(f"meta.json says global_steps {recorded}, the folder says {f.step}", file=f.rel)


EMPTY_RESPONSE = "empty_response"


def _rows(t: dict[str, np.ndarray], f: SourceFile) -> list[Row | ImportFormatError | None]:
    """Each row's parts; None for a sample with no response token; an error for a row whose masks are not 0/1."""
    prompts, responses = ids(t["prompts"]), ids(t["responses"])
    attn_values, mask_values = np.asarray(t["attention_mask"]), np.asarray(t["response_mask"])
    attn, resp_mask = attn_values != 0, mask_values != 0
    logprobs = np.asarray(t["rollout_log_probs"], dtype=np.float64)
    b, p = prompts.shape if prompts.ndim == 2 else (0, 0)
    r = responses.shape[1] if responses.ndim == 2 else -1
    if (
        prompts.ndim != 2
        or responses.shape != resp_mask.shape
        or logprobs.shape != responses.shape
        or (attn.shape != (b, p + r))
    ):
        raise ImportFormatError(
            f"misaligned tensors: prompts {list(prompts.shape)}, responses {list(responses.shape)}, response_mask "
            f"{list(resp_mask.shape)}, rollout_log_probs {list(logprobs.shape)}, attention_mask {list(attn.shape)}",
            file=f.rel,
        )
    out: list[Row | ImportFormatError | None] = []
    for i in range(b):
        n = int(attn[i, p:].sum())  # right-padded: the first n response tokens are real
        try:
            refuse_mask_values(attn_values[i], "attention_mask")
            refuse_mask_values(mask_values[i], "response_mask")
        except ImportFormatError as e:
            out.append(ImportFormatError(e.reason, file=f.rel, record=i, hint=e.hint))
            continue
        if n == 0:
            out.append(None)
            continue
        kept = resp_mask[i, :n]
        out.append((prompts[i][attn[i, :p]], responses[i, :n], kept, logprobs[i, :n][kept]))
    return out
