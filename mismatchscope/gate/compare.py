"""Are baseline and candidate comparable? Only the serving stack should differ.

A serving upgrade is judged by probing the same checkpoint with the same
prompts and sampling settings twice. Anything else that differs (weights,
prompts, temperature, n, seed, the trainer side's numerics) changes the
mismatch by itself, so the gate refuses unless the user names the key with
``--allow-different``. Files without probe metadata (pairs exported from an
RL framework) cannot be checked; the gate compares them with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import GateConfigError, IncomparableRunsError

SAMPLING_KEYS = ("temperature", "top_p", "top_k", "n", "max_tokens", "top_k_logprobs", "seed", "logprobs_mode")
TRAINER_KEYS = ("dtype", "attn_implementation", "fp32_lm_head")
"""the trainer settings that change trainer logprobs; device and batch size are not compared."""
TRAINER_CHECKPOINT = "trainer.checkpoint"
"""the trainer's own weights when they are not the sampler's (``--trainer-checkpoint``: policy lag)."""
SAME_AS_SAMPLER = "the sampler's"
ALIASES = {
    "checkpoint": ("checkpoint.sha256",),
    "prompts": ("prompts.sha256",),
    "sampling": tuple(f"sampling.{k}" for k in SAMPLING_KEYS),
    "trainer": (*(f"trainer.{k}" for k in TRAINER_KEYS), TRAINER_CHECKPOINT),
    "n": ("sampling.n",),
    "seed": ("sampling.seed",),
}
_HIDDEN_SERVING_KEYS = {"api_key_env"}
_MISSING = object()


@dataclass(frozen=True)
class Difference:
    key: str
    baseline: Any
    candidate: Any
    allowed: bool = False

    def text(self) -> str:
        return f"{self.key} differs (baseline {_short(self.baseline)}, candidate {_short(self.candidate)})"

    def change(self) -> str:
        return f"{self.key}: {_short(self.baseline)} -> {_short(self.candidate)}"


@dataclass
class Comparability:
    checked: bool
    """False when a file carries no probe metadata."""
    differences: list[Difference] = field(default_factory=list)
    """compared keys that differ (all allowed, or ``compare_runs`` would have raised)."""
    serving: list[Difference] = field(default_factory=list)
    """what differs in the sampler's recorded settings: the change under test."""
    warning: str | None = None


def valid_keys() -> list[str]:
    return [
        *ALIASES,
        *(f"sampling.{k}" for k in SAMPLING_KEYS),
        *(f"trainer.{k}" for k in TRAINER_KEYS),
        TRAINER_CHECKPOINT,
        "checkpoint.sha256",
        "prompts.sha256",
    ]


def check_keys(keys: tuple[str, ...] | list[str]) -> None:
    valid = valid_keys()
    for k in keys:
        if k not in valid:
            raise GateConfigError(
                f"--allow-different {k!r} is not a comparability key", hint=f"valid keys: {', '.join(valid)}"
            )


def has_probe_metadata(run: dict | None) -> bool:
    return (
        bool(run)
        and isinstance(run.get("checkpoint"), dict)
        and "sha256" in run["checkpoint"]
        and isinstance(run.get("sampling"), dict)
    )


def compare_runs(
    baseline: dict | None, candidate: dict | None, allow: tuple[str, ...] | list[str] = ()
) -> Comparability:
    """Raises ``IncomparableRunsError`` listing every difference not named in ``allow``."""
    missing = [name for name, run in (("baseline", baseline), ("candidate", candidate)) if not has_probe_metadata(run)]
    if missing:
        return Comparability(
            False,
            warning=(
                f"the {' and the '.join(missing)} carr{'y' if len(missing) > 1 else 'ies'} no probe metadata (checkpoint and prompts "
                "hashes, sampling settings): comparability could not be checked. Make sure both were sampled from the same "
                "checkpoint and prompts with the same sampling settings."
            ),
        )
    assert baseline is not None and candidate is not None
    allowed = {k for a in allow for k in ALIASES.get(a, (a,))}
    diffs = [Difference(k, b, c, k in allowed) for k, b, c in _compared(baseline, candidate) if b != c]
    refused = [d for d in diffs if not d.allowed]
    if refused:
        keys = " ".join(f"--allow-different {_alias(d.key)}" for d in refused)
        raise IncomparableRunsError(
            "baseline and candidate are not comparable: " + "; ".join(d.text() for d in refused),
            hint=f"only the serving stack should differ; if the difference is intended, pass {keys}",
        )
    return Comparability(
        True, diffs, _serving_differences(baseline.get("sampler") or {}, candidate.get("sampler") or {})
    )


def _compared(b: dict, c: dict):
    yield "checkpoint.sha256", b["checkpoint"]["sha256"], c["checkpoint"]["sha256"]
    yield "prompts.sha256", _get(b, "prompts", "sha256"), _get(c, "prompts", "sha256")
    keys = list(dict.fromkeys([*SAMPLING_KEYS, *b["sampling"], *c["sampling"]]))
    for k in keys:
        yield f"sampling.{k}", b["sampling"].get(k, _MISSING), c["sampling"].get(k, _MISSING)
    for k in TRAINER_KEYS:
        yield f"trainer.{k}", _get(b, "trainer", k), _get(c, "trainer", k)
    yield TRAINER_CHECKPOINT, _trainer_weights(b), _trainer_weights(c)


def _trainer_weights(run: dict) -> str:
    """The trainer checkpoint's digest, or "the sampler's" when the trainer ran the sampler's weights.

    Compared as the relation, not the raw digest: two runs of another
    checkpoint without policy lag differ in ``checkpoint`` only.
    """
    rec = run.get("trainer_checkpoint")
    if isinstance(rec, dict) and rec.get("sha256") and rec["sha256"] != run["checkpoint"]["sha256"]:
        return rec["sha256"]
    return SAME_AS_SAMPLER


def _serving_differences(b: dict, c: dict) -> list[Difference]:
    out = []
    for k in dict.fromkeys([*b, *c]):
        if k in _HIDDEN_SERVING_KEYS:
            continue
        vb, vc = b.get(k, _MISSING), c.get(k, _MISSING)
        if vb != vc:
            out.append(Difference(f"sampler.{k}", vb, vc, True))
    return out


def _get(run: dict, section: str, key: str) -> Any:
    sec = run.get(section)
    return sec.get(key, _MISSING) if isinstance(sec, dict) else _MISSING


def _alias(key: str) -> str:
    for short in ("n", "seed"):
        if ALIASES[short] == (key,):
            return short
    return {"checkpoint.sha256": "checkpoint", "prompts.sha256": "prompts"}.get(key, key)


def _short(v: Any) -> str:
    if v is _MISSING:
        return "(not recorded)"
    if v == SAME_AS_SAMPLER:
        return v
    if isinstance(v, str) and len(v) == 64 and all(ch in "0123456789abcdef" for ch in v):
        return v[:12] + "..."
    return repr(v) if isinstance(v, str) else str(v)
