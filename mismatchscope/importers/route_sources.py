"""One decoder per route encoding an engine or RL stack writes: bytes or lists in, a ``[rows, layers, k]`` array out.

Each decoder reads one routes record (one sequence: ``prompt_token_ids``,
``completion_token_ids`` and the source's own route field) and returns the
rows it covers, the first input position they start at, and whether its layer
axis is every decoder layer or the MoE layers only. Checking those rows
against the model (``route_checks``) is the same for every source.

Each decoder implements :class:`RouteDecoder` (``decoder(record, model, prompt_length) -> Decoded``, raising
ImportFormatError on a value it cannot read) and is registered under its ``--routes-format`` name in
``registry.ROUTE_ENCODINGS``; a stack whose own dump holds the routes reads them there through a module implementing
:class:`DumpRoutes`. Encodings, from each project's code (docs/import.md tabulates them):

* ``sglang``: ``meta_info["routed_experts"]`` (the OpenAI server's
  ``choice.sglext.routed_experts``; either nesting, or the bare field): base64 of raw int32 with no
  shape, ``(len(tokens) - 1 - start, num_hidden_layers, top_k)``.
* ``vllm``: ``CompletionOutput.routed_experts`` (an array, uint8/uint16/int32)
  or the HTTP choice's base64 ``.npy``; ``[len(tokens) - 1 - start, layers, k]``.
* ``vllm-0.21``: ``prompt_routed_experts`` ``[prompt_len, moe_layers, k]`` plus
  the choice's ``routed_experts`` ``[completion_len, moe_layers, k]``, int16
  nested lists indexed by MoE ordinal.
* ``verl``: one sample of the batch key ``routed_experts``,
  ``[padded_prompt + response, layers, k]`` int16, left-padded: the record
  gives ``prompt_pad``, the batch's padded prompt width.
* ``slime``: ``Sample.rollout_routed_experts``, ``(len(tokens) - 1, layers, k)``
  int32 (lists, or the SGLang base64 string before slime decoded it).
* ``skyrl``: one batch row of ``rollout_expert_indices`` over its real tokens,
  ``[len(tokens), layers, k]`` (uint8/int16/int32), with ``uncaptured``: the
  rows ``router_padding_mask`` marks, which hold SkyRL's dummy route (experts
  ``0..k-1``) and are missing (read in place, :mod:`.skyrl_routes`).
* ``prime-rl``: ``{"data": base64, "shape", "start", "dtype"}``; a last axis
  of ``2 * top_k`` int32 is Total Router Recall: ids, then the float32 bits
  of the gate weights.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..documents import json_edge
from ..errors import ImportFormatError
from .routes_model import RoutesModel

DECODER_LAYERS = "decoder"
MOE_ORDINALS = "moe"


@dataclass
class Decoded:
    """One sequence's routes as the source laid them out (layer axis not yet mapped)."""

    ids: np.ndarray
    """``[rows, source layers, k]`` int32 (signed: a negative id is an error to report, not to wrap)."""
    start: int
    """input position of the first row."""
    layer_axis: str | None = None
    """:data:`MOE_ORDINALS` where the encoding fixes it, else None: told apart by the layer count."""
    weights: np.ndarray | None = None
    """``[rows, source layers, k]`` float32 gate weights, where the source gives them."""
    uncaptured: np.ndarray | None = None
    """``[rows]`` bool: rows the source itself marks as not captured (SkyRL's ``router_padding_mask``): missing,
    whatever ids they hold."""


class RouteDecoder(Protocol):
    """One ``--routes-format`` encoding: one routes record (one sequence) in, its rows as the source laid them out."""

    def __call__(self, rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded: ...


class DumpRoutes(Protocol):
    """Routes read in place from a stack's own dump (no routes file), one record per batch row."""

    def is_dump(self, src: Path) -> bool: ...

    def files(self, src: Path) -> list[tuple[Path, str]]: ...

    @json_edge
    def records(self, path: Path, rel: str, trust_pickle: bool) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]: ...


