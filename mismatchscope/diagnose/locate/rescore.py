"""``rescore RUN --locate``: localise a recorded run's gap on its worst sequences.

The sequences are the rescored run's worst by the report's ranking (the new
trainer's logprobs against the recorded sampler's). The sampler side needs
the run's sampler again: its recorded configuration (engine, dtype, engine
arguments, checkpoint) starts in a fresh process (:mod:`.worker`), which
prefills the chosen sequences and captures. The trainer side is the
rescore's trainer (``--trainer-checkpoint`` included); the reference is the
float64 forward of the checkpoint the run sampled from. Everything lands in
``OUT/locate/``: ``locate.json`` (the document), the sampler's capture and log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ...documents import json_edge
from ...errors import SamplerError, UsageError
from .capture import LocateSpec, SamplerCapture, capture_of_message
from .document import LocateResult
from .run import LocateOptions

TIMEOUT_S = 900


@json_edge
def check_locatable(run: Path, checkpoint: Path | None = None) -> dict[str, Any] | None:
    """The run's recorded configuration (its manifest's ``config``, the JSON the sampler's process is started
    from), refused (one line, before any rescoring) when its sampler cannot be
    started again here; None when ``run`` is no run (rescore refuses it next). Its checkpoint's path is where it
    is now (``checkpoint``, ``rescore --checkpoint``; else :func:`~mismatchscope.probe.rescore.recorded_checkpoint`)."""
    from ... import rundir
    from ...probe.rescore_import import is_imported

    manifest = rundir.read_manifest(run)
    if manifest is None and not is_imported(run):  # not a run at all: rescore's own check says so, in its words
        return None
    config = {} if is_imported(run) else (manifest or {}).get("config") or {}
    kind = (config.get("sampler") or {}).get("kind")
    from ...probe.samplers import capabilities_of

    if kind is None or not (capabilities_of(kind).starts_here and capabilities_of(kind).capture):
        shown = f"--sampler {kind}" if kind else "another stack (an import)"
        raise UsageError(
            f"--locate starts the run's sampler again, and {run} was sampled by {shown}",
            hint="localise a probe run whose sampler was vllm or hf (or run diagnose --locate on the checkpoint)",
        )
    from ...probe.rescore import recorded_checkpoint

    found = recorded_checkpoint(run, config, checkpoint)
    if not found.is_dir():
        raise UsageError(
            f"--locate: the run's checkpoint {str(found)!r} is not here",
            hint="give its folder with --checkpoint PATH",
        )
    return {**config, "checkpoint": {**config["checkpoint"], "path": str(found)}}


def locate_rescored(
    run: Path,
    out: Path,
    trainer_cfg,
    trainer_checkpoint: Path | None,
    opts: LocateOptions,
    config: dict[str, Any],
    progress,
) -> LocateResult:
    """Capture, compare, write ``OUT/locate/locate.json``; returns the localisation the table renders."""
    folder = out / "locate"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _locate(run, out, folder, trainer_cfg, trainer_checkpoint, opts, config, progress)
    except BaseException:  # the rescored run stays (it is complete); a half localisation does not
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        raise


def _locate(run, out, folder, trainer_cfg, trainer_checkpoint, opts, config, progress) -> LocateResult:
    from ... import rundir
    from ...documents import json_text
    from ...probe.checkpoint import inspect_checkpoint
    from ...probe.trainer import HFTrainer
    from ..reference import load_reference
    from .run import fit_budget, locate, reference_capture, select_sequences, to_spec, trainer_capture

    t0 = time.perf_counter()
    info = inspect_checkpoint(Path(config["checkpoint"]["path"]))
    opts = fit_budget(opts, info.config)
    sequences = select_sequences(out, opts.sequences)
    progress.note(f"locate: the run's sampler on its {len(sequences)} worst sequences (own process)")
    sampler = _sampler_side(
        config, out, folder, LocateSpec(opts.budget, str(folder / "sampler.npz"), chosen=to_spec(sequences))
    )
    progress.note("locate: the float64 reference and the trainer")
    reference = load_reference(info, trust_remote_code=trainer_cfg.trust_remote_code)
    ref = reference_capture(reference, info, sequences, opts.budget)
    t_info = inspect_checkpoint(trainer_checkpoint) if trainer_checkpoint else info
    trainer = trainer_capture(HFTrainer(t_info, trainer_cfg), t_info, sequences, opts.budget)
    labels = {
        "sampler": f"{config['sampler']['kind']} {config['sampler']['dtype']}",
        "trainer": f"transformers {trainer_cfg.dtype}" + (f" ({trainer_checkpoint})" if trainer_checkpoint else ""),
        "reference": reference.dtype,
    }
    result = locate(sampler, trainer, ref, reference, sequences, opts.budget, labels, time.perf_counter() - t0)
    rundir.atomic_write_bytes(folder / "locate.json", json_text(result).encode())
    return result


def _sampler_side(config: dict[str, Any], run: Path, folder: Path, locate_spec: LocateSpec) -> SamplerCapture:
    """The locate-only sampler process (its spec and result are JSON files); its capture, or a one-line error
    with the log's last word."""
    spec = {
        "checkpoint": config["checkpoint"]["path"],
        "sampler": config["sampler"],
        "sampling": config["sampling"],
        "run": str(run),
        "locate": locate_spec.message(),
        "result": str(folder / "sampler.json"),
        "env": {},
    }
    spec_path = folder / "sampler.spec.json"
    spec_path.write_text(json.dumps(spec))
    with open(folder / "sampler.log", "w") as log:
        try:
            subprocess.run(
                [sys.executable, "-m", "mismatchscope.diagnose.locate.worker", str(spec_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SamplerError(f"--locate: the sampler gave no capture within {TIMEOUT_S} s") from None
    result_path = Path(spec["result"])
    data = json.loads(result_path.read_text()) if result_path.is_file() else {"reason": "the process died"}
    result = capture_of_message(data)
    if not isinstance(result, SamplerCapture):
        raise SamplerError(
            f"--locate: the sampler side failed: {result.reason}", hint=f"its output: {folder / 'sampler.log'}"
        )
    return result
