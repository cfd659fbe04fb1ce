"""The trainer's own weights: policy lag measured beside numerical mismatch.

In asynchronous RL the trainer scores a rollout with weights that have moved
on since the sampler served it, so the gap between its logprobs and the
sampler's holds two things: policy lag and numerics. ``--trainer-checkpoint``
reproduces that: the sampler samples with the run's checkpoint, the trainer
teacher-forces the same ids with another checkpoint of the same model. A run
with the same weights on both sides holds only the numerics; the two runs
side by side separate the causes.

The pair must share the architecture and the tokenizer, or the trainer would
read the sampled ids as other tokens (or not load at all). Everything is
checked here from ``config.json`` and the tokenizer files, before any engine
starts, and the trainer checkpoint goes through the same safety checks as the
sampler's (safetensors only, no remote code unless asked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, TokenizerMismatchError, UsageError
from .checkpoint import TOKENIZER_FILES, CheckpointInfo, check_weights_cover_config, inspect_checkpoint, text_config
from .tokenizer import load_tokenizer, tokenizer_difference, tokenizer_files_digest

LAG_NOTE = (
    "the trainer scored the sampled tokens with another checkpoint than the sampler's "
    "({trainer}, sha256 {trainer_sha}; sampler {sampler}, sha256 {sampler_sha}): "
    "the gap mixes policy lag with numerical mismatch"
)
"""the reading ``report`` prints for such a run (``semantics["policy_lag_note"]``)."""

_SPECIAL = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")


@dataclass(frozen=True)
class TrainerCheckpointRecord:
    """``config["trainer_checkpoint"]`` in the manifest and in every shard's metadata."""

    path: str
    sha256: str
    model_type: str
    vocab_size: int
    same_as_sampler: bool


@dataclass(frozen=True)
class PolicyLag:
    """The ``policy_lag`` keys of a run's semantics, which ``report`` reads."""

    policy_lag: bool
    policy_lag_note: str | None


@dataclass(frozen=True)
class TrainerCheckpoint:
    """The weights the trainer scores with, and how they relate to the sampler's."""

    info: CheckpointInfo
    same_as_sampler: bool
    """equal digests: the trainer runs the sampler's weights, and the gap is numerics alone."""

    def record(self) -> TrainerCheckpointRecord:
        """``config["trainer_checkpoint"]`` in the manifest and in every shard's metadata."""
        i = self.info
        return TrainerCheckpointRecord(str(i.path), i.sha256, i.model_type, i.vocab_size, self.same_as_sampler)

    def semantics(self, sampler: CheckpointInfo) -> PolicyLag:
        """The ``policy_lag`` keys of the run's semantics, which ``report`` reads."""
        if self.same_as_sampler:
            return PolicyLag(False, None)
        note = LAG_NOTE.format(
            trainer=self.info.path,
            trainer_sha=self.info.sha256[:12],
            sampler=sampler.path,
            sampler_sha=sampler.sha256[:12],
        )
        return PolicyLag(True, note)


