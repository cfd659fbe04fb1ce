"""What imported routes are checked against: a checkpoint's decoder layers, MoE layers, experts and top-k.

Route dumps carry no shape (SGLang) or a shape whose layer axis may be every
decoder layer, only the MoE layers (vLLM 0.21, verl's R2 on mixed models) or
those plus MTP/draft layers. Only the model's own ``config.json`` says which,
so ``import --routes-config`` reads it. The raw JSON is read, not a
transformers config class: no heavy import, no remote code, and every key
that decides the layout is one a checkpoint writes out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import json_object
from ..errors import NotAJsonObjectError, UsageError

_EXPERTS_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k")
_MTP_KEYS = ("num_nextn_predict_layers", "num_mtp_layers", "mtp_num_hidden_layers")
_SPARSE_TYPES = ("sparse", "moe")


@dataclass(frozen=True)
class RoutesModel:
    """The routing shape of one model, as its config declares it."""

    family: str
    """the config's ``model_type`` (of its text model, for a vision-language wrapper)."""
    num_layers: int
    """decoder layers (``num_hidden_layers``): the layer axis of the engines' layout."""
    moe_layers: tuple[int, ...]
    """absolute indices of the decoder layers that route."""
    num_experts: int
    top_k: int
    mtp_layers: int = 0
    """MTP/draft layers some dumps append after the decoder layers; never imported."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], where: str = "the model config") -> RoutesModel:
        text = config.get("text_config")
        cfg = text if isinstance(text, Mapping) and "num_hidden_layers" in text else config
        num_layers = _positive(cfg, ("num_hidden_layers",), where)
        experts = _positive(cfg, _EXPERTS_KEYS, where)
        top_k = _positive(cfg, _TOP_K_KEYS, where)
        if top_k > experts:
            raise UsageError(
                f"{where}: top-k {top_k} exceeds the {experts} experts",
                hint="pass the config.json of the model that recorded the routes",
            )
        moe = _moe_layers(cfg, num_layers, where)
        mtp = next((int(cfg[k]) for k in _MTP_KEYS if isinstance(cfg.get(k), int)), 0)
        return cls(
            family=str(cfg.get("model_type") or config.get("model_type") or "unknown"),
            num_layers=num_layers,
            moe_layers=moe,
            num_experts=experts,
            top_k=top_k,
            mtp_layers=max(mtp, 0),
        )

    @classmethod
    def load(cls, path: Path) -> RoutesModel:
        """From a checkpoint folder (its ``config.json``) or a config JSON file."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise UsageError(
                f"--routes-config {path}: no config.json there",
                hint="pass the checkpoint folder of the model that recorded the routes, or its config.json",
            )
        try:
            config = json_object(file.read_text())
        except NotAJsonObjectError as e:
            raise UsageError(f"--routes-config {file}: holds a {e.value_type}, not a config object") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UsageError(f"--routes-config {file}: cannot read it as JSON ({e})") from None
        return cls.from_config(config, where=f"--routes-config {file}")

    def describe(self) -> str:
        return (
            f"{self.family}: {self.num_layers} decoder layers, {len(self.moe_layers)} MoE, "
            f"top-{self.top_k} of {self.num_experts} experts"
        )


def _positive(cfg: Mapping[str, Any], keys: tuple[str, ...], where: str) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UsageError(f"{where}: {k} is {v!r}, not a positive integer")
            return v
    raise UsageError(
        f"{where}: no {' / '.join(keys)}: not the config of a mixture-of-experts model",
        hint="pass the config.json of the MoE model that recorded the routes",
    )


def _moe_layers(cfg: Mapping[str, Any], num_layers: int, where: str) -> tuple[int, ...]:
    """Which decoder layers route, by whichever of the families' keys the config has."""
    types = cfg.get("mlp_layer_types")
    if isinstance(types, list):
        if len(types) != num_layers:
            raise UsageError(f"{where}: mlp_layer_types lists {len(types)} layers, num_hidden_layers is {num_layers}")
        layers = tuple(i for i, t in enumerate(types) if str(t).lower() in _SPARSE_TYPES)
    else:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)  # DeepSeek-V2/V3, GLM-4.5, Kimi K2
        freq = int(cfg.get("moe_layer_freq") or 1)
        step = int(cfg.get("decoder_sparse_step") or 1)  # Qwen2/3-MoE
        dense_only = {int(i) for i in cfg.get("mlp_only_layers") or []}
        layers = tuple(
            i
            for i in range(num_layers)
            if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense_only
        )
    if not layers:
        raise UsageError(
            f"{where}: no decoder layer routes (every layer is dense)",
            hint="pass the config.json of the MoE model that recorded the routes",
        )
    return layers
