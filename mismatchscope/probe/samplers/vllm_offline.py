"""The ``vllm`` sampler: ``vllm.LLM`` in this process.

All prompts go to vLLM in one ``generate`` call, as token ids
(``TokensPrompt``), so vLLM schedules and batches them as it would a rollout
step, and nothing is re-tokenised on the way.

vLLM fixes ``logprobs_mode`` per engine, not per request, while the mode is
part of :class:`SamplingConfig`. The engine is therefore started for the mode
of the first ``sample`` call (or of ``sampling`` given to the constructor)
and kept for later calls with the same mode; a call with another mode
restarts it. Per-request seeds make results independent of the engine seed.

Running in-process needs ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` or a
``if __name__ == "__main__"`` guard in the calling script (vLLM spawns its
engine process otherwise). On CPU set ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchscope.errors import SamplerError, UsageError
from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.hf_model import canonical_dtype
from mismatchscope.probe.samplers.base import (
    check_prompts,
    manifest_safe,
    request_layout,
    sample_index,
    split_topk,
)
from mismatchscope.probe.types import Completion, SamplerConfig, SamplingConfig
from mismatchscope.progress import Advance

from ...documents import json_edge, to_json

DEFAULT_MAX_LOGPROBS = 20
"""vLLM's own default cap on ``logprobs=k``; raised when a probe asks for more."""


