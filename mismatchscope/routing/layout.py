"""The ``routes/`` files of a run directory: one row per routed input position.

An MoE layer's router picks ``top_k`` experts for every token fed through the
model. A row holds, for one ``(sequence_id, input_position)``, the ids each
side chose in every decoder layer: the engines' own layout (vLLM >= 0.22,
SGLang, slime, verl all index the layer axis by *absolute decoder layer*), so
routes a framework recorded map onto a run without renumbering.

* ``input_position`` counts over the whole sequence, prompt and completion:
  rows cover ``0 .. prompt_length + completion_length - 2`` (the last token is
  never fed through the model).
* ``token_position`` is the ``position`` (in ``tokens/``) of the completion
  token this row's forward predicts: ``input_position - (prompt_length - 1)``,
  null for rows that predict a prompt token. Flip rates of completion tokens
  join on it; prompt rows are reported apart.
* ``*_experts`` are ``list<list<uint>>`` indexed ``[layer][k]`` over every
  decoder layer: a dense layer's entry is null, a side that could not record
  has a null row. Ids are logical expert ids in the narrowest unsigned type
  the expert count allows. Top-k order carries no meaning: flips compare sets.
* ``*_weights`` are the gate weights each side gave those experts (same
  layout, float32), where a side can give them.
* ``trainer_margin`` is, per layer, the gap between the k-th and (k+1)-th
  routing score the trainer's router ranked by: how close the choice was.

Version history:
  1 -- first version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from mismatchscope.rundir import ROUTES as ROUTES  # the run-directory folder of route shards, listed in the shard index

from ..documents import json_edge

ROUTES_VERSION = 1
MANIFEST_KEY = "routing"
"""the run manifest's key for :class:`RoutingMeta`."""

SAMPLER_EXPERTS = "sampler_experts"
TRAINER_EXPERTS = "trainer_experts"
SAMPLER_WEIGHTS = "sampler_weights"
TRAINER_WEIGHTS = "trainer_weights"
TRAINER_MARGIN = "trainer_margin"
SIDES = ("sampler", "trainer")


def expert_id_type(num_experts: int) -> pa.DataType:
    """The narrowest unsigned integer that holds every logical id below ``num_experts``."""
    if num_experts < 1:
        raise ValueError(f"num_experts must be positive, got {num_experts}")
    if num_experts <= 1 << 8:
        return pa.uint8()
    if num_experts <= 1 << 16:
        return pa.uint16()
    return pa.uint32()


def routes_schema(num_experts: int) -> pa.Schema:
    """The Arrow schema of a route shard for a model with ``num_experts`` routed experts."""
    ids = pa.list_(pa.list_(expert_id_type(num_experts)))
    weights = pa.list_(pa.list_(pa.float32()))
    return pa.schema(
        [
            pa.field("sequence_id", pa.int64(), nullable=False),
            pa.field("input_position", pa.int32(), nullable=False),
            pa.field("token_position", pa.int32()),
            pa.field(SAMPLER_EXPERTS, ids),
            pa.field(TRAINER_EXPERTS, ids),
            pa.field(SAMPLER_WEIGHTS, weights),
            pa.field(TRAINER_WEIGHTS, weights),
            pa.field(TRAINER_MARGIN, pa.list_(pa.float32())),
        ]
    )


@dataclass(frozen=True)
class SideRoutes:
    """Whether one side's routes are in the run, and if not, why (one line for the user)."""

    recorded: bool
    weights: bool = False
    why: str | None = None


@dataclass(frozen=True)
class RoutingMeta:
    """What a run's manifest says about its routes (``manifest["routing"]``)."""

    family: str
    """the router family (:mod:`mismatchscope.routing.families`) both sides were read with."""
    num_layers: int
    """decoder layers: the length of every ``*_experts`` row."""
    moe_layers: tuple[int, ...]
    """absolute indices of the decoder layers that route; the others are null in every row."""
    num_experts: int
    top_k: int
    sampler: SideRoutes = field(default_factory=lambda: SideRoutes(False))
    trainer: SideRoutes = field(default_factory=lambda: SideRoutes(False))
    replay: str | None = None
    """``None``, ``"ids"`` (expert ids forced to the sampler's) or ``"ids+weights"``."""
    version: int = ROUTES_VERSION

    @json_edge
    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["moe_layers"] = list(self.moe_layers)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RoutingMeta:
        sides = {s: SideRoutes(**raw.get(s, {"recorded": False})) for s in SIDES}
        return cls(
            family=str(raw["family"]),
            num_layers=int(raw["num_layers"]),
            moe_layers=tuple(int(x) for x in raw["moe_layers"]),
            num_experts=int(raw["num_experts"]),
            top_k=int(raw["top_k"]),
            replay=raw.get("replay"),
            version=int(raw.get("version", ROUTES_VERSION)),
            **sides,
        )