def _field(rec: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if rec.get(name) is not None:
            return rec[name]
    raise ImportFormatError(
        f"no {' or '.join(repr(n) for n in names)} field (the record has: {', '.join(sorted(rec)[:15])})"
    )


def _start(rec: Mapping[str, Any], *names: str) -> int:
    for name in names:
        v = rec.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ImportFormatError(f"{name} is {v!r}, not a non-negative integer")
            return v
    return 0


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ImportFormatError(f"{what} is not valid base64") from None


def _ids_array(value: Any, what: str) -> np.ndarray:
    """Nested lists or an array of integers, as a 3-D int32 array."""
    try:
        arr = np.asarray(value)
    except ValueError:
        raise ImportFormatError(f"{what}: ragged nested lists (rows of different lengths)") from None
    if arr.size == 0:
        arr = arr.reshape(0, 0, 0) if arr.ndim != 3 else arr
    if arr.ndim != 3:
        raise ImportFormatError(f"{what} has {arr.ndim} axes; expected [tokens, layers, top_k]")
    if arr.dtype.kind not in "iu" and arr.size:
        raise ImportFormatError(f"{what} holds {arr.dtype.name} values, not integer expert ids")
    return _int32(arr, what)


def _int32(arr: np.ndarray, what: str) -> np.ndarray:
    """Ids as int32, refusing what the cast would wrap (no model has 2^31 experts)."""
    if arr.itemsize >= 4 and arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < -(1 << 31) or hi >= 1 << 31:
            raise ImportFormatError(f"{what} holds expert id {hi if hi >= 1 << 31 else lo}, past any expert count")
    return arr.astype(np.int32)


def _npy_or_lists(value: Any, what: str) -> np.ndarray:
    if isinstance(value, str):
        try:
            raw = _b64(value, what)
        except ImportFormatError as e:
            raise ImportFormatError(f"{what}: not a base64 .npy array ({e.reason})") from None
        try:
            value = np.load(io.BytesIO(raw), allow_pickle=False)
        except (ValueError, OSError, EOFError):
            # numpy's own reason would advise allow_pickle, which is never the fix for a routes file
            raise ImportFormatError(
                f"{what} is base64 but not of a .npy array, as --routes-format vllm reads it",
                hint="check --routes-format: sglang writes raw int32 bytes, vllm a .npy file or lists",
            ) from None
    return _ids_array(value, what)


def _raw_int32(value: str, model: RoutesModel, what: str) -> np.ndarray:
    raw = _b64(value, what)
    per_row = model.num_layers * model.top_k
    if len(raw) % (4 * per_row):
        raise ImportFormatError(
            f"{what}: {len(raw)} bytes are not whole rows of {model.num_layers} layers x top-{model.top_k} int32 ids",
            hint="check --routes-config names the model that recorded the routes",
        )
    return np.frombuffer(raw, dtype="<i4").reshape(-1, model.num_layers, model.top_k)


def decode_sglang(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    nested = [rec[k] for k in ("meta_info", "sglext") if isinstance(rec.get(k), Mapping)]  # /generate, OpenAI server
    value = _field(next((n for n in nested if n.get("routed_experts") is not None), rec), "routed_experts")
    if not isinstance(value, str):
        raise ImportFormatError(f"routed_experts is a {type(value).__name__}; SGLang writes a base64 string")
    return Decoded(
        _raw_int32(value, model, "routed_experts"), _start(rec, "routed_experts_start_len", "start"), DECODER_LAYERS
    )


def decode_vllm(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    ids = _npy_or_lists(_field(rec, "routed_experts"), "routed_experts")
    return Decoded(ids, _start(rec, "routed_experts_prompt_start", "start"))


def decode_vllm_021(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    prompt = _ids_array(_field(rec, "prompt_routed_experts"), "prompt_routed_experts")
    completion = _ids_array(_field(rec, "routed_experts"), "routed_experts")
    if prompt.shape[1:] != completion.shape[1:] and len(prompt) and len(completion):
        raise ImportFormatError(
            f"prompt_routed_experts rows are {list(prompt.shape[1:])}, routed_experts rows "
            f"{list(completion.shape[1:])}: not one layout"
        )
    if len(prompt) != prompt_len:
        raise ImportFormatError(f"prompt_routed_experts has {len(prompt)} rows for a {prompt_len}-token prompt")
    return Decoded(np.concatenate([prompt, completion]) if len(prompt) else completion, 0, MOE_ORDINALS)


def decode_verl(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    batch_row = _npy_or_lists(_field(rec, "routed_experts"), "routed_experts")
    pad = rec.get("prompt_pad")
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < prompt_len:
        raise ImportFormatError(
            f"prompt_pad is {pad!r}: verl's routes are left-padded to the batch's prompt width, "
            f"which the record must give (an integer >= the prompt's {prompt_len} tokens)"
        )
    completion_len = len(rec["completion_token_ids"])
    end = pad + completion_len
    if len(batch_row) < end - 1:
        raise ImportFormatError(
            f"routed_experts has {len(batch_row)} rows; prompt_pad {pad} plus a "
            f"{completion_len}-token completion needs at least {end - 1}"
        )
    return Decoded(batch_row[pad - prompt_len : end], 0)


def decode_slime(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    value = _field(rec, "rollout_routed_experts", "routed_experts")
    if isinstance(value, str):  # still SGLang's string
        return Decoded(_raw_int32(value, model, "rollout_routed_experts"), 0, DECODER_LAYERS)
    return Decoded(_ids_array(value, "rollout_routed_experts"), 0)


def decode_skyrl(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    ids = _ids_array(_field(rec, "rollout_expert_indices"), "rollout_expert_indices")
    flags = rec.get("uncaptured")
    uncaptured = None if flags is None else np.asarray(flags, dtype=bool).reshape(-1)
    if uncaptured is not None and len(uncaptured) != len(ids):
        raise ImportFormatError(f"uncaptured marks {len(uncaptured)} rows of {len(ids)}")
    return Decoded(ids, 0, uncaptured=uncaptured)


def decode_prime_rl(rec: Mapping[str, Any], model: RoutesModel, prompt_len: int) -> Decoded:
    value = _field(rec, "routed_experts")
    if not isinstance(value, Mapping) or not {"data", "shape", "dtype"} <= set(value):
        raise ImportFormatError("routed_experts must be prime-rl's {data, shape, start, dtype} object")
    shape, dtype = value["shape"], value["dtype"]
    try:
        dt = np.dtype(str(dtype))
    except TypeError:
        raise ImportFormatError(f"routed_experts dtype {dtype!r} is not a numpy dtype") from None
    if dt.kind not in "iu" or not isinstance(shape, list) or len(shape) != 3:
        raise ImportFormatError(f"routed_experts is {dtype} {shape}; expected an integer [tokens, layers, k] array")
    raw = _b64(str(value["data"]), "routed_experts.data")
    if len(raw) != dt.itemsize * int(np.prod(shape)):
        raise ImportFormatError(
            f"routed_experts.data holds {len(raw)} bytes, shape {shape} of {dt.name} needs "
            f"{dt.itemsize * int(np.prod(shape))}"
        )
    arr = np.frombuffer(raw, dtype=dt.newbyteorder("<") if dt.itemsize > 1 else dt).reshape(shape)
    start = _start(value, "start")
    if shape[2] == 2 * model.top_k and dt == np.int32:  # Total Router Recall: ids, then float32 weight bits
        weights = np.ascontiguousarray(arr[:, :, model.top_k :]).view(np.float32)
        if not np.isfinite(weights).all() or (weights < 0).any() or (weights > 1).any():
            raise ImportFormatError("routed_experts: the gate weights after the ids are not all in [0, 1]")
        return Decoded(arr[:, :, : model.top_k].astype(np.int32), start, weights=weights.astype(np.float32))
    return Decoded(_int32(arr, "routed_experts"), start)