class VLLMOfflineSampler:
    """Samples with an in-process ``vllm.LLM``."""

    name = "vllm"

    def __init__(self, cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None):
        self.cfg = cfg
        self.info = info
        self._llm = None
        self._engine_args: dict[str, Any] | None = None
        self._received: Any = None
        """the last ``SamplingParams`` the engine received (its provenance records them)."""
        self._moe_layers, self._routes_why = _route_plan(info)
        if sampling is not None:
            self.engine_for(sampling)

    # ------------------------------------------------------------ engine

    @json_edge
    def engine_args(self, sampling: SamplingConfig) -> dict[str, Any]:
        """The keyword arguments given to ``vllm.LLM``: typed options that are set, then
        ``engine_args`` unchanged on top (a user's explicit option wins)."""
        cfg = self.cfg
        args: dict[str, Any] = {
            "model": str(self.info.path),
            "dtype": canonical_dtype(cfg.dtype),  # vLLM refuses the short names (bf16, fp32)
            "tensor_parallel_size": cfg.tensor_parallel_size,
            "enforce_eager": cfg.enforce_eager,
            "logprobs_mode": sampling.logprobs_mode,
            "seed": sampling.seed,
            "max_logprobs": max(DEFAULT_MAX_LOGPROBS, sampling.top_k_logprobs),
        }
        optional = {
            "max_num_seqs": cfg.max_num_seqs,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "max_model_len": cfg.max_model_len,
        }
        args.update({k: v for k, v in optional.items() if v is not None})
        if self._moe_layers is not None:  # vLLM returns routes only with prefix caching on
            args.update(enable_return_routed_experts=True, enable_prefix_caching=True)
        if cfg.fp32_lm_head:
            args["hf_overrides"] = {"head_dtype": "float32"}
        forced = cfg.engine_args.get("logprobs_mode", sampling.logprobs_mode)
        if forced != sampling.logprobs_mode:
            raise UsageError(
                f"engine_args sets logprobs_mode={forced!r} but the probe asks for {sampling.logprobs_mode!r}",
                hint="set the mode once, with the probe's logprobs mode option",
            )
        args.update(cfg.engine_args)
        return args

    def engine_for(self, sampling: SamplingConfig):
        """The engine for this call's logprobs mode, started (or restarted) when needed."""
        if self._llm is not None and self._engine_args is not None:
            same_mode = self._engine_args.get("logprobs_mode") == sampling.logprobs_mode
            cap = self._engine_args.get("max_logprobs", DEFAULT_MAX_LOGPROBS)
            if same_mode and (cap == -1 or sampling.top_k_logprobs <= cap):
                return self._llm
            self.close()

        args = self.engine_args(sampling)
        model = args.pop("model")
        self._llm = _start(model, args)
        self._engine_args = {"model": model, **args}
        return self._llm

    # ------------------------------------------------------------ sampling

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        on_progress: Advance | None = None,
    ) -> list[Completion]:
        """All prompts in one ``generate`` call; completions prompt-major, samples by index."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        check_prompts(prompts, sampling)
        llm = self.engine_for(sampling)
        layout, per_request_n = request_layout(len(prompts), sampling)
        params = SamplingParams(
            n=per_request_n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k and sampling.top_k > 0 else 0,
            max_tokens=sampling.max_tokens,
            seed=sampling.seed,
            logprobs=sampling.top_k_logprobs,
        )
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=list(prompts[p])) for p in layout], params, use_tqdm=False
        )
        self._received = params
        completions = []
        for j, request in enumerate(outputs):
            for out in sorted(request.outputs, key=lambda o: o.index):
                index = sample_index(j, out.index, sampling, per_request_n)
                completions.append(_completion(layout[j], index, out, sampling.top_k_logprobs, self._moe_layers))
        if on_progress is not None:
            on_progress(len(completions))
        return completions

    def prefill_logprobs(
        self, prompts: list[list[int]], completions: list[list[int]], sampling: SamplingConfig
    ) -> list[list[float]]:
        """The engine's own prefill (teacher-forced) logprob of each completion token.

        Each prompt + completion is sent as one prompt with ``max_tokens=1,
        prompt_logprobs=0``, all in one ``generate`` call. vLLM's prompt
        logprobs are raw (T = 1, full vocabulary) whatever the logprobs mode.
        The requests carry no seed: the one sampled token is thrown away, and
        a seeded request whose long prefill the scheduler splits into chunks
        crashes vLLM's CPU build ("CPU Generator does not use offset").
        """
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        llm = self.engine_for(sampling)
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
        outputs = llm.generate(
            [TokensPrompt(prompt_token_ids=[*p, *c]) for p, c in zip(prompts, completions, strict=True)],
            params,
            use_tqdm=False,
        )
        out = []
        for p, c, request in zip(prompts, completions, outputs, strict=True):
            assert request.prompt_logprobs is not None  # asked for with prompt_logprobs=0
            rows = request.prompt_logprobs[len(p) : len(p) + len(c)]
            # only the first prompt position has no row (None), and p is never empty
            out.append([row[t].logprob for t, row in zip(c, rows, strict=True)])  # pyright: ignore[reportOptionalSubscript]
        return out

    def routes_status(self):
        """vLLM returns expert ids (never gate weights) where its build supports it."""
        from mismatchscope.routing.layout import SideRoutes

        if self._moe_layers is None:
            return SideRoutes(False, why=self._routes_why)
        return SideRoutes(True, weights=False)

    @json_edge
    def describe(self) -> dict[str, Any]:
        """Engine, version, dtypes, devices and the effective ``LLM(...)`` arguments."""
        import vllm

        info: dict[str, Any] = {"engine": "vllm", "version": vllm.__version__, "requested_dtype": self.cfg.dtype}
        if self._engine_args is not None:
            info["engine_args"] = manifest_safe(self._engine_args)
        if self._llm is not None:
            engine = self._llm.llm_engine
            info["dtype"] = str(engine.model_config.dtype).removeprefix("torch.")
            info["logprobs_mode"] = engine.model_config.logprobs_mode
            info.update(to_json(_device_info(str(engine.vllm_config.device_config.device))))
        return info

    def provenance(self):
        """This engine's side of the run: what it resolved and runs, what its arguments asked for, and the
        sampling parameters it last received (the probe adds the checkpoint's identities and the fallbacks)."""
        import os

        from mismatchscope.execution import vllm_side
        from mismatchscope.execution.environment import engine_environment
        from mismatchscope.execution.record import Identities, SideProvenance
        from mismatchscope.probe.engine_log import captured_text

        if self._llm is None or self._engine_args is None:
            return SideProvenance(source="probe", engine="vllm", software=vllm_side.software())
        from mismatchscope.execution.logs import logged_backends

        used = vllm_side.used_numerics(
            self._llm, vllm_side.inspection(self._llm), logged_backends(captured_text() or "")
        )
        switches = vllm_side.torch_in_engine(self._llm)
        for name in ("deterministic", "tf32_matmul", "tf32_cudnn", "float32_matmul_precision"):
            setattr(used, name, getattr(switches, name))
        mode = self._engine_args.get("logprobs_mode")
        received = vllm_side.sampling_params(self._received, mode) if self._received is not None else None
        device = self.describe().get("device_names")
        return SideProvenance(
            source="probe",
            engine="vllm",
            identities=Identities(sampling=received),
            software=vllm_side.software(),
            requested=vllm_side.requested_numerics(self._engine_args, os.environ),
            used=used,
            environment=engine_environment(),
            deployment=vllm_side.deployment(self._llm, device),
        )

    def close(self) -> None:
        """Shut the engine down; the next ``sample`` starts a new one."""
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()


def _start(model: str, args: dict[str, Any]):
    """``vllm.LLM(model, **args)``, its refusals of the options as one-line errors.

    :func:`mismatchscope.probe.engine_checks.check_vllm_engine_args` catches these before the run; this is the
    backstop when vLLM's declarations could not be read.
    """
    import pydantic
    from vllm import LLM

    from mismatchscope.probe.engine_log import start_cause

    _log_once_again()
    try:
        return LLM(model, **args)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise _start_failed(model, e) from e
        raise UsageError(f"vllm.LLM refused the engine options: {e}", hint="check the --engine-arg names") from e
    except pydantic.ValidationError as e:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or e.title
        msg = str(first.get("msg", e))
        if "failed to be inspected" in msg and start_cause(e) is not None:
            raise _start_failed(model, e) from e
        raise UsageError(f"vLLM refused its configuration: {where}: {msg}") from e
    except (RuntimeError, ValueError, KeyError, NotImplementedError, ImportError, AssertionError) as e:
        raise _start_failed(model, e) from e


def _log_once_again() -> None:
    """Let a new engine log its once-only warnings again: vLLM prints a warning such as a kernel fallback once per
    process, so a second engine in one process would leave its run's log (and the fallbacks its provenance reads
    there) without it."""
    import vllm.logger

    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once"):
        clear = getattr(getattr(vllm.logger, name, None), "cache_clear", None)
        if callable(clear):
            clear()


def _start_failed(model: str, exc: BaseException) -> SamplerError:
    """The engine did not start: what vLLM refused, from the engine's output where the exception only points there."""
    from mismatchscope.probe.engine_log import start_cause

    cause = start_cause(exc) or " ".join(f"{type(exc).__name__}: {exc}".split())
    return SamplerError(
        f"vLLM could not start an engine for {model}: {cause}", hint="--sampler hf samples with transformers instead"
    )


def _route_plan(info: CheckpointInfo) -> tuple[tuple[int, ...] | None, str | None]:
    """(MoE layers to read from vLLM's routes, or None; why not). Dense models: (None, None)."""
    if not info.is_moe:
        return None, None
    from mismatchscope.probe.routes import moe_layers_from_config, vllm_routes_unsupported

    why = vllm_routes_unsupported()
    if why is not None:
        return None, why
    return moe_layers_from_config(info)


def _completion(prompt_index: int, index: int, out, k: int, moe_layers: tuple[int, ...] | None = None) -> Completion:
    """One vLLM ``CompletionOutput`` as a :class:`Completion`."""
    if out.logprobs is None or len(out.logprobs) != len(out.token_ids):
        raise UsageError("vLLM returned no logprobs; the engine ignored logprobs=k")
    sampled, top_ids, top_lps = [], [], []
    for token, position in zip(out.token_ids, out.logprobs, strict=True):
        entries = [(tid, lp.logprob, lp.rank) for tid, lp in position.items()]
        try:
            lp, ids, lps = split_topk(token, entries, k)
        except ValueError as e:
            raise SamplerError(f"vLLM's logprobs for prompt {prompt_index} sample {index}: {e}") from None
        sampled.append(lp)
        top_ids.append(ids)
        top_lps.append(lps)
    return Completion(
        prompt_index=prompt_index,
        sample_index=index,
        token_ids=list(out.token_ids),
        sampler_logprobs=sampled,
        topk_ids=top_ids,
        topk_logprobs=top_lps,
        finish_reason=out.finish_reason,
        routes=_routes(out, moe_layers),
    )


def _routes(out, moe_layers: tuple[int, ...] | None):
    """vLLM's ``routed_experts`` ``[tokens - 1, all decoder layers, k]`` (prompt start 0) as MoE-layer routes."""
    if moe_layers is None or getattr(out, "routed_experts", None) is None:
        return None
    from mismatchscope.probe.routes import from_engine_layout

    return from_engine_layout(out.routed_experts, moe_layers)


@dataclass(frozen=True)
class DeviceInfo:
    """The engine's device and the hardware's names, for ``sampler_info``."""

    device: str
    device_names: list[str]


def _device_info(device: str) -> DeviceInfo:
    from mismatchscope.probe.hf_model import device_names

    if device.startswith("cuda"):
        import torch

        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        return DeviceInfo(device, names)
    return DeviceInfo(device, device_names([device]))
