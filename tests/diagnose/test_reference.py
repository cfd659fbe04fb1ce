"""The diagnose reference is a true float64 forward.

transformers computes RMSNorm, the rotary angles, the attention softmax and
the MoE router softmax in float32 even in a float64 model, which caps a
"float64" reference at float32 accuracy (about 1e-5 in logprob on the bundled
checkpoint). The forward written here uses plain torch ops on the weights,
float64 from the embedding to the log-softmax; the reference must agree with
it to 1e-7 (max |delta log p|). float32 rounding alone moves logprobs by
~1e-6 on these models, so a float32 step anywhere in the reference fails the
bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.helpers import REPO

SAMPLE = REPO / "sample_data"
DENSE = SAMPLE / "tiny-qwen3"
MOE = SAMPLE / "tiny-qwen3-moe"
TOLERANCE = 1e-7

PROMPTS = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15, 16, 17]]
COMPLETIONS = [[20, 21, 22, 23], [30], [40, 41, 42, 43, 44, 45]]

torch = pytest.importorskip("torch")


# ------------------------------------------------------------ an independent float64 forward


def _rms(x, w, eps, offset=0.0):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (w + offset)


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rope(x, positions, theta):
    """x: [heads, T, d]; angles from float64 inverse frequencies."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = positions.to(torch.float64)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    return x * emb.cos() + _rotate_half(x) * emb.sin()


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def independent_logprobs(
    cfg: dict, w: dict, prompt: list[int], completion: list[int], temperature: float = 1.0
) -> np.ndarray:
    """log p of each completion token, from the weights ``w`` (float64 tensors) and the config dict.

    Covers the decoder families the project supports: Qwen3 (q/k norms), Qwen3-MoE (top-k router,
    renormalised), Llama/Mistral (no q/k norms) and Gemma2 (1 + w norms, sqrt(H) embedding scale,
    norms around attention and MLP, tanh softcaps on attention scores and logits, sliding layers)."""
    mt = cfg["model_type"]
    gemma = mt == "gemma2"
    ids = torch.tensor([*prompt, *completion])
    T = ids.numel()
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    d = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    off = 1.0 if gemma else 0.0
    rope = cfg.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    pos = torch.arange(T)
    h = w["model.embed_tokens.weight"][ids]
    if gemma:
        h = h * torch.tensor(H**0.5, dtype=torch.float64)
    scale = (cfg["query_pre_attn_scalar"] ** -0.5) if gemma else d**-0.5
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = _rms(h, w[p + "input_layernorm.weight"], eps, off)
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(T, nh, d).transpose(0, 1)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(T, nkv, d).transpose(0, 1)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(T, nkv, d).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in w:
            q = _rms(q, w[p + "self_attn.q_norm.weight"], eps)
            k = _rms(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k = _rope(q, pos, theta), _rope(k, pos, theta)
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        s = q @ k.transpose(1, 2) * scale
        if gemma and cfg.get("attn_logit_softcapping"):
            cap = cfg["attn_logit_softcapping"]
            s = torch.tanh(s / cap) * cap
        allowed = pos[None, :] <= pos[:, None]
        window = cfg.get("sliding_window")
        if gemma and window and cfg["layer_types"][i] == "sliding_attention":
            allowed &= pos[:, None] - pos[None, :] < window
        s = s.masked_fill(~allowed, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(0, 1).reshape(T, nh * d) @ w[p + "self_attn.o_proj.weight"].T
        if gemma:
            a = _rms(a, w[p + "post_attention_layernorm.weight"], eps, off)
            h = h + a
            x = _rms(h, w[p + "pre_feedforward_layernorm.weight"], eps, off)
        else:
            h = h + a
            x = _rms(h, w[p + "post_attention_layernorm.weight"], eps)
        if p + "mlp.gate.weight" in w:  # MoE: softmax router, top-k, renormalised weights
            probs = (x @ w[p + "mlp.gate.weight"].T).softmax(-1)
            top_w, top_i = probs.topk(cfg["num_experts_per_tok"], dim=-1)
            if cfg.get("norm_topk_prob"):
                top_w = top_w / top_w.sum(-1, keepdim=True)
            gate_up, down = w[p + "mlp.experts.gate_up_proj"], w[p + "mlp.experts.down_proj"]
            m = torch.zeros_like(x)
            for t in range(T):
                for j in range(top_i.shape[1]):
                    e = int(top_i[t, j])
                    g, u = (gate_up[e] @ x[t]).chunk(2)
                    m[t] += top_w[t, j] * (down[e] @ (torch.nn.functional.silu(g) * u))
        else:
            act = _gelu_tanh if gemma else torch.nn.functional.silu
            up = act(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)
            m = up @ w[p + "mlp.down_proj.weight"].T
        if gemma:
            m = _rms(m, w[p + "post_feedforward_layernorm.weight"], eps, off)
        h = h + m
    h = _rms(h, w["model.norm.weight"], eps, off)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = h[len(prompt) - 1 : T - 1] @ head.T
    if gemma and cfg.get("final_logit_softcapping"):
        cap = cfg["final_logit_softcapping"]
        logits = torch.tanh(logits / cap) * cap
    return (logits / temperature).log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0].numpy()


def _weights(path) -> dict:
    """The checkpoint's tensors as transformers names them (fused MoE experts), widened to float64 (exact)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path))
    return {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}


def _max_error(path, temperature: float = 1.0) -> float:
    import json

    from mismatchscope.diagnose.reference import load_reference
    from mismatchscope.probe.checkpoint import inspect_checkpoint
    from mismatchscope.probe.types import SamplingConfig

    ref = load_reference(inspect_checkpoint(path))
    assert ref.dtype == "float64"
    got = ref.score(PROMPTS, COMPLETIONS, SamplingConfig(temperature=temperature))  # one padded batch, longest first
    cfg = json.loads((path / "config.json").read_text())
    w = _weights(path)
    worst = 0.0
    with torch.inference_mode():
        for p, c, lp in zip(PROMPTS, COMPLETIONS, got, strict=True):
            assert lp.dtype == np.float64
            worst = max(worst, float(np.max(np.abs(lp - independent_logprobs(cfg, w, p, c, temperature)))))
    return worst


def _random_checkpoint(tmp_path, model_type: str):
    """A tiny random checkpoint of another supported family (weights scaled up so float32 rounding shows)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    common = {
        "vocab_size": 96,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
    }
    extra = {
        "gemma2": {
            "query_pre_attn_scalar": 16,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "sliding_window": 4,
            "hidden_activation": "gelu_pytorch_tanh",
        }
    }.get(model_type, {})
    config = AutoConfig.for_model(model_type, **common, **extra)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    out = tmp_path / model_type
    model.save_pretrained(out, safe_serialization=True)
    return out


# ------------------------------------------------------------ the pins


@pytest.mark.slow
@pytest.mark.skipif(not DENSE.is_dir(), reason="sample checkpoint missing")
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_reference_equals_an_independent_float64_forward_on_the_dense_sample(temperature):
    assert _max_error(DENSE, temperature) <= TOLERANCE


@pytest.mark.slow
@pytest.mark.skipif(not MOE.is_dir(), reason="sample checkpoint missing")
def test_reference_equals_an_independent_float64_forward_on_the_moe_sample():
    assert _max_error(MOE) <= TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "mistral", "gemma2"])
def test_reference_equals_an_independent_float64_forward_on_other_families(tmp_path, model_type):
    assert _max_error(_random_checkpoint(tmp_path, model_type)) <= TOLERANCE


@pytest.mark.skipif(not DENSE.is_dir(), reason="sample checkpoint missing")
def test_the_independent_forward_matches_transformers_in_float32():
    """The test's own forward is right: against transformers' float32 forward it differs by float32 rounding only
    (~1e-6), not by a modelling difference (which would be orders larger)."""
    import json

    from transformers import AutoModelForCausalLM

    cfg = json.loads((DENSE / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(DENSE), attn_implementation="eager").eval()
    w = {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}
    p, c = PROMPTS[2], COMPLETIONS[2]
    with torch.inference_mode():
        logits = model(torch.tensor([[*p, *c]])).logits[0].double()
    hf = logits.log_softmax(-1)[len(p) - 1 : len(p) - 1 + len(c)].gather(-1, torch.tensor(c)[:, None])[:, 0].numpy()
    assert np.max(np.abs(hf - independent_logprobs(cfg, w, p, c))) < 1e-4
