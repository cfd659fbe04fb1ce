"""``diagnose --locate``: one localisation per configuration that ran, after every other number is computed.

The baseline's sampler process captured its run's worst sequences; a
sampler-side variant's process captured its own run's worst; a trainer-side
variant rescored the baseline's very tokens, so it reuses the baseline's
sampler capture and sequences and captures only its own trainer. The
reference is captured once per sequence set. Everything here runs after the
rest of diagnose, so ``--locate`` changes no other number.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .capture import CaptureFailed, SamplerCapture
from .document import INTERRUPTED
from .run import from_spec, locate, reference_capture, trainer_capture

if TYPE_CHECKING:
    from ..document import LocateNotRun, LocateOk, VariantEntry

REPLAY_SKIP = "route replay is not applied in the localisation: the trainer's own router runs"


def _worker_locate(result_file: Path) -> SamplerCapture | CaptureFailed:
    """The capture a sampler process's result file holds, or why there is none."""
    from ..sampler_result import SamplerResult

    if not result_file.is_file():
        return CaptureFailed("the sampler process left no result")
    found = SamplerResult.of_message(json.loads(result_file.read_text())).locate
    return found or CaptureFailed("the sampler process captured nothing")


def locate_all(opts, info, reference, variants: list[VariantEntry], progress) -> list[LocateOk | LocateNotRun]:
    """One entry per configuration that ran: its localisation, or why there is none."""
    from ..variants import Configuration, apply, directory_name

    base_cfg = Configuration(opts.sampler, opts.trainer, dict(opts.env))
    base = _worker_locate(opts.out / "baseline.result.json")
    refs: dict[str, Any] = {}
    todo = [("baseline", base_cfg.trainer, base)]
    for v in variants:
        if v.status != "ok":
            continue
        cfg = apply(base_cfg, next(x for x in opts.variants if x.name == v.name))
        if cfg.trainer.replay_routes:
            todo.append((v.name, cfg.trainer, CaptureFailed(REPLAY_SKIP, "skipped")))
            continue
        side = (
            base
            if v.side == "trainer"
            else _worker_locate(opts.out / "variants" / f"{directory_name(v.name)}.result.json")
        )
        todo.append((v.name, cfg.trainer, side))
    out: list[LocateOk | LocateNotRun] = []
    for name, trainer_cfg, sampler in todo:
        progress.note(f"locate: {name}")
        try:
            out.append(_one(name, opts, info, reference, trainer_cfg, sampler, refs))
        except KeyboardInterrupt:  # the localisations run last: what finished, and every number before, stays
            from ..document import LocateNotRun

            out += [LocateNotRun(n, INTERRUPTED, INTERRUPTED_REASON) for n, _, _ in todo[len(out) :]]
            break
    return out


INTERRUPTED_REASON = "interrupted (Ctrl-C) before this localisation finished"


def _one(
    name: str, opts, info, reference, trainer_cfg, sampler: SamplerCapture | CaptureFailed, refs
) -> LocateOk | LocateNotRun:
    from ...probe.trainer import HFTrainer
    from ..document import LocateNotRun, LocateOk

    if isinstance(sampler, CaptureFailed):
        return LocateNotRun(name, sampler.status, sampler.reason)
    t0 = time.perf_counter()
    sequences = from_spec(sampler.sequences)
    budget = opts.locate.budget
    key = json.dumps(sampler.sequences)
    if key not in refs:
        refs[key] = reference_capture(reference, info, sequences, budget)
    trainer = HFTrainer(info, trainer_cfg)
    t_cap = trainer_capture(trainer, info, sequences, budget)
    del trainer
    labels = {
        "sampler": f"{opts.sampler.kind} {_sampler_dtype(opts, name)}",
        "trainer": f"transformers {trainer_cfg.dtype}"
        + (f", {trainer_cfg.attn_implementation} attention" if trainer_cfg.attn_implementation else ""),
        "reference": reference.dtype,
    }
    result = locate(sampler, t_cap, refs[key], reference, sequences, budget, labels, time.perf_counter() - t0)
    return LocateOk(name, "ok", result)


def _sampler_dtype(opts, name: str) -> str:
    from ..variants import Configuration, apply

    if name == "baseline":
        return opts.sampler.dtype
    v = next(x for x in opts.variants if x.name == name)
    return apply(Configuration(opts.sampler, opts.trainer, dict(opts.env)), v).sampler.dtype
