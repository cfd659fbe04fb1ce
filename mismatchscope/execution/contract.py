"""Are the two sides one program? The identities that must agree, and the fallbacks each side ran into.

Two logprobs of a token are two readings of one number only when both sides
ran the same weights, read the prompt with the same tokenizer and chat
template, and took the logprob from the same distribution (temperature,
top-p, top-k). When any of these differ, the gap measures the difference in
the program, and no numerical reading (rounding, kernels, batch shape)
applies to it: :func:`contract` names each identity that differs. An
identity one side did not record is not compared.

A side whose numerics ran otherwise than asked (a float16 engine asked for
and float32 used, an attention kernel it fell back from) or that logged a
fallback is a finding of its own (:func:`fallbacks`): the program is the
same on both sides, but not the one that was meant.

Pure functions of the record: ``doctor`` and ``certify`` call them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from typing import Any

from .compare import shown
from .record import Numerics, RunProvenance, SideProvenance

DISTRIBUTION = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")
"""the sampling parameters that change the distribution a processed logprob is read from."""
_RAW = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
"""what raw logprobs are read at, whatever the request's sampling (vLLM's ``raw_logprobs``)."""
NO_READING = "no numerical reading applies until they match"


@dataclass(frozen=True)
class Difference:
    """One identity the two sides do not share."""

    identity: str = field(metadata={"doc": "weights, checkpoint files, tokenizer, chat template or sampling.KEY"})
    sampler: Any
    trainer: Any
    detail: str = field(metadata={"doc": "the difference in one sentence"})


@dataclass(frozen=True)
class Contract:
    """The identities both sides recorded, and those that differ."""

    compared: list[str] = field(metadata={"doc": "identities recorded on both sides"})
    differences: list[Difference]
    not_compared: list[str] = field(metadata={"doc": "identities one side or both did not record"})

    @property
    def checked(self) -> bool:
        return bool(self.compared)

    @property
    def same(self) -> bool | None:
        """True: every compared identity agrees; False: one differs; None: nothing could be compared."""
        if self.differences:
            return False
        return True if self.compared else None

    def sentence(self) -> str:
        if self.differences:
            what = "; ".join(d.detail for d in self.differences)
            return f"the two sides are not the same program: {what}; {NO_READING}"
        if not self.compared:
            return "not checked: neither side's identities are recorded on both sides"
        unchecked = f" ({', '.join(self.not_compared)} not recorded on both)" if self.not_compared else ""
        return f"both sides ran the same {', '.join(self.compared)}{unchecked}"


def contract(prov: RunProvenance) -> Contract:
    """The identities of ``prov``'s two sides, compared."""
    s, t = prov.sampler.identities, prov.trainer.identities
    compared: list[str] = []
    differences: list[Difference] = []
    missing: list[str] = []

    def check(name: str, a: Any, b: Any, detail: str | None = None) -> None:
        if a is None or b is None:
            missing.append(name)
            return
        compared.append(name)
        if a != b:
            verb = "differ" if name.endswith("s") else "differs"
            differences.append(
                Difference(name, a, b, detail or f"{name} {verb} (sampler {shown(a)}, trainer {shown(b)})")
            )

    if s.weights is not None and t.weights is not None:
        check("weights", s.weights.combined, t.weights.combined, _weights_detail(prov))
    elif s.checkpoint_sha256 is not None and t.checkpoint_sha256 is not None:
        check("checkpoint files", s.checkpoint_sha256, t.checkpoint_sha256)
    else:
        missing.append("weights")
    check("tokenizer", s.tokenizer, t.tokenizer)
    check("chat template", s.chat_template, t.chat_template)
    _check_sampling(prov.sampler, prov.trainer, compared, differences, missing)
    return Contract(compared, differences, missing)


def _weights_detail(prov: RunProvenance) -> str:
    a, b = prov.sampler.identities.weights, prov.trainer.identities.weights
    assert a is not None and b is not None
    files = [n for n in dict.fromkeys([*a.files, *b.files]) if a.files.get(n) != b.files.get(n)]
    named = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        f"weights differ (sampler {shown(a.combined)}, trainer {shown(b.combined)}"
        + (f"; files {named}" if files else "")
        + ")"
    )


def distribution(side: SideProvenance) -> dict[str, float] | None:
    """The parameters of the distribution the side's logprobs are read from: raw logprobs are read at
    temperature 1 without truncation, whatever the request said; None when the side did not record them."""
    sampling = side.identities.sampling
    if sampling is None:
        return None
    mode = sampling.get("logprobs_mode")
    if isinstance(mode, str) and mode.startswith("raw"):
        return dict(_RAW)
    out = {k: sampling[k] for k in DISTRIBUTION if sampling.get(k) is not None}
    if isinstance(out.get("top_k"), int) and out["top_k"] < 0:
        out["top_k"] = 0
    return out


def _check_sampling(
    sampler: SideProvenance, trainer: SideProvenance, compared: list[str], differences: list[Difference], missing
) -> None:
    a, b = distribution(sampler), distribution(trainer)
    keys = [k for k in DISTRIBUTION if a is not None and b is not None and k in a and k in b]
    if not keys:
        missing.append("sampling parameters")
        return
    compared.append("sampling parameters")
    assert a is not None and b is not None
    for k in keys:
        if float(a[k]) != float(b[k]):
            differences.append(
                Difference(
                    f"sampling.{k}",
                    a[k],
                    b[k],
                    f"the sampler's logprobs are at {k} {a[k]:g}, the trainer's at {b[k]:g}",
                )
            )


@dataclass(frozen=True)
class Fallback:
    side: str = field(metadata={"doc": "sampler or trainer"})
    detail: str = field(metadata={"doc": "what was asked and what ran, or the engine's own line"})


def fallbacks(prov: RunProvenance) -> list[Fallback]:
    """Each side's numerics that ran otherwise than asked, then every fallback its engine logged."""
    out = []
    for role in ("sampler", "trainer"):
        side: SideProvenance = getattr(prov, role)
        out += [Fallback(role, d) for d in requested_vs_used(side)]
        out += [Fallback(role, f"logged: {line}") for line in side.fallbacks or []]
    return out


def requested_vs_used(side: SideProvenance) -> list[str]:
    """``weights dtype: asked for float16, ran float32`` for each field asked for and run otherwise."""
    from .compare import label

    out = []
    for f in fields(Numerics):
        asked, ran = getattr(side.requested, f.name), getattr(side.used, f.name)
        if asked is None or ran is None or _same_setting(f.name, asked, ran):
            continue
        name = label(f"used.{f.name}").removesuffix(" (used)")
        out.append(f"{name}: asked for {shown(asked)}, ran {shown(ran)}")
    return out


def _same_setting(name: str, asked: Any, ran: Any) -> bool:
    if name == "attention_backend":
        ran_any = [kernel_key(k) for k in str(ran).split(",")]
        return kernel_key(str(asked)) in ran_any
    if isinstance(asked, str) and isinstance(ran, str):
        return asked.lower() == ran.lower()
    return asked == ran


def kernel_key(name: str) -> str:
    """An attention kernel's name in one spelling, so an engine's option (``FLASH_ATTN``) and the class that ran
    (``FlashAttentionImpl``, ``CPUAttentionBackendImpl``) compare."""
    key = re.sub(r"[^a-z0-9]", "", name.strip().lower())
    key = key.replace("attention", "attn")
    for suffix in ("impl", "backend"):
        key = key.removesuffix(suffix)
    return key
