"""Typed configuration and the records that flow between sampler, trainer and
recorder. No heavy imports here: the CLI builds these before deciding whether
torch or vLLM are needed at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..documents import json_edge

LogprobsMode = Literal["raw_logprobs", "processed_logprobs"]


@dataclass(frozen=True)
class SamplingConfig:
    """What the sampler is asked for. Recorded verbatim in every shard."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1 (or 0) means no top-k truncation."""
    n: int = 4
    """samples per prompt (a GRPO group)."""
    max_tokens: int = 16
    top_k_logprobs: int = 5
    """how many of the sampler's top logprobs to record per position (0: sampled token only)."""
    seed: int = 0
    logprobs_mode: LogprobsMode = "processed_logprobs"
    """raw_logprobs: before temperature/top-p/top-k, compared with a trainer at T=1.
    processed_logprobs: after them, compared with a trainer that divides by T and
    with the kept-mass of top-p/top-k removed and recorded apart."""

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SamplerConfig:
    """Which sampler, and the engine options a user needs to reproduce a serving setup."""

    kind: Literal["vllm", "vllm-server", "trl-server", "hf"] = "vllm"
    dtype: str = "float16"
    tensor_parallel_size: int = 1
    max_num_seqs: int | None = None
    enforce_eager: bool = True
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    fp32_lm_head: bool = False
    """vLLM ``hf_overrides={"head_dtype": "float32"}``."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    """free-form ``--engine-arg key=value`` passed to ``vllm.LLM`` unchanged."""
    url: str | None = None
    """base URL of a running vLLM OpenAI-compatible server (vllm-server) or ``trl vllm-serve`` (trl-server)."""
    api_key_env: str = "MISMATCHSCOPE_API_KEY"
    """name of the environment variable holding the server's API key; the key itself is never recorded."""
    device: str | None = None
    """hf sampler only: torch device (default: cuda if available, else cpu)."""
    zero: bool = False
    """hf sampler only: the zero-mismatch profile (:mod:`~mismatchscope.probe.zero`), decoding by recomputation."""

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrainerConfig:
    """The trainer forward pass (transformers ``AutoModelForCausalLM``)."""

    dtype: str = "float32"
    attn_implementation: str | None = None
    fp32_lm_head: bool = False
    """upcast the lm_head weight and hidden states to fp32 before the logits."""
    device_map: str | None = None
    """``auto`` shards a model larger than one GPU across devices."""
    device: str | None = None
    batch_tokens: int = 8192
    """token budget of one scoring batch (padded length x rows)."""
    lm_head_chunk: int = 1024
    """positions per lm_head chunk: bounds peak memory at chunk x vocab fp32."""
    trust_remote_code: bool = False
    allow_pickle: bool = False
    """load ``.bin``/``.pt`` weights (pickle) instead of refusing them."""
    replay_routes: bool = False
    """MoE: force the trainer's expert ids to the sampler's recorded ones (gate weights from its own router)."""
    replay_weights: bool = False
    """MoE, with ``replay_routes``: also use the sampler's recorded gate weights."""
    record_routes: bool = True
    """MoE: write ``routes/`` (off: the run records no routes, as for a dense model)."""
    zero: bool = False
    """the zero-mismatch profile: score with the sampler's own program (:mod:`~mismatchscope.probe.zero`)."""

    @property
    def replay(self) -> str | None:
        """``None``, ``"ids"`` or ``"ids+weights"``: the manifest's ``routing.replay``."""
        if not self.replay_routes:
            return None
        return "ids+weights" if self.replay_weights else "ids"

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        """The options; the route switches only when not at their default, so older runs resume as before."""
        out = asdict(self)
        for key, default in (
            ("replay_routes", False),
            ("replay_weights", False),
            ("record_routes", True),
            ("zero", False),
        ):
            if out[key] == default:
                del out[key]
        return out


@dataclass
class Completion:
    """One sampled completion, as the sampler reported it."""

    prompt_index: int
    sample_index: int
    token_ids: list[int]
    sampler_logprobs: list[float]
    """the sampler's logprob of each sampled token."""
    topk_ids: list[list[int]]
    """per position: the ids the sampler listed (its top-k; may include the sampled id)."""
    topk_logprobs: list[list[float]]
    finish_reason: str | None = None
    sampler_prefill_logprobs: list[float] | None = None
    """the same engine's logprob of each token from a prefill of prompt + completion (``--sampler-prefill``)."""
    routes: Any = None
    """MoE: the sampler's routes (:class:`~mismatchscope.routing.io.SeqRoutes`), where it can give them."""
    rows: Any = None
    """``--full-vocab``: the sampler's whole float32 log-prob row per position ``[n, vocab]`` (memory only)."""
    turns: list[int] | None = None
    """``probe --turns``: each token's turn in its conversation (the turns' sampled ids laid end to end)."""
    trainer_token_ids: list[int] | None = None
    """``--turn-ids messages``: the ids the trainer scored at each pair (another id where re-tokenized)."""


@dataclass
class ScoreRequest:
    """One teacher-forced sequence for the trainer."""

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    sampler_topk_ids: list[list[int]]
    forced_routes: Any = None
    """MoE replay: the :class:`~mismatchscope.routing.io.SeqRoutes` to force (ids, and weights where set)."""
    sampler_rows: Any = None
    """``--full-vocab``: the sampler's whole rows ``[n, vocab]`` to compare the trainer's with."""


@dataclass
class Scored:
    """The trainer's view of one completion, aligned position by position."""

    trainer_logprobs: list[float]
    """log p of each completion token, after temperature and kept-mass handling."""
    logprobs_at_sampler_topk: list[list[float]]
    topk_ids: list[list[int]]
    topk_logprobs: list[list[float]]
    entropy: list[float]
    kept_logmass: list[float] | None = None
    """log of the trainer mass on the top-p/top-k kept set (None: no truncation)."""
    row_columns: dict[str, Any] | None = None
    """``--full-vocab``: the four row columns of :mod:`~mismatchscope.probe.full_rows` for this completion."""
    routes: Any = None
    """MoE: the trainer's routes over every input position but the last (:class:`~mismatchscope.routing.io.SeqRoutes`)."""
