"""Router families: recording and replay on tiny random checkpoints of every family, built from configs.

For each family the test holds its own statement of the router's rule
(``_select`` and ``_weigh`` below, written from the families' published
routing, not from mismatchscope's code) and checks the trainer against it:

* the routes the trainer records equal the ones this rule picks from the
  router's input (captured with a plain forward pre-hook on the router),
  compared as sets;
* scoring with forced expert ids equals a forward whose routers the test
  replaces with its own rule at the forced ids, to 1e-4 in logprob; and the
  routes the trainer then records are the forced ones.

Forced ids are random distinct experts per position, so replay is checked far
from the router's own choice. The DeepSeek-V3 checkpoint has groups, a dense
first layer, a scaling factor != 1 and a nonzero correction bias, so every
part of that rule is exercised. Qwen3.5-MoE is built from its text config
(``qwen3_5_moe_text``, hybrid linear attention and shared expert included);
the vision-language wrapper would only add a vision tower the probe never runs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mismatchscope.probe.checkpoint import inspect_checkpoint
from mismatchscope.probe.trainer import HFTrainer
from mismatchscope.probe.types import SamplingConfig, ScoreRequest, TrainerConfig
from mismatchscope.routing.io import SeqRoutes

from .conftest import checkpoint_dir

pytestmark = pytest.mark.slow  # seven checkpoints built and loaded: about a minute

COMMON = dict(
    vocab_size=320,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    tie_word_embeddings=False,
)

CONFIGS = {
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            num_hidden_layers=2,
            intermediate_size=64,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=False,
        ),
    ),
    "mixtral": (
        "MixtralConfig",
        dict(num_hidden_layers=2, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2),
    ),
    "olmoe": (
        "OlmoeConfig",
        dict(num_hidden_layers=2, intermediate_size=32, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True),
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            num_hidden_layers=3,
            intermediate_size=64,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=4,
            topk_group=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            routed_scaling_factor=2.5,
            norm_topk_prob=True,
            q_lora_rank=None,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            head_dim=8,
            num_key_value_heads=4,
        ),
    ),
    "glm4_moe": (
        "Glm4MoeConfig",
        dict(
            num_hidden_layers=3,
            intermediate_size=64,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_group=2,
            topk_group=1,
            n_shared_experts=1,
            first_k_dense_replace=1,
            routed_scaling_factor=1.5,
            norm_topk_prob=True,
        ),
    ),
    "gpt_oss": (
        "GptOssConfig",
        dict(
            num_hidden_layers=2,
            intermediate_size=32,
            num_local_experts=8,
            num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=16,
        ),
    ),
    "qwen3_5_moe": (
        "Qwen3_5MoeTextConfig",
        dict(
            num_hidden_layers=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=2,
            layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
        ),
    ),
}
ROUTER = {
    "qwen2_moe": "gate",
    "mixtral": "gate",
    "olmoe": "gate",
    "deepseek_v3": "gate",
    "glm4_moe": "gate",
    "gpt_oss": "router",
    "qwen3_5_moe": "gate",
}


def _build(name: str, root: Path) -> Path:
    cls_name, extra = CONFIGS[name]
    cfg_cls = getattr(transformers, cls_name, None)
    if cfg_cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {cls_name}")
    config = cfg_cls(**{**COMMON, **extra})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for module in model.modules():  # a trained router's spread: random init alone routes almost uniformly
        if type(module).__name__.endswith(("TopKRouter", "TopkRouter")):
            module.weight.data.normal_(0.0, 0.5)
            if hasattr(module, "e_score_correction_bias"):
                module.e_score_correction_bias.data.normal_(0.0, 0.05)
            if getattr(module, "bias", None) is not None:
                module.bias.data.normal_(0.0, 0.3)
    path = root / name
    model.save_pretrained(path, safe_serialization=True)
    tok = checkpoint_dir("tiny-qwen3-moe")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok / f, path / f)
    return path


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def family_trainer(request, tmp_path_factory):
    path = _build(request.param, tmp_path_factory.mktemp("families"))
    info = inspect_checkpoint(path)
    trainer = HFTrainer(info, TrainerConfig(dtype="float32", device="cpu"))  # the rules are checked on the CPU
    assert trainer.routes.tap is not None, trainer.routes.why
    return request.param, trainer


def _requests(seed: int = 1) -> list[ScoreRequest]:
    g = np.random.default_rng(seed)
    out = []
    for p, c in ((5, 6), (9, 3), (4, 8)):
        ids = g.integers(3, 320, size=p + c).tolist()
        out.append(ScoreRequest(ids[:p], ids[p:], []))
    return out


# ------------------------------------------------------------ the test's own statement of each rule


def _select(name: str, router, hidden):
    """The ids the family's router picks for router input ``hidden`` [N, H]."""
    h = hidden.reshape(-1, router.weight.shape[1]).float()
    logits = h @ router.weight.float().T
    k = router.top_k
    if name == "gpt_oss":
        return torch.topk(logits + router.bias.float(), k, dim=-1).indices
    if name in ("deepseek_v3", "glm4_moe"):
        s = logits.sigmoid() + router.e_score_correction_bias
        g = router.num_group
        per = s.shape[-1] // g
        gs = s.view(-1, g, per).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(router.topk_group, dim=-1).indices, 1.0)
        s = s.masked_fill(keep.repeat_interleave(per, dim=1) == 0, float("-inf"))
        return torch.topk(s, k, dim=-1).indices
    return torch.topk(torch.softmax(logits, -1), k, dim=-1).indices


