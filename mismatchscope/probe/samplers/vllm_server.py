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

Only the stdlib is used for HTTP. The API key is read from the environment
variable ``cfg.api_key_env`` at each request and is never stored, logged or
described. ``engine_args`` are added to every completion request body
(a server's engine options are fixed at launch), except ``model`` (the
served model name to use, skipping the name check) and ``timeout``
(seconds per HTTP request, default 600).
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from mismatchscope.errors import (
    CheckpointError,
    SamplerConnectionError,
    SamplerError,
    TokenizerMismatchError,
    UsageError,
)
from mismatchscope.probe.checkpoint import CheckpointInfo
from mismatchscope.probe.options import SERVER_TIMEOUT_S, check_server_engine_args, server_timeout
from mismatchscope.probe.samplers.base import (
    ProgressFn,
    check_prompts,
    from_sentinel,
    manifest_safe,
    request_layout,
    sample_index,
    split_topk,
)
from mismatchscope.probe.types import Completion, SamplerConfig, SamplingConfig
from mismatchscope.redact import (
    excerpt,
    redact,
    redact_obj,
    redact_url,
    register_secret,
    register_userinfo,
    split_userinfo,
)
from mismatchscope.schema import POSITIVE_LOGPROB_TOLERANCE

DEFAULT_TIMEOUT = SERVER_TIMEOUT_S
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
ERROR_BODY_BYTES = 64 * 1024
"""how much of an error answer is read: enough to redact around what is shown, not a 50 MB page."""
ERROR_DETAIL_CHARS = 500
"""how much of an error answer is shown."""


