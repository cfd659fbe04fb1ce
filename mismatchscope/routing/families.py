"""Router families: how each MoE architecture picks and weights its experts, declared once.

Every transformers MoE router this project knows is a module that returns
``(router_logits [N, E], weights [N, k], ids [N, k])``; they differ in how the
logits become a choice and a weight. A family names its router module class
and its rule. The rule answers three questions, all from the router's own
logits, so the same code serves recording, replay and any caller that wants
"what would this router have given these experts":

* ``scores``: the selection score the router ranks by (the margin is the gap
  between the k-th and the (k+1)-th of these);
* ``weigh``: the gate weights the router gives a *forced* set of ids, the
  way R3-style replay needs them (the trainer's router, the sampler's ids);
* the family's own parameters are read from the router module itself
  (``norm_topk_prob``, ``e_score_correction_bias``, groups, scaling), so a
  checkpoint's config is honoured without re-reading it.

Rules:

``softmax``
    softmax over all experts (fp32), top-k, renormalised over the k when the
    router says ``norm_topk_prob`` (Qwen2/3-MoE, OLMoE) or always (Mixtral,
    Qwen3.5-MoE). Forced ids: gather the softmax at the ids, renormalise.
``sigmoid_groups``
    sigmoid scores; the choice adds ``e_score_correction_bias`` and keeps only
    the ``topk_group`` best of ``n_group`` expert groups; the weights are the
    un-biased sigmoid at the ids, renormalised (``norm_topk_prob``) and times
    ``routed_scaling_factor`` (DeepSeek-V3, GLM-4.5). Dense first layers
    (``first_k_dense_replace``) have no router and are no MoE layer.
``logit_topk_softmax``
    top-k of the raw logits (router bias included), softmax over the k
    chosen (GPT-OSS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mismatchscope.errors import CheckpointError

SOFTMAX = "softmax"
SIGMOID_GROUPS = "sigmoid_groups"
LOGIT_TOPK_SOFTMAX = "logit_topk_softmax"


@dataclass(frozen=True)
class RouterFamily:
    """One MoE router family: the model types it covers and the rule its router follows."""

    name: str
    model_types: tuple[str, ...]
    router_class: str
    """class name of the router module inside each MoE decoder layer."""
    rule: str
    always_renormalise: bool = False
    """renormalise the top-k weights even without a ``norm_topk_prob`` attribute (Mixtral, Qwen3.5-MoE)."""

    # ------------------------------------------------------------ scores

    def scores(self, router, logits):
        """Selection scores [N, E] the router ranks by (fp32); experts it may not pick score -inf."""
        import torch

        if self.rule == SOFTMAX:
            return torch.softmax(logits.float(), dim=-1)
        if self.rule == LOGIT_TOPK_SOFTMAX:
            return logits.float()
        scores = logits.float().sigmoid() + router.e_score_correction_bias.float()
        return scores.masked_fill(~_group_mask(router, scores), float("-inf"))

    def margin(self, router, logits):
        """k-th minus (k+1)-th selection score per token [N]: how close the choice was.

        ``inf`` where no eligible expert is left out (every expert of the
        allowed groups chosen).
        """
        import torch

        k = int(router.top_k)
        if logits.shape[-1] <= k:
            return torch.full(logits.shape[:-1], float("inf"), device=logits.device)
        if self.rule == SOFTMAX:  # softmax is monotone in the logits: rank them, exponentiate only k + 1
            x = logits.float()
            top = torch.topk(x, k + 1, dim=-1).values - torch.logsumexp(x, dim=-1, keepdim=True)
            return top[..., k - 1].exp() - top[..., k].exp()
        top = torch.topk(self.scores(router, logits), k + 1, dim=-1).values
        return top[..., k - 1] - top[..., k]

    # ------------------------------------------------------------ weights

    def renormalises(self, router) -> bool:
        return self.always_renormalise or bool(getattr(router, "norm_topk_prob", False))

    def weigh(self, router, logits, ids):
        """The gate weights [N, k] this router gives experts ``ids`` [N, k] (long), in fp32."""
        import torch

        if self.rule == SOFTMAX:
            w = torch.softmax(logits.float(), dim=-1).gather(-1, ids)
            return w / w.sum(dim=-1, keepdim=True) if self.renormalises(router) else w
        if self.rule == LOGIT_TOPK_SOFTMAX:
            return torch.softmax(logits.gather(-1, ids), dim=-1).float()
        w = logits.float().sigmoid().gather(-1, ids)
        if self.renormalises(router):
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
        return w * float(router.routed_scaling_factor)


def _group_mask(router, scores):
    """[N, E] bool: experts in the ``topk_group`` best groups (group score: sum of its best two)."""
    import torch

    n_group, e = int(router.num_group), scores.shape[-1]
    grouped = scores.view(-1, n_group, e // n_group)
    group_scores = grouped.topk(min(2, e // n_group), dim=-1).values.sum(dim=-1)
    best = torch.topk(group_scores, k=int(router.topk_group), dim=-1).indices
    mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, best, True)
    return mask.unsqueeze(-1).expand(-1, n_group, e // n_group).reshape(scores.shape)


FAMILIES: tuple[RouterFamily, ...] = (
    RouterFamily("qwen3_moe", ("qwen3_moe",), "Qwen3MoeTopKRouter", SOFTMAX),
    RouterFamily("qwen2_moe", ("qwen2_moe",), "Qwen2MoeTopKRouter", SOFTMAX),
    RouterFamily(
        "qwen3_5_moe", ("qwen3_5_moe", "qwen3_5_moe_text"), "Qwen3_5MoeTopKRouter", SOFTMAX, always_renormalise=True
    ),
    RouterFamily("mixtral", ("mixtral",), "MixtralTopKRouter", SOFTMAX, always_renormalise=True),
    RouterFamily("olmoe", ("olmoe",), "OlmoeTopKRouter", SOFTMAX),
    RouterFamily("deepseek_v3", ("deepseek_v3",), "DeepseekV3TopkRouter", SIGMOID_GROUPS),
    RouterFamily("glm4_moe", ("glm4_moe",), "Glm4MoeTopkRouter", SIGMOID_GROUPS),
    RouterFamily("gpt_oss", ("gpt_oss",), "GptOssTopKRouter", LOGIT_TOPK_SOFTMAX),
)
_BY_MODEL_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def family_for(model_type: str | None) -> RouterFamily | None:
    """The family of a config's ``model_type`` (the text config's for a multimodal wrapper), or None."""
    return _BY_MODEL_TYPE.get(model_type or "")


@dataclass(frozen=True)
class MoELayers:
    """A loaded model's routers: absolute decoder-layer index -> router module."""

    family: RouterFamily
    num_layers: int
    routers: dict[int, Any]
    num_experts: int
    top_k: int

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(sorted(self.routers))


def decoder_layers(model):
    """The decoder's layer list (``model.get_decoder().layers``; a VL wrapper's language model's)."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    for candidate in (decoder, getattr(decoder, "language_model", None), getattr(model, "model", None)):
        layers = getattr(candidate, "layers", None)
        if layers is not None:
            return layers
    raise CheckpointError(f"{type(model).__name__} exposes no decoder layer list; its routes cannot be read")


def find_moe_layers(model, family: RouterFamily) -> MoELayers:
    """Each decoder layer's router module of ``family`` (dense layers have none)."""
    layers = decoder_layers(model)
    routers = {}
    for index, layer in enumerate(layers):
        found = [m for m in layer.modules() if type(m).__name__ == family.router_class]
        if len(found) > 1:
            raise CheckpointError(
                f"decoder layer {index} holds {len(found)} {family.router_class} modules; "
                "mismatchscope reads one router per layer"
            )
        if found:
            routers[index] = found[0]
    if not routers:
        raise CheckpointError(
            f"{type(model).__name__}: no {family.router_class} module in any decoder layer "
            f"(router family {family.name})"
        )
    first = routers[min(routers)]
    return MoELayers(family, len(layers), routers, int(first.num_experts), int(first.top_k))
