"""What a vLLM server's answers must hold, checked field by field before anything is used.

A proxy, or a server of another version that answers differently, stops the
probe with the field's name and what was there, never with a KeyError deep in
the parsing; a value that cannot be what the field says (a positive logprob, a
token id outside the vocabulary, a top-k list without the sampled token) is
refused rather than recorded. :func:`completion_of` turns one checked choice
into a :class:`~mismatchscope.probe.types.Completion`.
"""

from __future__ import annotations

import math
from typing import Any

from mismatchscope.errors import SamplerError
from mismatchscope.probe.samplers.base import from_sentinel, split_topk
from mismatchscope.probe.types import Completion
from mismatchscope.redact import redact
from mismatchscope.schema import POSITIVE_LOGPROB_TOLERANCE


def short(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


_KINDS = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


def require(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        got = "missing" if value is None else f"{type(value).__name__} {short(value)}"
        raise SamplerError(f"{where} should be {_KINDS.get(kind, kind.__name__)}, got {got}")
    return value


def answer_field(obj: Any, key: str, kind: type, where: str) -> Any:
    require(obj, dict, f"{where}: the answer")
    if key not in obj:
        said = obj.get("message") or obj.get("error")
        said = f" (the server says: {' '.join(redact(str(said))[:200].split())})" if said else ""
        raise SamplerError(f"{where}: the answer has no field {key!r}{said}")
    return require(obj[key], kind, f"{where}: {key}")


def numbers(values: list, where: str) -> list:
    for i, v in enumerate(values):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v)):
            raise SamplerError(f"{where}[{i}] should be a number, got {short(v)}")
    return values


def int_list(values: list, where: str) -> list[int]:
    for i, v in enumerate(values):
        require(v, int, f"{where}[{i}]")
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
            raise SamplerError(f"{where}[{i}] should be a number, got {'null' if v is None else short(v)}")
        if v > POSITIVE_LOGPROB_TOLERANCE:
            raise SamplerError(
                f"{where}[{i}] is {v:g}, which is not a logprob (logprobs are <= 0)",
                hint="is the server in a logits --logprobs-mode?",
            )
    return values


def checked_choices(answer: Any) -> list[dict]:
    """The choices of a completions answer, in index order, each checked field by field."""
    where = "POST /v1/completions"
    choices = answer_field(answer, "choices", list, where)
    for i, c in enumerate(choices):
        require(c, dict, f"{where}: choices[{i}]")
        require(c.get("index"), int, f"{where}: choices[{i}].index")
        lp = require(c.get("logprobs"), dict, f"{where}: choices[{i}].logprobs")
        ctx = f"{where}: choices[{i}].logprobs"
        tokens = require(lp.get("tokens"), list, f"{ctx}.tokens")
        values = _logprobs(require(lp.get("token_logprobs"), list, f"{ctx}.token_logprobs"), f"{ctx}.token_logprobs")
        if len(values) != len(tokens):
            raise SamplerError(f"{ctx}: {len(tokens)} tokens but {len(values)} token_logprobs")
        tops = lp.get("top_logprobs")
        if tops is not None:
            require(tops, list, f"{ctx}.top_logprobs")
            if len(tops) != len(tokens):
                raise SamplerError(f"{ctx}: {len(tokens)} tokens but {len(tops)} top_logprobs")
            for j, top in enumerate(tops):
                if top is not None:
                    require(top, dict, f"{ctx}.top_logprobs[{j}]")
                    _logprobs(list(top.values()), f"{ctx}.top_logprobs[{j}] values", none_ok=True)
        if c.get("token_ids") is not None:
            int_list(
                require(c["token_ids"], list, f"{where}: choices[{i}].token_ids"), f"{where}: choices[{i}].token_ids"
            )
    indices = sorted(c["index"] for c in choices)
    if indices != list(range(len(choices))):
        raise SamplerError(
            f"{where}: choices[].index should number the choices 0..{len(choices) - 1}, got {indices[:10]}"
        )
    return sorted(choices, key=lambda c: c["index"])


def completion_of(
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


def _token_id(token: Any, where: str, vocab_size: int | None = None) -> int:
    if not isinstance(token, str) or not token.startswith("token_id:"):
        raise SamplerError(
            f"{where}: the server returned token {short(token)}, not 'token_id:N': it ignored return_tokens_as_token_ids"
        )
    try:
        token_id = int(token.split(":", 1)[1])
    except ValueError:
        raise SamplerError(f"{where}: {short(token)} does not end in an integer id") from None
    check_id(token_id, where, vocab_size, short(token))
    return token_id


def check_id(token_id: int, where: str, vocab_size: int | None, shown: str | None = None) -> None:
    """A token id the model has: a negative or too large one would fail far away (Parquet, the trainer)."""
    if token_id < 0 or (vocab_size is not None and token_id >= vocab_size):
        bound = f"0..{vocab_size - 1}" if vocab_size is not None else "non-negative"
        raise SamplerError(
            f"{where}: {shown or token_id} is not a token id of the model ({bound})",
            hint="is the server serving another model or tokenizer?",
        )
