"""Capture points, the token sample, and what one side's capture holds.

A capture point is a place in the forward pass both engines compute: the
embeddings, seven ops inside each decoder layer, then the final norm, the
logits and the log-softmax. Names are ``embed``, ``layers.I.OP``,
``final_norm``, ``logits``, ``logprob``, in forward order:

``input_norm``      the layer's input RMSNorm
``attn``            the attention block's output (after its output projection)
``attn_residual``   the residual stream after attention (the input of the MLP-side norm)
``mlp_norm``        the MLP-side norm's output (``post_attention_layernorm``, Gemma's ``pre_feedforward_layernorm``)
``router``          MoE layers: the router's logits
``mlp``             the MLP (or experts) block's output
``output``          the layer's output, the residual stream after the MLP

``logprob`` is the log-softmax at the token that follows (the recorded id):
one number per position, compared in absolute terms; every other point is a
vector compared relative to the reference's norm.

Memory is bounded by the token sample: at most ``budget`` positions over all
sequences, spread evenly over the completion tokens (each position the one
that predicts a completion token), so a capture holds
``budget x (sum of the points' widths)`` numbers whatever the sequences' length.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

OPS = ("input_norm", "attn", "attn_residual", "mlp_norm", "router", "mlp", "output")
HEAD = ("final_norm", "logits", "logprob")
DEFAULT_BUDGET = 256
"""token positions kept per capture by default."""


def point_names(n_layers: int, moe_layers: frozenset[int] | set[int] = frozenset()) -> list[str]:
    """Every capture point of a model, in forward order (``router`` only in MoE layers)."""
    names = ["embed"]
    for i in range(n_layers):
        names += [f"layers.{i}.{op}" for op in OPS if op != "router" or i in moe_layers]
    return names + list(HEAD)


def split(name: str) -> tuple[int | None, str]:
    """(decoder layer or None, op) of a point name."""
    if name.startswith("layers."):
        _, layer, op = name.split(".", 2)
        return int(layer), op
    return None, name


def source(name: str, names: list[str]) -> str | None:
    """The point ``name`` is computed from, for its growth: the previous point on the hidden-state path
    (a router and the MLP both read the MLP-side norm; the first norm reads the embeddings)."""
    layer, op = split(name)
    if name == "embed":
        return None
    if op in ("router", "mlp"):
        return f"layers.{layer}.mlp_norm"
    i = names.index(name) - 1
    while i >= 0 and split(names[i])[1] == "router":
        i -= 1
    return names[i] if i >= 0 else None


@dataclass(frozen=True)
class Sequence:
    """One sequence to localise on: its prompt and completion ids and how the report names it."""

    prompt: list[int]
    completion: list[int]
    label: str

    @property
    def ids(self) -> list[int]:
        return [*self.prompt, *self.completion]


def sample_positions(sequences: list[Sequence], budget: int) -> list[np.ndarray]:
    """Per sequence, the input positions kept: those predicting a completion token, at most ``budget`` in all,
    evenly spread over the concatenated completion tokens (every one when they fit)."""
    spans = [np.arange(len(s.prompt) - 1, len(s.prompt) - 1 + len(s.completion)) for s in sequences]
    total = sum(len(s) for s in spans)
    if total <= budget:
        return spans
    keep = np.unique(np.linspace(0, total - 1, budget).round().astype(np.int64))
    out, start = [], 0
    for s in spans:
        inside = keep[(keep >= start) & (keep < start + len(s))] - start
        out.append(s[inside])
        start += len(s)
    return out


@dataclass
class SideCapture:
    """One side's captured rows: point -> one ``[positions, width]`` array per sequence (float32, or float64 for
    a float64 forward; every narrower dtype widens exactly)."""

    label: str
    values: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    """points this side cannot capture -> why."""

    def add(self, point: str, sequence: int, rows: np.ndarray) -> None:
        self.values.setdefault(point, {})[sequence] = rows

    def rows(self, point: str, n_sequences: int) -> np.ndarray | None:
        """All sequences' rows of one point, stacked, or None when a sequence lacks it."""
        got = self.values.get(point, {})
        if any(i not in got for i in range(n_sequences)):
            return None
        return np.concatenate([got[i] for i in range(n_sequences)], axis=0)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for per in self.values.values() for a in per.values())

    def save(self, path: Path) -> None:
        arrays = {f"{p}#{i}": a for p, per in self.values.items() for i, a in per.items()}
        meta = np.array([self.label, *(f"{k}\t{v}" for k, v in self.missing.items())])
        np.savez(path, **{"__meta__": meta, **arrays})  # pyright: ignore[reportArgumentType]

    @classmethod
    def load(cls, path: Path) -> SideCapture:
        with np.load(path, allow_pickle=False) as data:
            meta = [str(x) for x in data["__meta__"]]
            out = cls(meta[0], missing=dict(m.split("\t", 1) for m in meta[1:]))
            for key in data.files:
                if key != "__meta__":
                    point, i = key.rsplit("#", 1)
                    out.add(point, int(i), data[key])
        return out
