"""Choosing the sequences, capturing each side, and the whole localisation of one configuration.

The sequences are a run's worst by the report's ranking (``k3_sum``, the
``report --worst`` default): a user with a bad run localises it on the tokens
that hurt. The sampler side is captured where its engine lives (the sampler's
own process, :func:`capture_sampler`), written to an ``.npz`` file; the
trainer and the reference are captured here. The three captures cover the
same token positions (:func:`.points.sample_positions` is deterministic).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import UsageError
from .capture import SamplerCapture
from .document import MEASURE, LocateResult
from .points import DEFAULT_BUDGET, Sequence, SideCapture, point_names, sample_positions

DEFAULT_SEQUENCES = 4
MEMORY_CAP = 1 << 30
"""bytes the three captures may hold together: the token sample shrinks below its default to stay under it."""
RANKING = "k3_sum"
HF_NOTE = "transformers generate's model: the same hooks as the trainer's"


@dataclass(frozen=True)
class LocateOptions:
    sequences: int = DEFAULT_SEQUENCES
    """the worst N sequences of the run, by the report's ranking."""
    budget: int = DEFAULT_BUDGET
    """token positions captured at most, over all sequences."""

    def __post_init__(self):
        if self.sequences < 1 or self.budget < 1:
            raise UsageError(f"--locate-sequences must be at least 1 (got {self.sequences})")


def fit_budget(opts: LocateOptions, config: dict[str, Any]) -> LocateOptions:
    """``opts`` with its token budget cut so the three captures stay under :data:`MEMORY_CAP`.

    A token holds, per side, six hidden-width vectors per layer, a router's logits per MoE layer, the embedding
    and the final norm, the logits and one logprob: float32 on each side (4 + 4 bytes) and float64 in the
    reference (8), 16 bytes a number in all."""
    from ...probe.checkpoint import text_config

    text = text_config(config)
    hidden, layers, vocab = int(text["hidden_size"]), int(text["num_hidden_layers"]), int(text["vocab_size"])
    experts = int(text.get("num_experts") or text.get("num_local_experts") or text.get("n_routed_experts") or 0)
    per_token = 16 * (layers * (6 * hidden + experts) + 2 * hidden + vocab + 1)
    return replace(opts, budget=max(1, min(opts.budget, MEMORY_CAP // per_token)))


def locate_options(locate: bool, sequences: int | None) -> LocateOptions | None:
    """The command line's ``--locate [--locate-sequences N]``; N alone is refused, not silently dropped."""
    if not locate:
        if sequences is not None:
            raise UsageError("--locate-sequences needs --locate", hint="add --locate, or drop --locate-sequences")
        return None
    return LocateOptions(sequences=DEFAULT_SEQUENCES if sequences is None else sequences)


def select_sequences(run_dir: Path, n: int) -> list[Sequence]:
    """The run's ``n`` worst sequences (largest first), with their prompt and completion ids."""
    from ...analysis.engine import AnalysisRequest, analyse
    from ...analysis.worst import worst_sequences
    from ...probe.writer import RunDir
    from ..pairs import load_tokens, sequence_slices

    result = analyse(str(run_dir), AnalysisRequest(report=True, routing=False))
    rows = [r for r in worst_sequences(result, result.sequences, RANKING) if r.tokens > 0][:n]
    if not rows:
        raise UsageError(f"--locate: {run_dir} has no completion tokens to localise")
    tokens = load_tokens(run_dir)
    slices = dict(sequence_slices(tokens["sequence_id"]))
    prompts = [r["prompt_token_ids"] for r in RunDir(run_dir).read_prompts().to_pylist()]
    out = []
    for r in rows:
        sl = slices[r.sequence_id]
        prompt = prompts[int(tokens["prompt_id"][sl.start])]
        out.append(Sequence(list(prompt), tokens["token_id"][sl].tolist(), f"sequence {r.sequence_id}"))
    return out


def to_spec(sequences: list[Sequence]) -> list[list[Any]]:
    return [[s.prompt, s.completion, s.label] for s in sequences]


def from_spec(rows: list[list[Any]]) -> list[Sequence]:
    return [Sequence(list(p), list(c), str(label)) for p, c, label in rows]


def capture_sampler(sampler, sampling, sequences: list[Sequence], budget: int, path: Path) -> SamplerCapture:
    """The sampler's capture, in the sampler's own process: the vLLM engine's hooks, or (``--sampler hf``) the
    transformers hooks on the generating model. Written to ``path``; returns the sequences, where, the note, the
    seconds and (vLLM) the largest |captured logprob - the engine's own prompt logprob|."""
    t0 = time.perf_counter()
    positions = sample_positions(sequences, budget)
    closure = None
    from ...probe.samplers import capabilities_of

    if capabilities_of(sampler.name).capture == "vllm":
        from .vllm_capture import NOTE, capture_vllm

        capture, closure = capture_vllm(sampler.engine_for(sampling), sequences, positions, "sampler")
        note = NOTE
    else:
        from ...probe.trainer import LogitTransform
        from .hf_capture import capture_hf

        model, transform = sampler.model, LogitTransform.from_config(sampler.info.config)
        head = model.get_output_embeddings()
        capture = capture_hf(
            model, sampler.info.model_type, sequences, positions, lambda h: transform(head(h)), "sampler"
        )
        note = HF_NOTE
    capture.save(path)
    return SamplerCapture(to_spec(sequences), str(path), note, closure, time.perf_counter() - t0)


def reference_capture(reference, info, sequences: list[Sequence], budget: int) -> SideCapture:
    """The float64 reference at the same positions: its head in its own dtype, then its logit transform."""
    import torch

    from .hf_capture import capture_hf

    head = reference.model.get_output_embeddings()

    def logits(h):
        out = reference.transform(head(h.to(head.weight.dtype)))
        return out.to(torch.float64) if reference.dtype == "float64" else out.float()

    positions = sample_positions(sequences, budget)
    return capture_hf(reference.model, info.model_type, sequences, positions, logits, "reference")


def trainer_capture(trainer, info, sequences: list[Sequence], budget: int) -> SideCapture:
    from .hf_capture import capture_hf

    positions = sample_positions(sequences, budget)
    return capture_hf(trainer.model, info.model_type, sequences, positions, trainer.logits, "trainer")


def locate(
    sampler: SamplerCapture,
    trainer_capture_: SideCapture,
    reference: SideCapture,
    reference_model,
    sequences: list[Sequence],
    budget: int,
    labels: dict[str, str],
    seconds: float,
) -> LocateResult:
    """The result of one configuration from its three captures (``sampler``: what :func:`capture_sampler` gave)."""
    from ...probe.route_capture import moe_layers_of
    from .compare import locate_result

    t0 = time.perf_counter()
    s = SideCapture.load(Path(sampler.capture))
    moe = moe_layers_of(reference_model.model, getattr(reference_model.model.config, "model_type", None))
    names = point_names(len(reference_model.model.get_decoder().layers), set(moe.routers) if moe else set())
    top_k = getattr(reference_model.model.config, "num_experts_per_tok", None)
    tokens = int(sum(len(p) for p in sample_positions(sequences, budget)))
    return locate_result(
        s,
        trainer_capture_,
        reference,
        names,
        sequences,
        tokens,
        top_k,
        dict(
            **labels,
            sampler_note=sampler.note,
            sampler_closure=sampler.closure,
            token_budget=budget,
            measure=MEASURE,
            seconds=seconds + sampler.seconds + time.perf_counter() - t0,
        ),
    )
