"""Build mismatchscope's sample checkpoints and prompts, reproducibly.

Run from the repository root::

    python sample_data/build_sample_models.py

It writes, next to this script:

* ``tiny-qwen3/``      a dense Qwen3-style causal LM (2 layers, 0.59M parameters),
* ``tiny-qwen3-moe/``  a Qwen3-MoE variant (2 layers, 8 experts, top-2, 0.59M),
* ``prompts.jsonl``    32 held-out addition prompts with their answers,

each model folder holding ``config.json``, ``generation_config.json``,
``model.safetensors`` (float32) and the tokenizer files. It needs ``torch``,
``transformers`` (>= 5) and ``tokenizers`` (the ``hf`` extra); no network.

Why each choice was made
------------------------

Task. Integer addition, ``123+456=579`` with operands in 0..999. Each
operand first draws its number of digits (1, 2 or 3, uniformly), then a value
with that many digits: uniform operands would make almost every sum a hard
3-digit one, which a model this small does not learn in a couple of minutes,
while the mix gives easy sums (nearly always right) and hard ones (often
wrong). A model trained on it briefly gives next-token distributions that mix
confident tokens (``+``, ``=``, end of sequence, easy digits) with uncertain
ones (the random operands, the harder digits of the sum), and the sum gives an
exact, checkable 0/1 reward. Everything the models see is generated here, so
nothing is downloaded.

Tokenizer. A byte-level BPE trained with ``tokenizers`` on generated sums:
the 256-byte alphabet, three special tokens and 125 merges over digits give a
vocabulary of 384 (a multiple of 64), so the distributions are over a few
hundred entries rather than a dozen characters. The byte-level pre-tokenizer
splits ``123+456=`` at ``+`` and ``=``, so the tokens of a prompt are always a
prefix of the tokens of prompt + answer (no merge crosses the ``=``). Numbers
are split by the merges (``579`` -> ``5`` ``79``), which is realistic. The
tokenizer prepends ``<bos>`` (like Llama's), because every training sequence
starts with it; ``<eos>`` is *not* added by the tokenizer, the model learns to
emit it after the answer so that generation stops by itself. ``<pad>`` is a
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
keep the files at about 2.4 MB each and a training step cheap (about 0.06 s
on two idle cores), so enough steps fit in a couple of minutes.
``max_position_embeddings`` is 64: a prompt is at most 9 tokens (``<bos>`` +
3 + ``+`` + 3 + ``=``, 7 with the digit merges) and an answer at most 5 (4
digits + ``<eos>``), so 64 leaves room for long samples and is a multiple
of 32 (vLLM's CPU KV block size). ``tie_word_embeddings`` is False, the
common case for larger checkpoints and the one every loader handles without
special casing. The MoE variant has 8 experts, top-2 routing,
``norm_topk_prob=True`` (as in the released Qwen3-MoE models; HF and vLLM
both read it) and a small load-balancing loss while training (coefficient
0.01), so all experts are used and routing decisions are real (near-ties in
the router are one of the places where a low-precision sampler can diverge
from the trainer).

Training. AdamW, a short linear warm-up and cosine decay, batches of fresh
random sums, the causal-LM loss over every token after ``<bos>`` (so prompt
tokens also get realistic logprobs). The run is a fixed number of steps, not a
time budget, so it is reproducible: it is seeded (Python ``random`` for the
data, ``torch.manual_seed`` for the weights), uses deterministic algorithms
and a fixed thread count. Bitwise-identical results are only expected on the
same CPU type and library versions; elsewhere the numbers differ slightly but
the models are equivalent. The number of steps was picked so that the dense
model trains in a couple of minutes on two otherwise idle CPU cores and ends
with a sum that is often but not always right (about a quarter of held-out
prompts greedily; see ``README.md`` here for the measured numbers).
The weights are trained and saved in float32, so a float32 sampler matches
the trainer to rounding error and any lower precision shows up as mismatch.

Prompts. 32 sums drawn with their own seed; training never sees these
operand pairs (they are excluded from the training stream).
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

MAX_OPERAND = 999
VOCAB_SIZE = 384
PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"  # ids 0, 1, 2
MAX_POSITIONS = 64

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

# steps, batch size, peak learning rate
DENSE_TRAIN = dict(steps=1500, batch_size=128, lr=3e-3, warmup=50)
MOE_TRAIN = dict(steps=1000, batch_size=128, lr=3e-3, warmup=50)


def sum_text(a: int, b: int) -> str:
    return f"{a}+{b}={a + b}"


def sample_operand(rng: random.Random) -> int:
    """0..999 with the number of digits uniform in {1, 2, 3}: easy and hard sums."""
    digits = rng.randint(1, 3)
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def make_prompts(seed: int, n: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    pairs: list[tuple[int, int]] = []
    while len(pairs) < n:
        p = (sample_operand(rng), sample_operand(rng))
        if p not in pairs:
            pairs.append(p)
    return pairs


def build_tokenizer() -> PreTrainedTokenizerFast:
    rng = random.Random(TOKENIZER_SEED)
    corpus = [sum_text(rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)) for _ in range(20000)]
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
    # The prompt's tokens must be a prefix of prompt+answer's tokens.
    for a, b in make_prompts(99, 200):
        p = hf_tok(f"{a}+{b}=")["input_ids"]
        full = hf_tok(sum_text(a, b))["input_ids"]
        assert p[0] == 1 and full[: len(p)] == p, (a, b, p, full)
    return hf_tok


class SumStream:
    """Fresh random sums, skipping the held-out prompt pairs."""

    def __init__(self, tok: PreTrainedTokenizerFast, seed: int, exclude: set[tuple[int, int]]):
        self.tok = tok
        self.rng = random.Random(seed)
        self.exclude = exclude

    def pairs(self, n: int) -> list[tuple[int, int]]:
        out = []
        while len(out) < n:
            p = (sample_operand(self.rng), sample_operand(self.rng))
            if p not in self.exclude:
                out.append(p)
        return out

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """input_ids, attention_mask, labels (-100 on padding); each row is <bos> a+b=c <eos>."""
        return encode_batch(self.tok, self.pairs(n))


def encode_batch(tok, pairs):
    rows = [tok(sum_text(a, b))["input_ids"] + [tok.eos_token_id] for a, b in pairs]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return ids, mask, labels


@torch.no_grad()
def evaluate(model, tok, pairs) -> dict[str, float]:
    """Loss over the answer tokens (after '=', including <eos>) and greedy exact-match accuracy."""
    model.eval()
    ids, mask, labels = encode_batch(tok, pairs)
    eq = tok.convert_tokens_to_ids("=")
    ans_labels = labels.clone()
    for i in range(len(pairs)):
        pos = (ids[i] == eq).nonzero()[0, 0].item()
        ans_labels[i, : pos + 1] = -100
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1)
    tgt = ans_labels[:, 1:]
    tok_lp = lp.gather(-1, tgt.clamp(min=0)[..., None])[..., 0]
    answer_loss = -(tok_lp * (tgt != -100)).sum() / (tgt != -100).sum()

    # Greedy decoding, batched, left-padded prompts.
    prompts = [tok(f"{a}+{b}=")["input_ids"] for a, b in pairs]
    width = max(map(len, prompts))
    cur = torch.full((len(prompts), width), tok.pad_token_id, dtype=torch.long)
    am = torch.zeros_like(cur)
    for i, p in enumerate(prompts):
        cur[i, width - len(p) :] = torch.tensor(p)
        am[i, width - len(p) :] = 1
    out = model.generate(
        input_ids=cur,
        attention_mask=am,
        max_new_tokens=6,
        do_sample=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    texts = tok.batch_decode(out[:, width:], skip_special_tokens=True)
    correct = sum(t.strip() == str(a + b) for t, (a, b) in zip(texts, pairs))
    model.train()
    return {"answer_loss": answer_loss.item(), "greedy_accuracy": correct / len(pairs)}


def train(model, tok, cfg, seed, exclude, label) -> dict:
    stream = SumStream(tok, seed + 100, exclude)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(0.9, 0.98), weight_decay=0.01)
    steps, warm = cfg["steps"], cfg["warmup"]

    def lr_at(s):
        if s < warm:
            return (s + 1) / warm
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    t0 = time.process_time()
    w0 = time.perf_counter()
    recent: list[float] = []
    for step in range(steps):
        ids, mask, labels = stream.batch(cfg["batch_size"])
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        recent.append(out.loss.item())
        recent = recent[-50:]
        if step % 100 == 0 or step == steps - 1:
            print(f"[{label}] step {step:5d}  loss {out.loss.item():.3f}  ({time.perf_counter() - w0:.0f}s)", flush=True)
    return {
        "steps": steps,
        "batch_size": cfg["batch_size"],
        "train_loss_last50": sum(recent) / len(recent),
        "cpu_seconds": time.process_time() - t0,
        "wall_seconds": time.perf_counter() - w0,
    }


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
    ap.add_argument("--moe-steps", type=int, default=MOE_TRAIN["steps"])
    args = ap.parse_args()

    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)

    tok = build_tokenizer()
    prompt_pairs = make_prompts(PROMPTS_SEED, N_PROMPTS)
    with open(args.out / "prompts.jsonl", "w") as f:
        for a, b in prompt_pairs:
            f.write(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n")
    exclude = set(prompt_pairs)
    eval_pairs = [p for p in make_prompts(EVAL_SEED, 300) if p not in exclude][:256]

    report = {}
    for name, cls, cfg_cls, arch, tcfg, seed in (
        ("tiny-qwen3", Qwen3ForCausalLM, Qwen3Config, DENSE, dict(DENSE_TRAIN, steps=args.dense_steps), DENSE_SEED),
        ("tiny-qwen3-moe", Qwen3MoeForCausalLM, Qwen3MoeConfig, MOE, dict(MOE_TRAIN, steps=args.moe_steps), MOE_SEED),
    ):
        torch.manual_seed(seed)
        config = cfg_cls(**COMMON, **arch)
        model = cls(config).to(torch.float32)
        if name.endswith("moe"):
            model.config.output_router_logits = True  # load-balancing loss while training only
        n_params = sum(p.numel() for p in model.parameters())
        stats = train(model, tok, tcfg, seed, exclude, name)
        if name.endswith("moe"):
            model.config.output_router_logits = False
        stats.update(evaluate(model, tok, eval_pairs))
        stats["parameters"] = n_params
        save(model, tok, args.out / name)
        report[name] = stats
        print(f"[{name}] {json.dumps(stats)}", flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
