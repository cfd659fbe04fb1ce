"""The sampler side of ``--locate`` in the sampler's own process.

``diagnose`` captures inside the process that already holds each sampler
configuration's engine (:func:`in_worker`, called by :mod:`..worker` after
the run), so ``--locate`` starts no engine of its own there. ``rescore
--locate`` has no engine yet: ``python -m mismatchscope.diagnose.locate.worker
SPEC`` starts the recorded run's sampler in a fresh process (its environment
set before vLLM is imported, the engine in-process so its model can be
hooked), captures, and writes the result file.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from .capture import CaptureFailed, LocateSpec, SamplerCapture


def in_worker(sampler, sampling, run_dir: Path, spec: LocateSpec) -> SamplerCapture | CaptureFailed:
    """Capture the sequences ``spec`` chose, or the run's worst ``spec.sequences``; a failure is a result with
    its reason."""
    from ..worker_env import one_line
    from .run import DEFAULT_SEQUENCES, capture_sampler, from_spec, select_sequences

    try:
        chosen = (
            from_spec(spec.chosen) if spec.chosen else select_sequences(run_dir, spec.sequences or DEFAULT_SEQUENCES)
        )
        return capture_sampler(sampler, sampling, chosen, spec.budget, Path(spec.path))
    except Exception as e:
        traceback.print_exc()
        return CaptureFailed(one_line(e))


def main(argv: list[str]) -> int:
    """A locate-only sampler process (``rescore --locate``): start, capture, write ``spec['result']``."""
    from ... import rundir
    from ..worker_env import configure_env, one_line

    spec = json.loads(Path(argv[0]).read_text())
    configure_env(spec.get("env", {}))
    from ...probe.checkpoint import inspect_checkpoint
    from ...probe.samplers import make_sampler
    from ...probe.types import SamplerConfig, SamplingConfig

    try:
        sampling = SamplingConfig(**spec["sampling"])
        sampler = make_sampler(
            SamplerConfig(**spec["sampler"]), inspect_checkpoint(Path(spec["checkpoint"])), sampling=sampling
        )
        try:
            result = in_worker(sampler, sampling, Path(spec["run"]), LocateSpec.of_message(spec["locate"]))
        finally:
            sampler.close()
    except Exception as e:
        traceback.print_exc()
        result = CaptureFailed(f"the sampler did not start: {one_line(e)}")
    rundir.atomic_write_bytes(Path(spec["result"]), json.dumps(result.message()).encode())
    return 0 if result.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
