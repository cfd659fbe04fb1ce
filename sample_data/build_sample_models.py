"""Build mismatchscope's sample checkpoints and prompts, reproducibly.

Run from the repository root::

    python sample_data/build_sample_models.py

It writes, next to this script:

* ``tiny-qwen3/``        a dense Qwen3-style causal LM (2 layers, 0.57M parameters),
* ``tiny-qwen3-later/``  the same dense model 40 optimizer steps further on
  (the policy-lag pair: serve one, train the other),
* ``tiny-qwen3-moe/``    a Qwen3-MoE variant (2 layers, 8 experts, top-2, 0.57M),
* ``prompts.jsonl``      32 held-out prompts with their answers,

each model folder holding ``config.json``, ``generation_config.json``,
``model.safetensors`` (float32) and the tokenizer files. It needs ``torch``,
``transformers`` (>= 5) and ``tokenizers`` (the ``hf`` extra); no network,
CPU only. At the end it prints what it measured (completion length, entropy,
accuracy at T=1, the lag pair's rejections), the numbers in ``README.md`` here.

Why each choice was made
------------------------

Task. A worked running sum. The prompt is 5 to 7 digits joined by ``+``
(``4+7+1+5+1=``); the completion adds them one at a time, each step opened
by a connective and a verb drawn at random, then gives the total after
``####`` (the GSM8K convention the default reward reads)::

    4+7+1+5+1= then add 7: 4+7=11, next take 1: 11+1=12, now add 5: 12+5=17, so add 1: 17+1=18, #### 18

Each of these choices serves the probe. The completion is long (43 to 73
tokens when right, about 54 on average, against 2 or 3 for a bare sum), so position
effects, sequence-level rules and worst-sequence traces have something to
work on. Its tokens mix kinds: the connective (4 choices) and the verb (2)
are genuinely random, so a model that learnt them well still has 1.4 and 0.7
nats of entropy there; the digits copied from the prompt and the partial sums
are determined but only partly learnt by a model this small and this briefly
trained, so they range from near-certain to uncertain; ``:``, ``+``, ``=``
and ``,`` are near-certain. A mistake anywhere in the chain (a wrong digit
picked from the prompt, a wrong partial sum) usually carries into the total,
so sampled at T=1 some completions are right and some wrong: GRPO groups of
4 get rewards of both signs, which advantage-dependent rules need. The answer
is checked by exact match of the text after ``####``, so the chain itself can
be phrased any way. Everything the models see is generated here, so nothing
is downloaded.

Tokenizer. A byte-level BPE trained with ``tokenizers`` on generated
solutions: the 256-byte alphabet, three special tokens and 61 merges (the
words, `` ####``, and the numbers 10 to 25 with and without their leading
space; larger numbers are two digit tokens) give a vocabulary of 320 (a
multiple of 64; the corpus has too few distinct pairs for 384). The byte-level
pre-tokenizer splits at ``+``, ``=``, ``:``, ``,`` and spaces, so the tokens
of a prompt are always a prefix of the tokens of prompt + completion (checked
when building), and a completion decodes back to its text. The tokenizer
prepends ``<bos>`` (like Llama's), because every training sequence starts
with it; ``<eos>`` is *not* added by the tokenizer, the model learns to emit
it after the total so that generation stops by itself. ``<pad>`` is a
separate token (id 0), never trained on. It is saved through
``PreTrainedTokenizerFast`` with ``tokenizer_class`` rewritten to
``"PreTrainedTokenizerFast"``, the spelling older transformers and vLLM's
tokenizer loading also understand (transformers 5 writes
``"TokenizersBackend"``).

Models. Qwen3 and Qwen3-MoE are architectures that both HF transformers and
vLLM implement natively (no ``trust_remote_code``). ``head_dim`` is 32
because vLLM's CPU attention only supports head sizes in {32, 64, 80, ...};
4 query heads over 2 KV heads exercise grouped-query attention, and Qwen3's
q/k RMSNorm is part of the architecture. ``hidden_size`` 128 and two layers
keep the files at about 2.3 MB each and a training step affordable on two
cores. ``max_position_embeddings`` is 320: a prompt is at most 15 tokens and
a completion at most about 80, and 320 leaves the probe's automatic
``--max-tokens`` (256 new tokens within the context) its full 256; it is a
multiple of 32 (vLLM's CPU KV block size). ``tie_word_embeddings`` is False,
the common case for larger checkpoints and the one every loader handles
without special casing. The MoE variant has 8 experts, top-2 routing,
``norm_topk_prob=True`` (as in the released Qwen3-MoE models; HF and vLLM
both read it) and a small load-balancing loss while training (coefficient
0.01), so all experts are used and routing decisions are real (near-ties in
the router are one of the places where a low-precision sampler can diverge
from the trainer).

Training. AdamW, a short linear warm-up and cosine decay to 10 %, batches of
fresh random problems, the causal-LM loss over every token after ``<bos>``
(so prompt tokens also get realistic logprobs). The run is a fixed number of
steps, not a time budget, so it is reproducible: it is seeded (Python
``random`` for the data, ``torch.manual_seed`` for the weights and the
measuring samples), uses deterministic algorithms and a fixed thread count.
Bitwise-identical results are only expected on the same CPU type and library
versions; elsewhere the numbers differ slightly but the models are
equivalent. The step counts were picked so that everything builds in a few
minutes on two cores and the dense model is right on part of the prompts at
T=1 (see ``README.md`` here for the measured numbers). The weights are
trained and saved in float32, so a float32 sampler matches the trainer to
rounding error and any lower precision shows up as mismatch.

Policy lag. ``tiny-qwen3-later`` is the same training run as ``tiny-qwen3``,
40 steps further along the same schedule and data stream (``tiny-qwen3`` is
the snapshot at step 400 of 440): what an asynchronous RL trainer holds while
its sampler still serves the weights of a few updates ago. Same tokenizer,
architecture and vocabulary; different weights. The builder scores the dense
model's own T=1 samples with both and counts what IcePop, IPO, DPPO-TV and
KPop would reject (their default thresholds), so the README numbers can be
re-derived.

Prompts. 32 problems drawn with their own seed; training never sees these
digit lists (they are excluded from the training stream).

Chat. ``tiny-qwen3-chat`` is ``tiny-qwen3`` byte for byte (the same weights,
config and tokenizer files, copied) plus a chat template
(``chat_template.jinja``), so that ``probe --turns`` can render multi-turn
conversations on the bundled model: every user or tool message opens with
``<bos>`` and is written as is, every assistant message is its content then
``<eos>``, and no generation prompt is added (the model answers straight after
the message, as it was trained to after a prompt). A tool message that holds a
new sum (the probe's default tool response) is a new problem the model works
out; what it writes after a tool message is its own, the model never saw a
conversation. ``tiny-qwen3`` itself keeps no template, so its checkpoint
hash, and every run that recorded it, stay as they were. ``--only chat``
writes just this folder from an existing ``tiny-qwen3``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

HERE = Path(__file__).resolve().parent

VOCAB_SIZE = 320
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"  # ids 0, 1, 2
MAX_POSITIONS = 320
MIN_TERMS, MAX_TERMS = 5, 7
CONNECTIVES = ("then", "next", "now", "so")
VERBS = ("add", "take")
MARKER = "####"

TOKENIZER_SEED = 1234
PROMPTS_SEED = 20260
N_PROMPTS = 32
DENSE_SEED = 0
MOE_SEED = 1
EVAL_SEED = 777
NUM_THREADS = 2

COMMON = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=MAX_POSITIONS,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=False,
    attention_bias=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    use_cache=True,
)

DENSE = dict(num_hidden_layers=2, intermediate_size=512)
MOE = dict(
    num_hidden_layers=2,
    intermediate_size=256,  # only used by layers listed in mlp_only_layers (none)
    moe_intermediate_size=64,
    num_experts=8,
    num_experts_per_tok=2,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    router_aux_loss_coef=0.01,
    output_router_logits=False,
)

# steps, batch size, peak learning rate, warm-up steps; `later` extra steps for the lag checkpoint
DENSE_TRAIN = dict(steps=400, batch_size=32, lr=6e-3, warmup=30, later=40)
MOE_TRAIN = dict(steps=300, batch_size=32, lr=6e-3, warmup=30, later=0)


# --- the task -----------------------------------------------------------------


def make_terms(rng: random.Random) -> tuple[int, ...]:
    return tuple(rng.randint(0, 9) for _ in range(rng.randint(MIN_TERMS, MAX_TERMS)))


def prompt_text(terms) -> str:
    return "+".join(map(str, terms)) + "="


def worked_text(terms, rng: random.Random) -> str:
    """The completion: a running sum, one step per term, a random connective each, then the total."""
    out, s = [], terms[0]
    for d in terms[1:]:
        out.append(f" {rng.choice(CONNECTIVES)} {rng.choice(VERBS)} {d}: {s}+{d}={s + d},")
        s += d
    return "".join(out) + f" {MARKER} {s}"


def final_answer(completion: str) -> str:
    """What the reward compares with ``answer``: the text after the last marker."""
    return completion.rpartition(MARKER)[2].strip()  # as mismatchscope.probe.rewards.final_answer


def make_prompts(seed: int, n: int) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    out: list[tuple[int, ...]] = []
    while len(out) < n:
        t = make_terms(rng)
        if t not in out:
            out.append(t)
    return out


def build_tokenizer() -> PreTrainedTokenizerFast:
    rng = random.Random(TOKENIZER_SEED)
    corpus = []
    for _ in range(5000):
        t = make_terms(rng)
        corpus.append(prompt_text(t) + worked_text(t, rng))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    assert [tok.token_to_id(t) for t in (PAD, BOS, EOS)] == [0, 1, 2]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 1)]
    )
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        add_bos_token=True,
        add_eos_token=False,
        padding_side="right",
        model_max_length=MAX_POSITIONS,
        clean_up_tokenization_spaces=False,
    )
    # The prompt's tokens must be a prefix of prompt+completion's tokens, and
    # the completion must decode back to its text.
    rng = random.Random(99)
    for t in make_prompts(99, 200):
        c = worked_text(t, rng)
        p = hf_tok(prompt_text(t))["input_ids"]
        full = hf_tok(prompt_text(t) + c)["input_ids"]
        assert p[0] == 1 and full[: len(p)] == p, (t, p, full)
        assert hf_tok.decode(full[len(p) :], skip_special_tokens=True) == c
    return hf_tok


class Stream:
    """Fresh random problems with their worked completions, skipping the held-out prompts."""

    def __init__(self, tok: PreTrainedTokenizerFast, seed: int, exclude: set):
        self.tok = tok
        self.rng = random.Random(seed)
        self.exclude = exclude

    def batch(self, n: int):
        rows = []
        while len(rows) < n:
            t = make_terms(self.rng)
            if t in self.exclude:
                continue
            rows.append(self.tok(prompt_text(t) + worked_text(t, self.rng))["input_ids"] + [self.tok.eos_token_id])
        return pad_rows(rows, self.tok.pad_token_id)


def pad_rows(rows, pad_id):
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids, mask, ids.masked_fill(mask == 0, -100)


# --- training -----------------------------------------------------------------


def train(model, tok, cfg, seed, exclude, label, snapshot_at=None) -> tuple[dict, dict | None]:
    """Train for steps + later steps on one schedule; return stats and the state at ``snapshot_at``."""
    stream = Stream(tok, seed + 100, exclude)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), weight_decay=0.01)
    steps, warm = cfg["steps"] + cfg["later"], cfg["warmup"]

    def lr_at(s):
        if s < warm:
            return (s + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    t0, w0 = time.process_time(), time.perf_counter()
    recent: list[float] = []
    snapshot = None
    for step in range(steps):
        if step == snapshot_at:
            snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
        ids, mask, labels = stream.batch(cfg["batch_size"])
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        recent = (recent + [out.loss.item()])[-50:]
        if step % 100 == 0 or step == steps - 1:
            print(
                f"[{label}] step {step:5d}  loss {out.loss.item():.3f}  ({time.perf_counter() - w0:.0f}s)", flush=True
            )
    return {
        "steps": steps,
        "batch_size": cfg["batch_size"],
        "train_loss_last50": sum(recent) / len(recent),
        "cpu_seconds": time.process_time() - t0,
        "wall_seconds": time.perf_counter() - w0,
    }, snapshot


# --- measuring ----------------------------------------------------------------


@torch.no_grad()
def sample(model, tok, prompts, n, seed, max_new_tokens=200):
    """T=1, full-vocabulary samples (what the probe asks vLLM for by default): (prompt ids, completion ids) pairs."""
    model.eval()
    torch.manual_seed(seed)
    pids = [tok(prompt_text(t))["input_ids"] for t in prompts for _ in range(n)]
    width = max(map(len, pids))
    cur = torch.full((len(pids), width), tok.pad_token_id, dtype=torch.long)
    am = torch.zeros_like(cur)
    for i, p in enumerate(pids):
        cur[i, width - len(p) :] = torch.tensor(p)
        am[i, width - len(p) :] = 1
    out = model.generate(
        input_ids=cur,
        attention_mask=am,
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    pairs = []
    for i, p in enumerate(pids):
        c = out[i, width:].tolist()
        if tok.eos_token_id in c:
            c = c[: c.index(tok.eos_token_id) + 1]
        else:
            c = [x for x in c if x != tok.pad_token_id]
        pairs.append((p, c))
    model.train()
    return pairs


@torch.no_grad()
def token_logprobs(model, pairs):
    """Per completion token: (logprob of the sampled token, entropy of the position), teacher-forced in fp32."""
    model.eval()
    ids, mask, _ = pad_rows([p + c for p, c in pairs], 0)
    lp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), -1)
    out = []
    for i, (p, c) in enumerate(pairs):
        pos = torch.arange(len(p) - 1, len(p) + len(c) - 1)
        rows = lp[i, pos]
        out.append((rows.gather(-1, torch.tensor(c)[:, None])[:, 0], -(rows.exp() * rows).sum(-1)))
    model.train()
    return out


def quality(model, tok, prompts, n, seed) -> dict:
    pairs = sample(model, tok, prompts, n, seed)
    answers = [str(sum(t)) for t in prompts for _ in range(n)]
    texts = [tok.decode(c, skip_special_tokens=True) for _, c in pairs]
    correct = [final_answer(x) == a for x, a in zip(texts, answers, strict=True)]
    ents = torch.cat([e for _, e in token_logprobs(model, pairs)])
    return {
        "samples": len(pairs),
        "mean_completion_tokens": sum(len(c) for _, c in pairs) / len(pairs),
        "max_completion_tokens": max(len(c) for _, c in pairs),
        "entropy_share_above_0.5": (ents > 0.5).float().mean().item(),
        "mean_entropy": ents.mean().item(),
        "accuracy_T1": sum(correct) / len(correct),
        "groups_with_both_rewards": sum(0 < sum(correct[i : i + n]) < n for i in range(0, len(correct), n)),
    }


def lag_rejects(sampler_model, trainer_model, tok, prompts, n, seed) -> dict:
    """What IcePop, IPO, DPPO-TV and KPop would reject if the sampler served one checkpoint and the trainer the other."""
    pairs = sample(sampler_model, tok, prompts, n, seed)
    q_lp = [lp for lp, _ in token_logprobs(sampler_model, pairs)]
    p_lp = [lp for lp, _ in token_logprobs(trainer_model, pairs)]
    answers = [str(sum(t)) for t in prompts for _ in range(n)]
    rewards = torch.tensor(
        [
            float(final_answer(tok.decode(c, skip_special_tokens=True)) == a)
            for (_, c), a in zip(pairs, answers, strict=True)
        ]
    )
    g = rewards.view(-1, n)
    adv = ((g - g.mean(1, keepdim=True)) / (g.std(1, keepdim=True) + 1e-6)).view(-1)
    q = torch.cat(q_lp).exp().double()
    p = torch.cat(p_lp).exp().double()
    a = torch.cat([adv[i].expand(len(x)) for i, x in enumerate(q_lp)]).double()
    r = p / q
    pc, qc = p.clamp(1e-6, 1 - 1e-6), q.clamp(1e-6, 1 - 1e-6)

    def bkl(x, y):
        return x * (x / y).log() + (1 - x) * ((1 - x) / (1 - y)).log()

    masks = {
        "icepop": (r < 0.5) | (r > 5.0),
        "ipo": (p - q).abs() > 0.3,
        "dppo-tv": ((a > 0) & (p - q > 0.15)) | ((a <= 0) & (p - q < -0.15)),
        "kpop": torch.maximum(bkl(qc, pc), bkl(pc, qc)) > 0.1,
    }
    names = list(masks)
    return {
        "tokens": int(q.numel()),
        "rejects": {k: int(m.sum()) for k, m in masks.items()},
        "overlap": {f"{x}&{y}": int((masks[x] & masks[y]).sum()) for i, x in enumerate(names) for y in names[i + 1 :]},
        "max_abs_p_minus_q": float((p - q).abs().max()),
    }


# --- saving -------------------------------------------------------------------

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}{{- message['content'] + eos_token -}}"
    "{%- else -%}{%- if not loop.first -%}{{- bos_token -}}{%- endif -%}{{- message['content'] -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
"""tiny-qwen3-chat's template: user, system and tool messages open with <bos>, assistant messages end with <eos>."""


