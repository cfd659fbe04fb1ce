"""One sampler configuration in its own process: start, sample, score, measure.

In-process vLLM engines share global state (compilation caches, environment
read at import, the custom-op registry), so every sampler configuration of a
diagnose runs here, in a fresh interpreter started by :mod:`.run`, with its
environment variables set before vLLM is imported. The engine runs inside
this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the process already
isolates it, and the extra engine process would only cost start-up time.

Input: a JSON spec (path as the only argument; :class:`.sampler_result.WorkerSpec`). Output: an ordinary probe run
directory at ``spec.out``, and ``spec.result`` (JSON, :class:`.sampler_result.SamplerResult`) with the timings,
the optional repeat sampling and prefill scorings, or the reason it failed.
vLLM's logs go to ``worker.log`` beside the result. With ``spec["reply_fd"]``
the process then stays up, its engine warm, and times sampling rounds on
request (:mod:`.timing`), so rounds of two configurations can alternate.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from pathlib import Path

from .sampler_result import Prefill, Repeat, RepeatedSequence, SamplerResult, WorkerSpec
from .worker_env import configure_env, one_line

WARMUP_PROMPT = [1, 2, 3]
WARMUP_TOKENS = 2


def run(spec: WorkerSpec) -> SamplerResult:
    """Start the engine, probe, measure what the spec asks; with ``reply_fd``, then serve timing rounds."""
    from dataclasses import replace

    from ..probe.checkpoint import inspect_checkpoint

    t_wall = time.perf_counter()
    sampling, sampler_cfg = spec.sampling, spec.sampler
    info = inspect_checkpoint(Path(spec.checkpoint))
    started = _start(sampler_cfg, info, sampling)
    if isinstance(started, SamplerResult):  # the engine refused this configuration: a result, not a crash
        return started
    sampler, startup_s = started
    try:
        prompt_ids, completions = _probe(spec, info, sampling, sampler_cfg, sampler)
        result = SamplerResult("ok", startup_s=startup_s, sampler_info=sampler.describe())
        result, locate_s = _measure(spec, sampling, sampler, prompt_ids, completions, result)
        result = replace(result, wall_s=time.perf_counter() - t_wall - locate_s)
        if spec.reply_fd is not None:  # kept warm to time sampling rounds against other configurations
            from .. import rundir
            from .timing import serve

            rundir.atomic_write_bytes(Path(spec.result), json.dumps(result.message()).encode())
            serve(sampler, prompt_ids, sampling, spec.reply_fd, sys.stdin)
    finally:
        sampler.close()
    return result


def _start(sampler_cfg, info, sampling):
    """(the warmed-up sampler, its start-up seconds), or the failed result saying why it did not start."""
    from dataclasses import replace

    from ..probe.samplers import make_sampler

    t0 = time.perf_counter()
    try:
        sampler = make_sampler(sampler_cfg, info, sampling=sampling)
        sampler.sample([WARMUP_PROMPT], replace(sampling, n=1, max_tokens=WARMUP_TOKENS))
    except Exception as e:
        return SamplerResult.failed("engine start-up", one_line(e))
    return sampler, time.perf_counter() - t0


def _probe(spec: WorkerSpec, info, sampling, sampler_cfg, sampler) -> tuple[list, list]:
    """The configuration's probe run at ``spec.out``; its prompts' token ids and its completions."""
    from ..probe.command import run_probe
    from ..probe.options import ProbeOptions
    from ..probe.writer import RunDir

    opts = ProbeOptions(
        checkpoint=info.path,
        prompts=Path(spec.prompts),
        out=Path(spec.out),
        sampling=sampling,
        sampler=sampler_cfg,
        trainer=spec.trainer,
    )
    run_probe(opts, sampler=sampler)
    run_dir = RunDir(Path(spec.out))
    return [r["prompt_token_ids"] for r in run_dir.read_prompts().to_pylist()], run_dir.read_samples()


def _measure(
    spec: WorkerSpec, sampling, sampler, prompt_ids, completions, result: SamplerResult
) -> tuple[SamplerResult, float]:
    """``result`` with the repeat sampling, the prefill scorings and the localisation the spec asks for; and the
    seconds the localisation took (not the configuration's time)."""
    from dataclasses import replace

    if spec.repeat:
        result = replace(result, repeat=_repeat(sampler, prompt_ids, sampling))
    if spec.prefill and hasattr(sampler, "prefill_logprobs"):
        result = replace(result, prefill=_prefill(sampler, prompt_ids, completions, sampling, spec.seed))
    if spec.locate is None:
        return result, 0.0
    from .locate.worker import in_worker

    t_locate = time.perf_counter()  # after everything the run measures
    result = replace(result, locate=in_worker(sampler, sampling, Path(spec.out), spec.locate))
    return result, time.perf_counter() - t_locate


def _repeat(sampler, prompt_ids, sampling) -> Repeat:
    """The same prompts sampled again with the same seed."""
    t1 = time.perf_counter()
    again = sampler.sample(prompt_ids, sampling)
    return Repeat(
        time.perf_counter() - t1,
        [RepeatedSequence(c.prompt_index, c.sample_index, c.token_ids, c.sampler_logprobs) for c in again],
    )


def _prefill(sampler, prompt_ids, completions, sampling, seed: int) -> Prefill:
    """The recorded sequences scored by the engine's prefill: all in one batch, one by one, shuffled."""
    prompts = [prompt_ids[c.prompt_index] for c in completions]
    tokens = [c.token_ids for c in completions]
    t0 = time.perf_counter()
    batch = sampler.prefill_logprobs(prompts, tokens, sampling)
    seconds = time.perf_counter() - t0
    alone = [sampler.prefill_logprobs([p], [t], sampling)[0] for p, t in zip(prompts, tokens, strict=True)]
    order = list(range(len(prompts)))
    random.Random(seed).shuffle(order)
    shuffled_out = sampler.prefill_logprobs([prompts[i] for i in order], [tokens[i] for i in order], sampling)
    shuffled: list = [None] * len(order)
    for j, i in enumerate(order):
        shuffled[i] = shuffled_out[j]
    keys = [[c.prompt_index, c.sample_index] for c in completions]
    return Prefill(keys, batch, alone, shuffled, seconds)


def main(argv: list[str]) -> int:
    data = json.loads(Path(argv[0]).read_text())
    configure_env(data.get("env", {}))  # before anything imports the engine: the configs are read after
    spec = WorkerSpec.of_message(data)
    try:
        result = run(spec)
    except Exception as e:
        traceback.print_exc()
        result = SamplerResult.failed("sampling", one_line(e))
    from .. import rundir

    # whole or absent, even if this process dies
    rundir.atomic_write_bytes(Path(spec.result), json.dumps(result.message()).encode())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
