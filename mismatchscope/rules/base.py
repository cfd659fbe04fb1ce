"""The rule registry: names -> small pure functions with small typed configs.

A rule maps the per-token terms (and the advantage, when it needs one) to one
action per token, or the per-sequence aggregates to one action per sequence.
Rejected and reweighted are different actions and are counted apart.

Adding a rule is one config dataclass, one function and one ``register`` call.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Literal

import numpy as np

from ..divergence import TokenTerms
from ..errors import UsageError

KEEP = np.int8(0)
REJECT = np.int8(1)
REWEIGHT = np.int8(2)

Level = Literal["token", "sequence"]


def param(default: float | None, doc: str) -> Any:
    """A rule parameter: its default and the one line ``--help`` shows for it."""
    return dataclasses.field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class SequenceInputs:
    """Per-sequence aggregates a sequence rule may use (aligned, shape ``[S]``)."""

    n_tokens_S: np.ndarray
    seq_log_ratio_S: np.ndarray
    """S = sum_t l."""
    min_log_ratio_S: np.ndarray
    max_log_ratio_S: np.ndarray
    mean_k3_S: np.ndarray
    advantage_S: np.ndarray | None
    """mean advantage over the sequence's tokens (None: no advantage column)."""

    @property
    def mean_log_ratio_S(self) -> np.ndarray:
        return self.seq_log_ratio_S / self.n_tokens_S


@dataclass(frozen=True)
class RuleSpec:
    name: str
    level: Level
    config_cls: type
    fn: Callable[..., np.ndarray]
    uses_advantage: bool
    acts: Literal["reject", "reweight"]
    source: str
    summary: str

    def param_names(self) -> list[str]:
        return [f.name for f in fields(self.config_cls)]

    def help_line(self) -> str:
        ps = ", ".join(f"{f.name}={_fmt(f.default)}" for f in fields(self.config_cls))
        return f"{self.name}:{ps}  [{self.level}, {self.acts}{', uses A' if self.uses_advantage else ''}] {self.summary}"


RULES: dict[str, RuleSpec] = {}


def register(name: str, *, level: Level, config: type, uses_advantage: bool, acts: str, source: str, summary: str):
    """Decorator: put a rule function in the registry under ``name``."""

    def wrap(fn):
        RULES[name] = RuleSpec(name, level, config, fn, uses_advantage, acts, source, summary)  # type: ignore[arg-type]
        return fn

    return wrap


@dataclass(frozen=True)
class RuleInstance:
    """A rule with concrete parameters, as selected on the command line."""

    spec: RuleSpec
    config: Any

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def params(self) -> dict[str, Any]:
        return dataclasses.asdict(self.config)

    @property
    def label(self) -> str:
        ps = ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.name}:{ps}" if ps else self.name

    def token_actions(self, terms: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
        return self.spec.fn(self.config, terms, advantage_T)

    def sequence_actions(self, seq: SequenceInputs) -> np.ndarray:
        return self.spec.fn(self.config, seq)


def where(mask: np.ndarray, action: np.int8) -> np.ndarray:
    """``action`` where ``mask`` holds, KEEP elsewhere: the shape every rule returns."""
    return np.where(mask, action, KEEP).astype(np.int8)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "inf"
        return f"{v:g}"
    return str(v)


def _valid_rules_text() -> str:
    return "; ".join(RULES[n].help_line().split("  [")[0] for n in sorted(RULES))


def lookup(name: str) -> RuleSpec:
    try:
        return RULES[name]
    except KeyError:
        raise UsageError(f"unknown rule {name!r}", hint=f"valid rules: {', '.join(sorted(RULES))}") from None


def make_instance(name: str, overrides: dict[str, str | float]) -> RuleInstance:
    spec = lookup(name)
    valid = spec.param_names()
    values: dict[str, float | None] = {}
    for key, raw in overrides.items():
        if key not in valid:
            raise UsageError(
                f"rule {name!r} has no parameter {key!r}",
                hint=f"valid parameters of {name}: {', '.join(valid) or 'none'}",
            )
        values[key] = _parse_number(name, key, raw)
    try:
        config = spec.config_cls(**values)
    except (TypeError, ValueError) as e:
        raise UsageError(f"rule {name!r}: {e}") from None
    return RuleInstance(spec, config)


def _parse_number(rule: str, key: str, raw: str | float) -> float | None:
    if isinstance(raw, (int, float)):
        return float(raw)
    text = raw.strip().lower()
    if text in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"rule {rule!r}: parameter {key}={raw!r} is not a number") from None
    if math.isnan(value):
        raise UsageError(f"rule {rule!r}: parameter {key} is NaN")
    return value


def parse_rule(text: str) -> RuleInstance:
    """``icepop`` or ``icepop:alpha=0.2,beta=5`` -> a rule instance."""
    name, _, rest = text.partition(":")
    overrides: dict[str, str | float] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise UsageError(f"cannot parse rule parameter {item!r} in {text!r}", hint="write --rule NAME:KEY=VALUE,KEY=VALUE")
            overrides[key.strip()] = value
    return make_instance(name.strip(), overrides)


def parse_sweep(text: str, base: dict[str, RuleInstance] | None = None) -> tuple[str, str, list[RuleInstance]]:
    """``icepop.beta=1.5,2,3`` -> (rule, param, one instance per value).

    Other parameters come from the rule instance selected with ``--rule``
    (when there is one) or from the defaults.
    """
    head, eq, values = text.partition("=")
    name, dot, key = head.partition(".")
    if not eq or not dot or not values.strip():
        raise UsageError(f"cannot parse sweep {text!r}", hint="write --sweep RULE.PARAM=V1,V2,V3, e.g. icepop.beta=1.5,2,3,5,8")
    name, key = name.strip(), key.strip()
    spec = lookup(name)
    fixed = dict(base[name].params) if base and name in base else {}
    instances = []
    for v in values.split(","):
        overrides = {k: val for k, val in fixed.items() if val is not None}
        overrides[key] = v
        instances.append(make_instance(spec.name, overrides))
    return name, key, instances


def check_bounds(lo: float | None, hi: float | None, lo_name: str, hi_name: str, *, positive: bool = True) -> None:
    """Shared validation for ``[lo, hi]`` parameter pairs."""
    if positive and lo is not None and lo < 0:
        raise ValueError(f"{lo_name} must be >= 0, got {lo}")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"{lo_name} ({lo}) must not exceed {hi_name} ({hi})")