def save_chat(out: Path) -> None:
    """``tiny-qwen3-chat``: ``tiny-qwen3``'s files copied unchanged, and the chat template beside them."""
    src, dst = out / "tiny-qwen3", out / "tiny-qwen3-chat"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    (dst / "chat_template.jinja").write_text(CHAT_TEMPLATE + "\n")
    for f in dst.iterdir():
        f.chmod(0o644)


def save(model, tok, out_dir: Path) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    model = model.to(torch.float32).eval()
    model.config.dtype = "float32"
    model.save_pretrained(out_dir)
    GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    ).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    cfg_path = out_dir / "tokenizer_config.json"
    tcfg = json.loads(cfg_path.read_text())
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    # Explicit, so that every loader agrees the tokenizer prepends <bos> (the
    # post-processor in tokenizer.json does it either way).
    tcfg["add_bos_token"] = True
    tcfg["add_eos_token"] = False
    cfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    if "num_local_experts" in model.config.to_dict():
        # transformers 5 writes `num_local_experts`; transformers 4.x and
        # configs in the wild spell it `num_experts` (and would otherwise
        # default to 128 experts). Write both.
        conf_path = out_dir / "config.json"
        conf = json.loads(conf_path.read_text())
        conf["num_experts"] = conf["num_local_experts"]
        conf_path.write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")
    for f in out_dir.iterdir():
        f.chmod(0o644)
    assert (out_dir / "model.safetensors").exists()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: next to this script)")
    ap.add_argument("--dense-steps", type=int, default=DENSE_TRAIN["steps"])
    ap.add_argument("--later-steps", type=int, default=DENSE_TRAIN["later"])
    ap.add_argument("--moe-steps", type=int, default=MOE_TRAIN["steps"])
    ap.add_argument(
        "--only", choices=["dense", "moe", "chat"], default=None, help="build one family only (chat: from tiny-qwen3)"
    )
    args = ap.parse_args()

    if args.only == "chat":
        save_chat(args.out)
        return
    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    w_all = time.perf_counter()

    tok = build_tokenizer()
    prompts = make_prompts(PROMPTS_SEED, N_PROMPTS)
    with open(args.out / "prompts.jsonl", "w") as f:
        for t in prompts:
            f.write(json.dumps({"prompt": prompt_text(t), "answer": str(sum(t))}) + "\n")
    exclude = set(prompts)

    report = {}
    runs = [
        (
            "tiny-qwen3",
            Qwen3ForCausalLM,
            Qwen3Config,
            DENSE,
            dict(DENSE_TRAIN, steps=args.dense_steps, later=args.later_steps),
            DENSE_SEED,
        ),
        ("tiny-qwen3-moe", Qwen3MoeForCausalLM, Qwen3MoeConfig, MOE, dict(MOE_TRAIN, steps=args.moe_steps), MOE_SEED),
    ]
    for name, cls, cfg_cls, arch, tcfg, seed in runs:
        if args.only and (args.only == "moe") != name.endswith("moe"):
            continue
        torch.manual_seed(seed)
        model = cls(cfg_cls(**COMMON, **arch)).to(torch.float32)
        if name.endswith("moe"):
            model.config.output_router_logits = True  # load-balancing loss while training only
        n_params = sum(p.numel() for p in model.parameters())
        later = tcfg["later"]
        stats, snap = train(model, tok, tcfg, seed, exclude, name, snapshot_at=tcfg["steps"] if later else None)
        if name.endswith("moe"):
            model.config.output_router_logits = False
        stats["parameters"] = n_params
        if later:
            earlier = cls(cfg_cls(**COMMON, **arch)).to(torch.float32)
            earlier.load_state_dict(snap)
            save(model, tok, args.out / "tiny-qwen3-later")
            save(earlier, tok, args.out / name)
            report["tiny-qwen3-later"] = quality(model, tok, prompts, 4, EVAL_SEED)
            report["lag_pair"] = lag_rejects(earlier, model, tok, prompts, 4, EVAL_SEED)
            model = earlier
        else:
            save(model, tok, args.out / name)
        stats.update(quality(model, tok, prompts, 4, EVAL_SEED))
        report[name] = stats
        print(f"[{name}] {json.dumps(stats)}", flush=True)
    if args.only != "moe":
        save_chat(args.out)
    report["total_wall_seconds"] = time.perf_counter() - w_all
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
