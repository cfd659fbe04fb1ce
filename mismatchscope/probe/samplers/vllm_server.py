"""The ``vllm-server`` sampler: a running vLLM OpenAI-compatible server.

This is the setup of most RL frameworks (the rollout workers are servers),
and it adds the HTTP layer's own ways to differ: default sampling values the
server takes from ``generation_config.json``, a ``--logprobs-mode`` fixed at
launch, a tokenizer of its own. So before sampling, this sampler checks that

* the server serves this checkpoint (``GET /v1/models``);
* its tokenizer gives our ids for the prompts (``POST /tokenize``, when the
  server has it);
* its logprobs mode is the one asked for: one request with ``top_k=1``
  returns exactly 0.0 for processed logprobs (one token kept) and a negative
  number for raw ones;

and every request spells out the neutral penalties, so server defaults
cannot change the distribution. Prompts go as token ids; tokens come back as
``token_id:N`` with their ids, so nothing is re-tokenised.

MoE routes: a server started with ``--enable-return-routed-experts`` (vLLM
0.22 and later) puts ``routed_experts`` on every choice, a base64 ``.npy``
array ``[prompt + completion - 1, decoder layers, top_k]`` (the request's
``routed_experts_prompt_start`` is left at 0: every prompt row). Nothing in
the request turns it on; the sampler reads it where the server sends it,
decodes and checks it as ``import --routes-format vllm`` does, and says in
one line why where the server sends none.

HTTP goes through :mod:`.http_client` (the API key is read from the
environment variable ``cfg.api_key_env`` at each request and is never stored,
logged or described); every answer is checked by :mod:`.server_answers`
before it is used. ``engine_args`` are added to every completion request body
(a server's engine options are fixed at launch), except ``model`` (the
served model name to use, skipping the name check) and ``timeout``
(seconds per HTTP request, default 600).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from mismatchscope.errors import (
    CheckpointError,
    SamplerError,
    TokenizerMismatchError,
    UsageError,
)
from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.engine_checks import check_server_engine_args, server_timeout
from mismatchscope.probe.samplers.base import check_prompts, manifest_safe, request_layout, sample_index
from mismatchscope.probe.samplers.http_client import JsonClient
from mismatchscope.probe.samplers.server_answers import (
    answer_field,
    checked_choices,
    completion_of,
    int_list,
    numbers,
    require,
    short,
)
from mismatchscope.probe.types import Completion, SamplerConfig, SamplingConfig
from mismatchscope.progress import Advance
from mismatchscope.redact import (
    redact_obj,
    redact_url,
)

from ...documents import json_edge

PROMPTS_PER_REQUEST = 32
"""prompts per ``/v1/completions`` call: keeps bodies small and gives progress.
Each prompt is its own engine request with its own seed, so the split does not
change what is sampled."""
NEUTRAL = {
    "repetition_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "min_p": 0.0,
    "min_tokens": 0,
}
RESERVED = ("model", "timeout")


class VLLMServerSampler:
    """Samples from a vLLM server at ``cfg.url``."""

    name = "vllm-server"

    def __init__(self, cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None):
        if not cfg.url:
            raise UsageError("the vllm-server sampler needs the server's URL", hint="pass --url http://HOST:PORT")
        self.cfg = cfg
        self.info = info
        check_server_engine_args(cfg.engine_args)  # the probe checked them already; direct callers too
        self.http = JsonClient(cfg.url, cfg.api_key_env, server_timeout(cfg.engine_args))
        self.extra = {k: v for k, v in cfg.engine_args.items() if k not in RESERVED}
        self.model_card = self._served_model(cfg.engine_args.get("model"))
        self.model = str(self.model_card["id"])
        self._tokenizer = None
        self._checks: dict[str, Any] = {}
        self._version = self._server_version()
        self._routes = _ServerRoutes.plan(info)

    def _server_version(self) -> str | None:
        try:
            answer = self.http.call("GET", "/version", missing_ok=True)
        except SamplerError:
            return None
        return answer.get("version") if isinstance(answer, dict) else None

    # ------------------------------------------------------------ checks

    @json_edge
    def _served_model(self, wanted: str | None) -> dict[str, Any]:
        """The model card to use: the one named in engine_args, else the server's only base model,
        which must be this checkpoint (same folder name)."""
        answer = self.http.call("GET", "/v1/models")
        data = answer_field(answer, "data", list, "GET /v1/models")
        for i, c in enumerate(data):
            require(c, dict, f"GET /v1/models: data[{i}]")
            if not isinstance(c.get("id"), str):
                raise SamplerError(f"GET /v1/models: data[{i}].id is missing or not a string")
        cards = [c for c in data if not c.get("parent")]
        names = [c.get("id") for c in cards]
        if wanted is not None:
            for card in cards:
                if card.get("id") == wanted:
                    return card
            raise UsageError(f"the server at {self.http.base} does not serve {wanted!r}; it serves {names}")
        if len(cards) != 1:
            raise UsageError(
                f"the server at {self.http.base} serves {names}; say which one is this checkpoint",
                hint="pass --engine-arg model=NAME",
            )
        card = cards[0]
        ours = self.info.path.resolve().name
        theirs = {Path(str(card.get(f) or "")).name for f in ("root", "id")}
        if ours not in theirs:
            raise CheckpointError(
                f"the server at {self.http.base} serves {card.get('id')!r} (from {card.get('root')!r}), "
                f"not the checkpoint {ours!r}",
                hint="start the server on the same checkpoint, or pass --engine-arg model=NAME if "
                "it is the same one under another name",
            )
        served_len = card.get("max_model_len")
        if isinstance(served_len, int) and served_len > self.info.max_model_len:
            raise UsageError(
                f"the server's max_model_len {served_len} exceeds the checkpoint's {self.info.max_model_len}"
            )
        return card

    def _check_tokenizer(self, prompts: list[list[int]]) -> None:
        """The server's tokenizer must give our ids for the text of each prompt (``/tokenize``)."""
        from mismatchscope.probe.tokenizer import load_tokenizer

        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.info.path)
        tok = self._tokenizer
        checked = 0
        for i, ids in enumerate(prompts):
            text = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            ours = tok.encode(text, add_special_tokens=False)
            answer = self.http.call(
                "POST",
                "/tokenize",
                {"model": self.model, "prompt": text, "add_special_tokens": False},
                missing_ok=True,
            )
            if answer is None:
                self._checks["tokenizer"] = "not checked: the server has no /tokenize"
                return
            theirs = int_list(answer_field(answer, "tokens", list, "POST /tokenize"), "POST /tokenize: tokens")
            if theirs != ours:
                raise TokenizerMismatchError(
                    f"the server tokenizes prompt {i} ({text[:60]!r}) as {theirs[:20]} but the checkpoint's "
                    f"tokenizer gives {ours[:20]}",
                    hint="start the server with the checkpoint's own tokenizer (--tokenizer)",
                )
            checked += 1
        self._checks["tokenizer"] = f"same ids for {checked} prompts"

    def _check_logprobs_mode(self, prompt: list[int], sampling: SamplingConfig) -> None:
        """With top_k=1 a processed-logprobs server returns exactly 0.0; a raw one a negative number."""
        answer = self.http.call(
            "POST",
            "/v1/completions",
            {
                "model": self.model,
                "prompt": [prompt],
                "max_tokens": 4,
                "temperature": 1.0,
                "top_k": 1,
                "top_p": 1.0,
                "logprobs": 0,
                "seed": 0,
                "return_tokens_as_token_ids": True,
                **NEUTRAL,
            },
        )
        served = _served_mode(answer)
        self._checks["logprobs_mode"] = served
        if served != sampling.logprobs_mode:
            raise UsageError(
                f"the server returns {served} but the probe asks for {sampling.logprobs_mode}",
                hint=f"restart the server with --logprobs-mode {sampling.logprobs_mode}, or change the probe's mode",
            )

    # ------------------------------------------------------------ sampling

    def sample(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        on_progress: Advance | None = None,
    ) -> list[Completion]:
        check_prompts(prompts, sampling)
        if "tokenizer" not in self._checks:
            self._check_tokenizer(prompts)
        if self._checks.get("logprobs_mode") != sampling.logprobs_mode:
            self._check_logprobs_mode(prompts[0], sampling)
        layout, per_request_n = request_layout(len(prompts), sampling)
        completions: list[Completion] = []
        for start in range(0, len(layout), PROMPTS_PER_REQUEST):
            batch = layout[start : start + PROMPTS_PER_REQUEST]
            body = self._body([prompts[p] for p in batch], sampling, per_request_n)
            choices = checked_choices(self.http.call("POST", "/v1/completions", body))
            if len(choices) != len(batch) * per_request_n:
                raise SamplerError(
                    f"the server returned {len(choices)} choices for {len(batch)} prompts x n={per_request_n}"
                )
            for i, choice in enumerate(choices):  # vLLM numbers them prompt * n + sample
                j, out = start + i // per_request_n, i % per_request_n
                index = sample_index(j, out, sampling, per_request_n)
                c = completion_of(layout[j], index, choice, sampling.top_k_logprobs, self.info.vocab_size)
                c.routes = self._routes.read(choice, len(prompts[layout[j]]), len(c.token_ids))
                completions.append(c)
            if on_progress is not None:
                on_progress(len(batch) * per_request_n)
        return completions

    @json_edge
    def _body(self, prompts: list[list[int]], sampling: SamplingConfig, n: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "n": n,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": sampling.top_k if sampling.top_k and sampling.top_k > 0 else 0,
            "seed": sampling.seed,
            "logprobs": sampling.top_k_logprobs,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            **NEUTRAL,
            **self.extra,
        }

    def routes_status(self):
        """The server's expert ids (never gate weights) where it returned them; else why not."""
        return self._routes.status()

    @json_edge
    def describe(self) -> dict[str, Any]:
        """Server URL, version, served model and the checks that ran (no API key, ever): every text the server
        sent is recorded through ``redact_obj``, as a server may echo the key or a URL with credentials."""
        return redact_obj(
            {
                "engine": "vllm-server",
                "version": self._version,
                "url": redact_url(self.http.base),
                "model": self.model,
                "model_root": self.model_card.get("root"),
                "max_model_len": self.model_card.get("max_model_len"),
                "requested_dtype": self.cfg.dtype,
                "dtype": None,  # not visible over HTTP: the server's launch flags decide it
                "request_extras": manifest_safe(self.extra),
                "api_key_env": self.cfg.api_key_env,
                "api_key_set": bool(os.environ.get(self.cfg.api_key_env)),
                "checks": dict(self._checks),
            }
        )

    def close(self) -> None:
        """Nothing to release: the server belongs to whoever started it."""