def open_trainer_checkpoint(
    path: str | Path | None,
    sampler: CheckpointInfo,
    sampler_tokenizer,
    prompts: list[str],
    *,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> TrainerCheckpoint:
    """The trainer's checkpoint (the sampler's when ``path`` is None), checked against the sampler's.

    Raises :class:`CheckpointError` for another model type, architecture or
    vocabulary size, and :class:`TokenizerMismatchError` for another tokenizer.
    """
    if path is None:
        return TrainerCheckpoint(sampler, True)
    info = inspect_checkpoint(path, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code)
    if info.sha256 == sampler.sha256:
        return TrainerCheckpoint(info, True)
    check_same_architecture(sampler, info)
    check_weights_cover_config(info, trust_remote_code=trust_remote_code)
    check_same_tokenizer(sampler, info, sampler_tokenizer, prompts, trust_remote_code=trust_remote_code)
    return TrainerCheckpoint(info, False)


NOT_FORWARD = frozenset(
    {
        "transformers_version",
        "dtype",
        "torch_dtype",
        "use_cache",
        "architectures",
        "model_type",
        "vocab_size",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "unk_token_id",
        "sep_token_id",
        "decoder_start_token_id",
        "initializer_range",
        "output_attentions",
        "output_hidden_states",
        "output_router_logits",
        "return_dict",
        "router_aux_loss_coef",
        "id2label",
        "label2id",
        "problem_type",
        "tokenizer_class",
        "max_position_embeddings",
        "use_bfloat16",
        "gradient_checkpointing",
        "keys_to_ignore_at_inference",
        "chunk_size_feed_forward",
    }
)
"""config keys that do not change the forward pass over a context the sampler allows (a training run may save
them differently: its dtype, the generation ids the tokenizer check covers, dropout, initialisation, the context
length, checked on its own). Every other key of the language model's config must match."""


def check_same_architecture(sampler: CheckpointInfo, trainer: CheckpointInfo) -> None:
    """Same model type, architecture classes, vocabulary, and every config field of the forward pass
    (layers, heads, sizes, rope, norms, experts, softcapping, sliding window, tied embeddings): other
    weights, same model. transformers would otherwise fill a missing layer with random weights, or run
    another rope, and the gap would read as policy lag."""
    pairs = [
        ("model_type", sampler.model_type, trainer.model_type),
        ("architectures", sampler.config.get("architectures"), trainer.config.get("architectures")),
        ("vocab_size", sampler.vocab_size, trainer.vocab_size),
    ]
    a_text, b_text = text_config(sampler.config), text_config(trainer.config)
    keys = (set(a_text) | set(b_text)) - NOT_FORWARD
    for key in [k for k in _SHAPE_FIRST if k in keys] + sorted(keys - set(_SHAPE_FIRST)):
        if key.startswith("_") or "dropout" in key:
            continue
        pairs.append((key, a_text.get(key, _ABSENT), b_text.get(key, _ABSENT)))
    for key, a, b in pairs:
        if a != b:
            raise CheckpointError(
                f"the trainer checkpoint {str(trainer.path)!r} is not the same model as the sampler's: "
                f"{key} {_show(a)} (sampler) vs {_show(b)} (trainer)",
                hint="--trainer-checkpoint takes a later checkpoint of the same model (same config.json "
                "architecture and vocabulary)",
            )


_SHAPE_FIRST = (
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
)
"""compared first: the cause a message should name when a layer count also changes ``layer_types``."""


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()


def check_same_tokenizer(
    sampler: CheckpointInfo,
    trainer: CheckpointInfo,
    sampler_tokenizer,
    prompts: list[str],
    *,
    trust_remote_code: bool = False,
) -> None:
    """Identical tokenizer files pass at once; otherwise vocabulary, special tokens and prompt ids must agree."""
    if tokenizer_files_digest(sampler.path) == tokenizer_files_digest(trainer.path):
        return
    if not any((trainer.path / name).is_file() for name in TOKENIZER_FILES):
        raise TokenizerMismatchError(
            f"the trainer checkpoint {str(trainer.path)!r} holds no tokenizer files, so it cannot be checked "
            "against the sampler's",
            hint="copy the tokenizer files of the sampler's checkpoint next to its weights",
        )
    other = load_tokenizer(trainer.path, trust_remote_code=trust_remote_code)
    what = tokenizer_difference(sampler_tokenizer, other, prompts, ("sampler's", "trainer's")) or _special_difference(
        sampler_tokenizer, other
    )
    if what:
        raise TokenizerMismatchError(
            f"the trainer checkpoint {str(trainer.path)!r} has another tokenizer than the sampler's: {what}",
            hint="--trainer-checkpoint must use the sampler checkpoint's tokenizer",
        )


def _special_difference(a, b) -> str | None:
    for name in _SPECIAL:
        x, y = getattr(a, name, None), getattr(b, name, None)
        if x != y:
            return f"{name} {x} (sampler's) vs {y} (trainer's)"
    sa, sb = sorted(a.all_special_tokens), sorted(b.all_special_tokens)
    if sa != sb:
        return f"special tokens {_show(sa)} (sampler's) vs {_show(sb)} (trainer's)"
    return None


@dataclass(frozen=True)
class RecordedTrainer:
    """The trainer weights a recorded run scored with, as its manifest's config says."""

    path: str | None
    sha256: str | None
    same_as_sampler: bool


def recorded_trainer_checkpoint(config: dict[str, Any]) -> RecordedTrainer:
    """What a recorded run's trainer scored with; runs from before the option scored with the sampler's."""
    rec = config.get("trainer_checkpoint")
    if isinstance(rec, dict) and "sha256" in rec:
        return RecordedTrainer(rec.get("path"), rec.get("sha256"), bool(rec.get("same_as_sampler")))
    ckpt = config.get("checkpoint") or {}
    return RecordedTrainer(ckpt.get("path"), ckpt.get("sha256"), True)


def check_resume(recorded: RecordedTrainer, chosen: TrainerCheckpoint, run: Path) -> None:
    """A resumed run keeps its trainer weights: half a run scored with other weights would mix two runs."""
    if recorded.sha256 == chosen.info.sha256:
        return
    old, new = recorded.path, str(chosen.info.path)
    if old is not None and Path(old).resolve() == chosen.info.path.resolve():
        raise UsageError(
            f"cannot resume {run}: the trainer checkpoint {old!r} changed since the run was recorded (sha256 differs)",
            hint="restore that checkpoint, or start a new --out",
        )
    raise UsageError(
        f"cannot resume {run}: it was scored with trainer checkpoint {old!r} "
        f"(sha256 {str(recorded.sha256)[:12]}...), not {new!r} (sha256 {chosen.info.sha256[:12]}...)",
        hint="leave --trainer-checkpoint out to keep the recorded one, or start a new --out",
    )


def _show(v: Any) -> str:
    if isinstance(v, (dict, list)):
        text = json.dumps(v, sort_keys=True)
        return text if len(text) <= 80 else text[:77] + "..."
    return repr(v) if isinstance(v, str) else str(v)
