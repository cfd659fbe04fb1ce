"""The one place the sampler, trainer and sampling configs are built from a command line's values.

``probe``, ``rescore`` and ``diagnose`` take the same engine options under
the same names; :class:`EngineValues` holds them as typed fields (what a
command does not take keeps the configs' own default, read from the config
classes), and its three
builders turn them into :class:`SamplingConfig`, :class:`SamplerConfig` and
:class:`TrainerConfig`. The values are judged later, once, by
:mod:`.options` and :mod:`.engine_checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from .types import LogprobsMode, SamplerConfig, SamplingConfig, TrainerConfig

SamplerKind = Literal["vllm", "vllm-server", "trl-server", "hf"]
DEFAULT_SAMPLER_DTYPE = SamplerConfig.dtype
"""``--sampler-dtype`` when none is given: float16, a CPU demo pairing against the float32 trainer."""


@dataclass(frozen=True)
class EngineValues:
    """The engine options of a command line, by their parameter names: each command builds it from its own
    parameters by keyword, so a parameter renamed on one side only fails at type-checking and in
    ``tests/cli/test_options.py``."""

    temperature: float = SamplingConfig.temperature
    top_p: float = SamplingConfig.top_p
    top_k: int = SamplingConfig.top_k
    n: int = SamplingConfig.n
    max_tokens: int = 0
    """0: as long as the context allows (the probe resolves it against the checkpoint)."""
    top_k_logprobs: int = SamplingConfig.top_k_logprobs
    seed: int = SamplingConfig.seed
    logprobs_mode: str = SamplingConfig.logprobs_mode
    sampler: str | None = None
    """``--sampler``; None: ``hf`` for the zero profile, else ``vllm``."""
    sampler_dtype: str = SamplerConfig.dtype
    tensor_parallel_size: int = SamplerConfig.tensor_parallel_size
    max_num_seqs: int | None = SamplerConfig.max_num_seqs
    enforce_eager: bool = SamplerConfig.enforce_eager
    gpu_memory_utilization: float | None = SamplerConfig.gpu_memory_utilization
    max_model_len: int | None = SamplerConfig.max_model_len
    fp32_lm_head: bool = False
    """``--fp32-lm-head``: both sides."""
    sampler_fp32_lm_head: bool = False
    engine_args: dict[str, Any] = field(default_factory=dict)
    """``--engine-arg`` items, parsed."""
    url: str | None = SamplerConfig.url
    api_key_env: str = SamplerConfig.api_key_env
    zero: bool = SamplerConfig.zero
    trainer_dtype: str = TrainerConfig.dtype
    attn_implementation: str | None = TrainerConfig.attn_implementation
    trainer_fp32_lm_head: bool = False
    device_map: str | None = TrainerConfig.device_map
    trainer_device: str | None = TrainerConfig.device
    trainer_batch_tokens: int = TrainerConfig.batch_tokens
    trust_remote_code: bool = TrainerConfig.trust_remote_code
    allow_pickle: bool = TrainerConfig.allow_pickle
    replay_routes: bool = TrainerConfig.replay_routes
    replay_weights: bool = TrainerConfig.replay_weights
    routes: bool = TrainerConfig.record_routes
    """``--routes/--no-routes``: record both sides' MoE routes."""

    def profiled(self) -> EngineValues:
        """The values with what a profile implies: the zero profile runs one program, so one dtype on both sides,
        and a sampler dtype left at its default takes the trainer's (one given otherwise is kept, and refused by
        ``zero.check_zero``)."""
        if self.zero and self.sampler_dtype == DEFAULT_SAMPLER_DTYPE:
            return replace(self, sampler_dtype=self.trainer_dtype)
        return self

    @property
    def sampler_kind(self) -> str:
        return self.sampler or ("hf" if self.zero else "vllm")

    def sampling_config(self) -> SamplingConfig:
        return SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            n=self.n,
            max_tokens=self.max_tokens,
            top_k_logprobs=self.top_k_logprobs,
            seed=self.seed,
            logprobs_mode=cast(LogprobsMode, self.logprobs_mode),  # check_sampling checks it
        )

    def sampler_config(self) -> SamplerConfig:
        return SamplerConfig(
            kind=cast(SamplerKind, self.sampler_kind),  # check_sampler checks it
            dtype=self.sampler_dtype,
            tensor_parallel_size=self.tensor_parallel_size,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=self.enforce_eager,
            gpu_memory_utilization=self.gpu_memory_utilization,
            max_model_len=self.max_model_len,
            fp32_lm_head=self.fp32_lm_head or self.sampler_fp32_lm_head,
            engine_args=self.engine_args,
            url=self.url,
            api_key_env=self.api_key_env,
            zero=self.zero,
        )

    def trainer_config(self) -> TrainerConfig:
        return TrainerConfig(
            dtype=self.trainer_dtype,
            attn_implementation=self.attn_implementation,
            fp32_lm_head=self.fp32_lm_head or self.trainer_fp32_lm_head,
            device_map=self.device_map,
            device=self.trainer_device,
            batch_tokens=self.trainer_batch_tokens,
            trust_remote_code=self.trust_remote_code,
            allow_pickle=self.allow_pickle,
            replay_routes=self.replay_routes,
            replay_weights=self.replay_weights,
            record_routes=self.routes,
            zero=self.zero,
        )