def _served_mode(answer: Any) -> str:
    """The logprobs mode a top_k=1 answer shows: processed logprobs are exactly 0.0, raw ones negative."""
    where = "POST /v1/completions (logprobs-mode check)"
    choices = answer_field(answer, "choices", list, where)
    if not choices:
        raise SamplerError(f"{where}: choices is empty")
    lp = answer_field(require(choices[0], dict, f"{where}: choices[0]"), "logprobs", dict, f"{where}: choices[0]")
    values = [
        v
        for v in numbers(
            answer_field(lp, "token_logprobs", list, f"{where}: choices[0].logprobs"),
            f"{where}: choices[0].logprobs.token_logprobs",
        )
        if v is not None
    ]
    if any(v > 0 for v in values):
        served = "a logits mode"
    elif values and all(v == 0.0 for v in values):
        served = "processed_logprobs"
    else:
        served = "raw_logprobs"
    return served


class _ServerRoutes:
    """Reads each choice's ``routed_experts`` for an MoE checkpoint whose router family is known."""

    NOT_RETURNED = (
        "the vLLM server returned no routed_experts: start it (vLLM 0.22 or later) with "
        "--enable-return-routed-experts, which needs Model Runner V2 and prefix caching (GPU builds)"
    )

    def __init__(self, model: Any = None, moe_layers: tuple[int, ...] = (), why: str | None = None):
        self.model = model
        self.moe_layers = moe_layers
        self.why = why
        self.returned = 0
        self.missing = 0

    @classmethod
    def plan(cls, info: CheckpointInfo) -> _ServerRoutes:
        if not info.is_moe:
            return cls()
        from mismatchscope.importers.routes_model import RoutesModel
        from mismatchscope.probe.routes import model_type_of, unknown_family
        from mismatchscope.routing.families import family_for

        if family_for(model_type_of(info)) is None:
            return cls(why=unknown_family(info))
        try:
            model = RoutesModel.from_config(info.config, where=str(info.path / "config.json"))
        except UsageError as e:
            return cls(why=f"its config does not say how it routes ({e})")
        return cls(model, model.moe_layers)

    def read(self, choice: dict, prompt_len: int, completion_len: int):
        """The choice's routes over the MoE layers (:class:`~mismatchscope.routing.io.SeqRoutes`), or None."""
        if self.model is None:
            return None
        value = choice.get("routed_experts")
        if value is None:
            self.missing += 1
            return None
        from mismatchscope.errors import ImportFormatError
        from mismatchscope.importers.route_checks import check_routes
        from mismatchscope.importers.route_sources import decode_vllm
        from mismatchscope.routing.io import SeqRoutes

        where = f"POST /v1/completions: choices[{choice['index']}].routed_experts"
        if not isinstance(value, str):
            raise SamplerError(f"{where} should be a base64 .npy string, got {short(value)}")
        try:
            decoded = decode_vllm({"routed_experts": value}, self.model, prompt_len)
            checked = check_routes(decoded, self.model, prompt_len, completion_len)
        except ImportFormatError as e:  # the decoder names the field itself: its reason follows ours alone
            reason = e.reason.removeprefix("routed_experts: ").removeprefix("routed_experts ")
            raise SamplerError(f"{where}: {reason}", hint="is the server serving another model?") from None
        if checked.start != 0:
            raise SamplerError(f"{where}: routes start at input position {checked.start}, not 0")
        self.returned += 1
        # a failed capture stays all zeros, which every reader counts as missing (never expert 0)
        ids = np.where(checked.present[:, :, None], checked.ids, 0)[:, list(self.moe_layers)]
        return SeqRoutes(ids.astype(np.int64))

    def status(self):
        from mismatchscope.routing.layout import SideRoutes

        if self.model is None:
            return SideRoutes(False, why=self.why)
        if not self.returned:
            return SideRoutes(False, why=self.NOT_RETURNED)
        return SideRoutes(True, weights=False)
