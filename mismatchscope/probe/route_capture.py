"""Reading and forcing a loaded transformers model's routes, through its router modules.

:class:`RouteTap` replaces the ``forward`` of each MoE layer's router module
(an instance attribute, removed again by :meth:`RouteTap.close`): the
router's own forward still runs, so whatever transformers does stays as it
is, and the tap only looks at what it returned, or swaps the ids (and
weights) it hands to the experts. Nothing of transformers' code is copied.

Each router call sees the batch's tokens flattened, ``[N, hidden]`` with
``N = batch x length`` (one token per row in a decode step). A capture holds,
per MoE layer, the ids, weights and margins of that call; forcing takes, per
MoE layer, ids ``[N, k]`` where a row of ``-1`` leaves that token to the
router (padding, the last token of a sequence).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from mismatchscope.routing.families import (
    MoELayers,
    RouterFamily,
    family_for,
    find_moe_layers,
)


@dataclass
class Capture:
    """One router call's routes in one MoE layer (CPU tensors)."""

    ids: Any
    """[N, k] int64, in the router's order."""
    weights: Any
    """[N, k] float32: the weights handed to the experts."""
    margin: Any
    """[N] float32: k-th minus (k+1)-th selection score."""


class RouteTap:
    """Records every router call of a model's MoE layers, and forces ids where asked."""

    def __init__(self, layers: MoELayers, *, margins: bool = True):
        self.layers = layers
        self.margins = margins
        self.captures: dict[int, list[Capture]] = {i: [] for i in layers.routers}
        self._forced: dict[int, tuple[Any, Any | None]] | None = None
        for index, router in layers.routers.items():
            router.forward = self._patched(index, router, router.forward)

    @property
    def family(self) -> RouterFamily:
        return self.layers.family

    def _patched(self, index: int, router, original):
        family = self.family

        def forward(hidden_states, *args, **kwargs):
            logits, weights, ids = original(hidden_states, *args, **kwargs)
            if self._forced is not None and index in self._forced:
                ids, weights = self._force(router, logits, weights, ids, *self._forced[index])
            margin = family.margin(router, logits).float().cpu() if self.margins else None
            self.captures[index].append(Capture(ids.detach().cpu(), weights.detach().float().cpu(), margin))
            return logits, weights, ids

        return forward

    def _force(self, router, logits, weights, ids, forced_ids, forced_weights):
        import torch

        if forced_ids.shape != ids.shape:
            raise ValueError(f"forced ids {tuple(forced_ids.shape)} do not match the router call's {tuple(ids.shape)}")
        forced_ids = forced_ids.to(ids.device)
        keep = (forced_ids < 0).any(dim=-1, keepdim=True)
        new_ids = torch.where(keep, ids, forced_ids.clamp(min=0))
        if forced_weights is not None:
            new_w = forced_weights.to(weights.device, weights.dtype)
        else:
            new_w = self.family.weigh(router, logits, new_ids).to(weights.dtype)
        return new_ids, torch.where(keep, weights, new_w)

    # ------------------------------------------------------------ use

    def force(self, forced: dict[int, tuple[Any, Any | None]] | None) -> None:
        """Force the next calls: MoE layer -> (ids [N, k] long, -1 rows left alone; weights [N, k] or None)."""
        self._forced = forced

    def take(self) -> dict[int, list[Capture]]:
        """The captures since the last take, per MoE layer, and start afresh."""
        out, self.captures = self.captures, {i: [] for i in self.layers.routers}
        return out

    def close(self) -> None:
        """Give each router its own forward back."""
        for router in self.layers.routers.values():
            with contextlib.suppress(AttributeError):
                del router.forward
        self._forced = None


def moe_layers_of(model, model_type: str | None) -> MoELayers | None:
    """The model's routers if its family is known, else None."""
    family = family_for(model_type)
    return None if family is None else find_moe_layers(model, family)
