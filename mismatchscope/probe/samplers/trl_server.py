"""The ``trl-server`` sampler: a running ``trl vllm-serve``, spoken to as TRL's own client speaks to it.

What TRL's server is, read from TRL 1.16.0 (``trl/scripts/vllm_serve.py``
``build_command``, ``trl/generation/vllm_client.py`` ``VLLMClient.generate``):
``trl vllm-serve`` runs vLLM's own OpenAI-compatible server
(``vllm serve MODEL``) with settings TRL imposes, among them
``--logprobs-mode processed_logprobs`` and ``VLLM_SERVER_DEV_MODE=1`` (which
adds ``GET /server_info``, the resolved ``VllmConfig``). TRL's trainers
sample with ``POST /v1/completions`` carrying the prompt ids,
``return_token_ids`` and ``return_tokens_as_token_ids``, ``n``,
``repetition_penalty``, ``temperature``, ``top_p``, ``top_k`` (0: none),
``min_p``, ``max_tokens`` and ``logprobs``, and read each choice's
``prompt_token_ids``, ``token_ids`` and ``logprobs`` (``token_id:N`` tokens).
(TRL before 1.0 ran a FastAPI server of its own with ``POST /generate/``;
that protocol is not spoken here.)

So this sampler is the ``vllm-server`` sampler (HTTP, checks, response
validation: :mod:`.vllm_server`, :mod:`.http_client`, :mod:`.server_answers`)
with TRL's request body and one more check:
the server's logprobs mode, read from ``/server_info`` when the server has it
(a ``trl vllm-serve`` always does), else measured by the ``top_k=1`` request
the ``vllm-server`` sampler uses, must be ``processed_logprobs``. Processed
logprobs are those of the distribution the engine sampled from: after the
temperature and the top-k/top-p filters. The probe's trainer scores the same
tokens with logits divided by the same temperature and the same filters
(``--logprobs-mode processed_logprobs``, the default), so both sides are
like with like; a probe asking for raw logprobs is refused, since TRL's
server cannot return them. The manifest records the mode and where it was read.

The sampler's dtype is the server's, not the probe's ``--sampler-dtype``
(``trl vllm-serve --dtype`` decided it at launch): it is read from
``/server_info`` (``model_config.dtype``, the dtype vLLM resolved ``auto``
to), and recorded as ``unknown`` where the server has no ``/server_info``.
"""

from __future__ import annotations

from typing import Any

from mismatchscope.errors import SamplerError, UsageError
from mismatchscope.probe.samplers.server_answers import answer_field
from mismatchscope.probe.samplers.vllm_server import VLLMServerSampler
from mismatchscope.probe.types import SamplingConfig

from ...documents import json_edge

TRL_LOGPROBS_MODE = "processed_logprobs"
"""what ``trl vllm-serve`` launches vLLM with (``build_command``): the logprobs TRL's trainers correct with."""


class TRLServerSampler(VLLMServerSampler):
    """Samples from ``trl vllm-serve`` at ``cfg.url`` with TRL's own request."""

    name = "trl-server"

    def _check_logprobs_mode(self, prompt: list[int], sampling: SamplingConfig) -> None:
        if sampling.logprobs_mode != TRL_LOGPROBS_MODE:
            raise UsageError(
                f"trl vllm-serve returns {TRL_LOGPROBS_MODE} (TRL launches vLLM with it); "
                f"the probe asks for {sampling.logprobs_mode}",
                hint=f"probe with --logprobs-mode {TRL_LOGPROBS_MODE}",
            )
        served = self._server_info_mode()
        if served is None:  # not in dev mode: measure it as the vllm-server sampler does
            super()._check_logprobs_mode(prompt, sampling)
            self._checks["logprobs_mode_source"] = "measured: a top_k=1 request returns 0.0 when processed"
            return
        self._checks["logprobs_mode"] = served
        self._checks["logprobs_mode_source"] = "GET /server_info: model_config.logprobs_mode"
        if served != TRL_LOGPROBS_MODE:
            raise UsageError(
                f"the server returns {served}, not the {TRL_LOGPROBS_MODE} trl vllm-serve launches with: "
                "it was not started by trl vllm-serve",
                hint="start it with `trl vllm-serve --model DIR`, or probe it with --sampler vllm-server",
            )

    def _server_info_mode(self) -> str | None:
        """``model_config.logprobs_mode`` from the dev-mode ``/server_info`` (None where the server has none)."""
        model = self._model_config()
        if model is None:
            return None
        mode = model.get("logprobs_mode")
        if not isinstance(mode, str):
            raise SamplerError(f"GET /server_info: vllm_config.model_config.logprobs_mode is {mode!r}, not a mode name")
        return mode

    @json_edge
    def _model_config(self) -> dict[str, Any] | None:
        """``vllm_config.model_config`` of the dev-mode ``/server_info``, asked once (None where there is none)."""
        if "server_info" in self._checks:
            return self._server_model
        answer = self.http.call("GET", "/server_info?config_format=json", missing_ok=True)
        self._server_model: dict[str, Any] | None = None
        if answer is None:
            self._checks["server_info"] = "absent (the server is not in VLLM_SERVER_DEV_MODE, as trl vllm-serve sets)"
            return None
        where = "GET /server_info"
        config = answer_field(answer, "vllm_config", dict, where)
        self._server_model = answer_field(config, "model_config", dict, f"{where}: vllm_config")
        self._checks["server_info"] = "present"
        return self._server_model

    def served_dtype(self) -> str:
        """The dtype the server runs (``model_config.dtype``, ``torch.bfloat16`` read as ``bfloat16``), or
        ``unknown``: never the probe's ``--sampler-dtype``, which a running server did not see."""
        model = self._model_config()
        dtype = None if model is None else model.get("dtype")
        if not isinstance(dtype, str) or not dtype.strip():
            return "unknown"
        return dtype.strip().removeprefix("torch.")

    @json_edge
    def _body(self, prompts: list[list[int]], sampling: SamplingConfig, n: int) -> dict[str, Any]:
        """``VLLMClient.generate``'s payload, plus the probe's seed and the penalties spelled out."""
        body = super()._body(prompts, sampling, n)
        body["top_k"] = sampling.top_k if sampling.top_k and sampling.top_k > 0 else 0
        return body

    @json_edge
    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["engine"] = "trl-server"
        out["dtype"] = self.served_dtype()
        out["dtype_source"] = (
            "GET /server_info: model_config.dtype" if out["dtype"] != "unknown" else "not reported by the server"
        )
        out["protocol"] = "trl vllm-serve (TRL 1.x): POST /v1/completions as trl.generation.vllm_client.VLLMClient"
        out["logprobs_mode"] = self._checks.get("logprobs_mode")
        out["logprobs_mode_note"] = (
            "trl vllm-serve forces processed logprobs (after temperature and top-k/top-p); the trainer scores "
            "with the same temperature and filters"
        )
        return out