class VLLMServerSampler:
    """Samples from a vLLM server at ``cfg.url``."""

    name = "vllm-server"

    def __init__(self, cfg: SamplerConfig, info: CheckpointInfo, *, sampling: SamplingConfig | None = None):
        if not cfg.url:
            raise UsageError("the vllm-server sampler needs the server's URL", hint="pass --url http://HOST:PORT")
        self.cfg = cfg
        self.info = info
        bare, self._basic_auth = _split_credentials(cfg.url)  # the URL as given, for its error message
        self.base = _base_url(bare)
        self._opener = urllib.request.build_opener(_SameOriginRedirects)
        check_server_engine_args(cfg.engine_args)  # the probe checked them already; direct callers too
        self.timeout = server_timeout(cfg.engine_args)
        self.extra = {k: v for k, v in cfg.engine_args.items() if k not in RESERVED}
        self.model_card = self._served_model(cfg.engine_args.get("model"))
        self.model = str(self.model_card["id"])
        self._tokenizer = None
        self._checks: dict[str, Any] = {}
        self._version = self._server_version()
        self._routes = _ServerRoutes.plan(info)

    # ------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, body: dict | None = None, *, missing_ok: bool = False) -> Any:
        """One JSON request. Connection problems -> SamplerConnectionError; HTTP errors ->
        SamplerError (None for a 404 when ``missing_ok``)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        key = os.environ.get(self.cfg.api_key_env)
        secrets = [key] if key else []
        if key:
            register_secret(key)
            if not all(" " < c < "\x7f" for c in key):  # an HTTP header carries printable ASCII only
                raise UsageError(
                    f"the API key in ${self.cfg.api_key_env} holds a space, a line break or a character "
                    "outside printable ASCII, which an HTTP header cannot carry",
                    hint="check how the variable was set: a key read from a file often keeps its newline",
                )
            headers["Authorization"] = f"Bearer {key}"
        elif self._basic_auth:
            headers["Authorization"] = f"Basic {self._basic_auth}"
        if self._basic_auth:
            secrets.append(self._basic_auth)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            if missing_ok and exc.code == 404:
                return None
            if 300 <= exc.code < 400:
                raise _not_followed(method, self.base + path, exc, secrets) from None
            try:
                raw = exc.read(ERROR_BODY_BYTES + 1)
            except (OSError, http.client.HTTPException):
                raw = b""
            # A server may echo the request (headers included): never pass its text on unscrubbed.
            # Redacted before it is shortened, so a key across the cut is still seen whole.
            text = raw[:ERROR_BODY_BYTES].decode(errors="replace")
            detail = " ".join(excerpt(text, ERROR_DETAIL_CHARS, secrets, cut=len(raw) > ERROR_BODY_BYTES).split())
            hint = f"set the key in ${self.cfg.api_key_env}" if exc.code in (401, 403) else None
            raise SamplerError(f"{method} {self.base}{path} failed with HTTP {exc.code}: {detail}", hint=hint) from None
        except http.client.HTTPException as exc:
            raise SamplerError(
                f"{method} {self.base}{path}: the server's answer was cut short or garbled ({type(exc).__name__})"
            ) from None
        except TimeoutError:  # connected, then no answer in time (a connect timeout comes inside a URLError)
            raise SamplerError(
                f"{method} {self.base}{path}: the vLLM server did not answer within {self.timeout:g} s",
                hint="raise --engine-arg timeout=SECONDS (default 600), or check the server",
            ) from None
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            reason = redact(str(getattr(exc, "reason", exc)), secrets)
            raise SamplerConnectionError(
                f"cannot reach the vLLM server at {self.base}: {reason}",
                hint="start it (python -m vllm.entrypoints.openai.api_server --model DIR) or fix --url",
            ) from None
        try:
            return json.loads(payload)
        except (ValueError, RecursionError):
            size = f"{len(payload)} bytes" if payload else "an empty body"
            raise SamplerError(
                f"{method} {self.base}{path} answered with something that is not JSON ({size})"
            ) from None

    def _server_version(self) -> str | None:
        try:
            answer = self._call("GET", "/version", missing_ok=True)
        except SamplerError:
            return None
        return answer.get("version") if isinstance(answer, dict) else None

    # ------------------------------------------------------------ checks

    def _served_model(self, wanted: str | None) -> dict[str, Any]:
        """The model card to use: the one named in engine_args, else the server's only base model,
        which must be this checkpoint (same folder name)."""
        answer = self._call("GET", "/v1/models")
        data = _field(answer, "data", list, "GET /v1/models")
        for i, c in enumerate(data):
            _require(c, dict, f"GET /v1/models: data[{i}]")
            if not isinstance(c.get("id"), str):
                raise SamplerError(f"GET /v1/models: data[{i}].id is missing or not a string")
        cards = [c for c in data if not c.get("parent")]
        names = [c.get("id") for c in cards]
        if wanted is not None:
            for card in cards:
                if card.get("id") == wanted:
                    return card
            raise UsageError(f"the server at {self.base} does not serve {wanted!r}; it serves {names}")
        if len(cards) != 1:
            raise UsageError(
                f"the server at {self.base} serves {names}; say which one is this checkpoint",
                hint="pass --engine-arg model=NAME",
            )
        card = cards[0]
        ours = self.info.path.resolve().name
        theirs = {Path(str(card.get(f) or "")).name for f in ("root", "id")}
        if ours not in theirs:
            raise CheckpointError(
                f"the server at {self.base} serves {card.get('id')!r} (from {card.get('root')!r}), "
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
        from mismatchscope.probe.checkpoint import load_tokenizer

        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.info.path)
        tok = self._tokenizer
        checked = 0
        for i, ids in enumerate(prompts):
            text = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            ours = tok.encode(text, add_special_tokens=False)
            answer = self._call(
                "POST",
                "/tokenize",
                {"model": self.model, "prompt": text, "add_special_tokens": False},
                missing_ok=True,
            )
            if answer is None:
                self._checks["tokenizer"] = "not checked: the server has no /tokenize"
                return
            theirs = _int_list(_field(answer, "tokens", list, "POST /tokenize"), "POST /tokenize: tokens")
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
        answer = self._call(
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
        where = "POST /v1/completions (logprobs-mode check)"
        choices = _field(answer, "choices", list, where)
        if not choices:
            raise SamplerError(f"{where}: choices is empty")
        lp = _field(_require(choices[0], dict, f"{where}: choices[0]"), "logprobs", dict, f"{where}: choices[0]")
        values = [
            v
            for v in _numbers(
                _field(lp, "token_logprobs", list, f"{where}: choices[0].logprobs"),
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
        on_progress: ProgressFn | None = None,
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
            choices = _choices(self._call("POST", "/v1/completions", body))
            if len(choices) != len(batch) * per_request_n:
                raise SamplerError(
                    f"the server returned {len(choices)} choices for {len(batch)} prompts x n={per_request_n}"
                )
            for i, choice in enumerate(choices):  # vLLM numbers them prompt * n + sample
                j, out = start + i // per_request_n, i % per_request_n
                index = sample_index(j, out, sampling, per_request_n)
                c = _completion(layout[j], index, choice, sampling.top_k_logprobs, self.info.vocab_size)
                c.routes = self._routes.read(choice, len(prompts[layout[j]]), len(c.token_ids))
                completions.append(c)
            if on_progress is not None:
                on_progress(len(batch) * per_request_n)
        return completions

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

    def describe(self) -> dict[str, Any]:
        """Server URL, version, served model and the checks that ran (no API key, ever): every text the server
        sent is recorded through ``redact_obj``, as a server may echo the key or a URL with credentials."""
        return redact_obj(
            {
                "engine": "vllm-server",
                "version": self._version,
                "url": redact_url(self.base),
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
        from mismatchscope.importers.route_sources import DECODERS
        from mismatchscope.routing.io import SeqRoutes

        where = f"POST /v1/completions: choices[{choice['index']}].routed_experts"
        if not isinstance(value, str):
            raise SamplerError(f"{where} should be a base64 .npy string, got {_short(value)}")
        try:
            decoded = DECODERS["vllm"]({"routed_experts": value}, self.model, prompt_len)
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


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``http://user:pass@host`` -> (``http://host``, base64 of ``user:pass`` for a Basic header).

    The credentials never stay in the URL we print or record; they are sent as a header, and
    registered (the password alone too) so a server that echoes them is scrubbed. The userinfo
    runs to the URL's last '@' (:func:`~mismatchscope.redact.split_userinfo`); a '/', '?' or '#'
    before that '@' is refused, since a standard parser would send the request to another host
    and the password along as a path.
    """
    userinfo, bare = split_userinfo(url)
    if userinfo is None:
        return url, None
    register_userinfo(userinfo)
    if any(c in userinfo for c in "/?#"):
        raise UsageError(
            f"--url {redact_url(url)!r} is ambiguous: an '@' comes after a '/', '?' or '#'",
            hint="percent-encode '/', '?', '#' and '@' inside a user name or password as %2F, %3F, %23, %40",
        )
    creds = base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode() if userinfo else None
    return bare, creds


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only for a request without a body, to the same scheme, host and port.

    urllib would resend every header, ``Authorization`` included, to whatever host a server names;
    a redirected POST would come back as a GET without its body. Anything else is not followed
    and :func:`_not_followed` says so.
    """

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if req.data is not None or _origin(newurl) != _origin(req.full_url):
            return None  # urllib then raises the 3xx as an HTTPError
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        port = -1
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


def _not_followed(method: str, url: str, exc: urllib.error.HTTPError, secrets: list[str]) -> SamplerError:
    location = (exc.headers or {}).get("Location") or ""
    target = excerpt(redact_url(urllib.parse.urljoin(url, location)) or "", 200, secrets) if location else "nowhere"
    return SamplerError(
        f"{method} {url} was redirected (HTTP {exc.code}) to {target}, which is not followed: "
        "the credentials go only to --url",
        hint="pass the address the server redirects to as --url",
    )


_without_credentials = redact_url
"""kept under its old name: the URL as the manifest records it."""


def _base_url(url: str) -> str:
    base = url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _token_id(token: Any, where: str, vocab_size: int | None = None) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise SamplerError(
            f"{where}: the server returned token {_short(token)}, not 'token_id:N': it ignored return_tokens_as_token_ids"
        )
    try:
        token_id = int(token.split(":", 1)[1])
    except ValueError:
        raise SamplerError(f"{where}: {_short(token)} does not end in an integer id") from None
    _check_id(token_id, where, vocab_size, _short(token))
    return token_id


def _check_id(token_id: int, where: str, vocab_size: int | None, shown: str | None = None) -> None:
    """A token id the model has: a negative or too large one would fail far away (Parquet, the trainer)."""
    if token_id < 0 or (vocab_size is not None and token_id >= vocab_size):
        bound = f"0..{vocab_size - 1}" if vocab_size is not None else "non-negative"
        raise SamplerError(
            f"{where}: {shown or token_id} is not a token id of the model ({bound})",
            hint="is the server serving another model or tokenizer?",
        )


# ---------------------------------------------------------------- answer shape
# Every field of a server answer is checked before it is used, so a proxy or a
# server of another version that answers differently stops the probe with the
# field's name, not with a KeyError deep in the parsing.


def _short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def _require(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        got = "missing" if value is None else f"{type(value).__name__} {_short(value)}"
        raise SamplerError(f"{where} should be {_KINDS.get(kind, kind.__name__)}, got {got}")
    return value


def _field(obj: Any, key: str, kind: type, where: str) -> Any:
    _require(obj, dict, f"{where}: the answer")
    if key not in obj:
        said = obj.get("message") or obj.get("error")
        said = f" (the server says: {' '.join(redact(str(said))[:200].split())})" if said else ""
        raise SamplerError(f"{where}: the answer has no field {key!r}{said}")
    return _require(obj[key], kind, f"{where}: {key}")


def _numbers(values: list, where: str) -> list:
    for i, v in enumerate(values):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)):
            raise SamplerError(f"{where}[{i}] should be a number, got {_short(v)}")
    return values


def _int_list(values: list, where: str) -> list[int]:
    for i, v in enumerate(values):
        _require(v, int, f"{where}[{i}]")
    return values


def _logprobs(values: list, where: str, *, none_ok: bool = False) -> list:
    """Logprobs of sampled or listed tokens: numbers <= 0 (to rounding), or -inf.

    vLLM writes -inf as -9999.0 (``from_sentinel``); a literal ``-Infinity`` means
    the same. ``Infinity``, NaN or a clearly positive value (a logit, a
    probability above 1) cannot be a logprob and would otherwise be recorded.
    ``None`` is accepted only where vLLM writes it (``none_ok``: top-k values).
    """
    for i, v in enumerate(values):
        if v is None and none_ok:
            continue
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise SamplerError(f"{where}[{i}] should be a number, got {'null' if v is None else _short(v)}")
        if v > POSITIVE_LOGPROB_TOLERANCE:
            raise SamplerError(
                f"{where}[{i}] is {v:g}, which is not a logprob (logprobs are <= 0)",
                hint="is the server in a logits --logprobs-mode?",
            )
    return values


def _choices(answer: Any) -> list[dict]:
    """The choices of a completions answer, in index order, each checked field by field."""
    where = "POST /v1/completions"
    choices = _field(answer, "choices", list, where)
    for i, c in enumerate(choices):
        _require(c, dict, f"{where}: choices[{i}]")
        _require(c.get("index"), int, f"{where}: choices[{i}].index")
        lp = _require(c.get("logprobs"), dict, f"{where}: choices[{i}].logprobs")
        ctx = f"{where}: choices[{i}].logprobs"
        tokens = _require(lp.get("tokens"), list, f"{ctx}.tokens")
        values = _logprobs(_require(lp.get("token_logprobs"), list, f"{ctx}.token_logprobs"), f"{ctx}.token_logprobs")
        if len(values) != len(tokens):
            raise SamplerError(f"{ctx}: {len(tokens)} tokens but {len(values)} token_logprobs")
        tops = lp.get("top_logprobs")
        if tops is not None:
            _require(tops, list, f"{ctx}.top_logprobs")
            if len(tops) != len(tokens):
                raise SamplerError(f"{ctx}: {len(tokens)} tokens but {len(tops)} top_logprobs")
            for j, top in enumerate(tops):
                if top is not None:
                    _require(top, dict, f"{ctx}.top_logprobs[{j}]")
                    _logprobs(list(top.values()), f"{ctx}.top_logprobs[{j}] values", none_ok=True)
        if c.get("token_ids") is not None:
            _int_list(
                _require(c["token_ids"], list, f"{where}: choices[{i}].token_ids"), f"{where}: choices[{i}].token_ids"
            )
    indices = sorted(c["index"] for c in choices)
    if indices != list(range(len(choices))):
        raise SamplerError(
            f"{where}: choices[].index should number the choices 0..{len(choices) - 1}, got {indices[:10]}"
        )
    return sorted(choices, key=lambda c: c["index"])


def _completion(
    prompt_index: int, sample_index: int, choice: dict, k: int, vocab_size: int | None = None
) -> Completion:
    where = f"POST /v1/completions: choices[{choice['index']}]"
    lp = choice["logprobs"]
    tokens = [_token_id(t, f"{where}.logprobs.tokens", vocab_size) for t in lp["tokens"]]
    ids = choice.get("token_ids")
    if ids is not None and list(ids) != tokens:
        raise SamplerError(f"{where}: token_ids and logprobs.tokens disagree")
    sampled, top_ids, top_lps = [], [], []
    values = lp["token_logprobs"]
    tops: list[dict[str, Any] | None] = lp.get("top_logprobs") or [None] * len(tokens)
    for j, (token, value, top) in enumerate(zip(tokens, values, tops, strict=True)):
        if top is not None and not top and k > 0:  # asked for top-k: vLLM lists at least the sampled token
            raise SamplerError(
                f"{where}.logprobs.top_logprobs[{j}] is empty, but {k} top logprobs were asked for "
                f"(it should list the sampled token {token}, tokens[{j}])"
            )
        if top:
            entries = [
                (_token_id(t, f"{where}.logprobs.top_logprobs[{j}]", vocab_size), from_sentinel(v), None)
                for t, v in top.items()
            ]
            if token not in {e[0] for e in entries}:  # vLLM always lists the sampled token
                raise SamplerError(
                    f"{where}.logprobs.top_logprobs[{j}] does not list the sampled token {token} (tokens[{j}])"
                )
        else:
            entries = [(token, from_sentinel(value), None)]
        _, t_ids, t_lps = split_topk(token, entries, k)
        sampled.append(from_sentinel(value))
        top_ids.append(t_ids)
        top_lps.append(t_lps)
    return Completion(
        prompt_index=prompt_index,
        sample_index=sample_index,
        token_ids=tokens,
        sampler_logprobs=sampled,
        topk_ids=top_ids,
        topk_logprobs=top_lps,
        finish_reason=redact(choice["finish_reason"]) if isinstance(choice.get("finish_reason"), str) else None,
    )