def _weigh(name: str, router, hidden, ids):
    """The family's weights at forced ``ids`` (what R3 replay computes)."""
    h = hidden.reshape(-1, router.weight.shape[1])
    if name == "gpt_oss":
        logits = h @ router.weight.T + router.bias
        return torch.softmax(logits.gather(-1, ids), dim=-1)
    logits = h.float() @ router.weight.float().T
    if name in ("deepseek_v3", "glm4_moe"):
        w = logits.sigmoid().gather(-1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return w * router.routed_scaling_factor
    w = torch.softmax(logits, -1).gather(-1, ids)
    if name in ("mixtral", "qwen3_5_moe") or router.norm_topk_prob:
        w = w / w.sum(-1, keepdim=True)
    return w.to(h.dtype)


def _routers(model, name):
    layers = model.model.layers
    return {i: getattr(layer.mlp, ROUTER[name]) for i, layer in enumerate(layers) if hasattr(layer.mlp, ROUTER[name])}


# ------------------------------------------------------------ tests


def test_recorded_routes_equal_the_family_rule(family_trainer):
    name, trainer = family_trainer
    reqs = _requests()
    scored = trainer.score(reqs, SamplingConfig(temperature=1.0))
    routers = _routers(trainer.model, name)
    assert tuple(routers) == trainer.routes.tap.layers.moe_layers
    if name in ("deepseek_v3", "glm4_moe"):
        assert 0 not in routers  # first_k_dense_replace=1: layer 0 is dense
    inputs: dict[int, list] = {}
    handles = [
        r.register_forward_pre_hook(lambda m, a, i=i: inputs.setdefault(i, []).append(a[0].detach()))
        for i, r in routers.items()
    ]
    try:
        for req in reqs:
            inputs.clear()
            ids = [*req.prompt_token_ids, *req.completion_token_ids]
            with torch.inference_mode():
                trainer.model(input_ids=torch.tensor([ids]), use_cache=False)
            got = next(s.routes for r, s in zip(reqs, scored, strict=True) if r is req)
            assert got.ids.shape == (len(ids) - 1, len(routers), 2)
            for m, (i, router) in enumerate(routers.items()):
                want = _select(name, router, inputs[i][0])[: len(ids) - 1]
                assert np.array_equal(np.sort(got.ids[:, m], -1), np.sort(want.numpy(), -1)), (name, i)
    finally:
        for h in handles:
            h.remove()


def test_replay_equals_an_independent_replay(family_trainer):
    name, trainer = family_trainer
    reqs = _requests(seed=2)
    routers = _routers(trainer.model, name)
    g = torch.Generator().manual_seed(3)
    forced = []
    for req in reqs:
        rows = len(req.prompt_token_ids) + len(req.completion_token_ids) - 1
        ids = torch.stack(
            [torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(rows)]) for _ in routers], dim=1
        )  # [rows, moe layers, k], distinct ids per row
        forced.append(ids)
        req.forced_routes = SeqRoutes(ids.numpy().astype(np.int64))
    scored = trainer.score(reqs, SamplingConfig(temperature=1.0))
    for req, ids, s in zip(reqs, forced, scored, strict=True):
        assert np.array_equal(np.sort(s.routes.ids, -1), np.sort(ids.numpy(), -1))  # the trainer now routes as forced
        full = [*req.prompt_token_ids, *req.completion_token_ids]
        originals = {}
        for m, (i, router) in enumerate(routers.items()):
            originals[i] = router.forward

            # the last input position predicts nothing; it keeps the router's own choice
            def forward(hidden, router=router, m=m, ids=ids, full=full):
                own = _select(name, router, hidden)
                chosen = torch.cat([ids[:, m], own[len(full) - 1 :]])
                logits = hidden.reshape(-1, router.weight.shape[1]) @ router.weight.T
                return logits, _weigh(name, router, hidden, chosen), chosen

            router.forward = forward
        try:
            with torch.inference_mode():
                logits = trainer.model(input_ids=torch.tensor([full]), use_cache=False).logits[0].float()
        finally:
            for router in routers.values():
                del router.forward
        p = len(req.prompt_token_ids)
        want = logits.log_softmax(-1)[p - 1 : len(full) - 1].gather(-1, torch.tensor(full[p:])[:, None])[:, 0]
        assert np.allclose(s.trainer_logprobs, want.numpy(), atol=1e-4, rtol=0), name
        req.forced_routes = None


def test_unknown_family_probes_without_routes(tmp_path):
    """An MoE model type mismatchscope has no family for: no tap, one line naming it."""
    from mismatchscope.probe.routes import unknown_family

    info = inspect_checkpoint(checkpoint_dir("tiny-qwen3-moe"))
    info = type(info)(
        **{**info.__dict__, "model_type": "brand_new_moe", "config": {**info.config, "model_type": "brand_new_moe"}}
    )
    line = unknown_family(info)
    assert "'brand_new_moe'" in line and "\n" not in line and "not recorded" in line
