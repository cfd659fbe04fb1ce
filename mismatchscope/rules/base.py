"""The rule registry: names -> small pure functions with small typed configs.

A rule maps the per-token terms (and the advantage, when it needs one) to one
action per token, or the per-sequence aggregates to one action per sequence.
Rejected and reweighted are different actions and are counted apart.

Adding a rule is one config dataclass, one function and one ``register`` call.
Everything the rest of the tool needs to know about a rule lives here, on the
config fields and the registration: each parameter's default, its one-line
doc, its allowed range (checked where the rule is parsed), its sweep grid
(the ``--sweep`` pictures), and which of its thresholds sit on the ratio
``r`` (the log-ratio histogram). A new rule appears in every command and
picture without edits elsewhere.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal, TypeVar

import numpy as np

from ..divergence import TokenTerms
from ..errors import UsageError

KEEP = np.int8(0)
REJECT = np.int8(1)
REWEIGHT = np.int8(2)

Level = Literal["token", "sequence"]
RuleParam = float | str | None
"""a rule config's value: every config field is a number, an optional number or a name (a reading's convention)."""

INF = math.inf


@dataclass(frozen=True)
class Range:
    """The allowed values of a numeric parameter; ``text`` is what errors and docs show."""

    lo: float
    hi: float
    lo_open: bool = False
    hi_open: bool = False

    def contains(self, v: float) -> bool:
        above = v > self.lo if self.lo_open else v >= self.lo
        below = v < self.hi if self.hi_open else v <= self.hi
        return above and below

    @property
    def text(self) -> str:
        return f"{'(' if self.lo_open else '['}{_fmt(self.lo)}, {_fmt(self.hi)}{')' if self.hi_open else ']'}"


UNIT = Range(0.0, 1.0)
"""probabilities, probability gaps, clip widths below 1."""
NONNEG = Range(0.0, INF)
RATIO_LOW = Range(0.0, 1.0)
"""a lower bound on a ratio: the kept band must contain r = 1, or every perfectly matched token would be cut
(with RATIO_HIGH this also orders every [lo, hi] pair: lo <= 1 <= hi)."""
RATIO_HIGH = Range(1.0, INF)
"""an upper bound on a ratio (inf: no upper bound)."""


def param(
    default: Any,
    doc: str,
    *,
    range: Range | None = None,
    optional: bool = False,
    grid: tuple | None = None,
    choices: tuple[str, ...] | None = None,
    example: str | None = None,
) -> Any:
    """A rule parameter: its default (``MISSING``: required), the one line ``--help`` shows for it,
    its allowed ``range`` (numbers) or ``choices`` (words), whether ``off`` may switch it off
    (``optional``: only bounds that can be absent), and the grid its ``--sweep`` picture uses."""
    meta = {"doc": doc, "range": range, "optional": optional, "grid": grid, "choices": choices, "example": example}
    if default is MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


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
    clamped_sum_k1_S: np.ndarray | None = None
    """sum_t of k1, k2, k3 with l clamped to [-CLAMP, CLAMP] first (``divergence.clamped_k_terms``), as verl
    sums them; None: the caller did not aggregate them (only ``verl-rs`` sequence options need them)."""
    clamped_sum_k2_S: np.ndarray | None = None
    clamped_sum_k3_S: np.ndarray | None = None
    mean_k3_inverse_S: np.ndarray | None = None
    """mean_t of k3 of 1/r, (1/r - 1) + l (AReaL's orientation); None: the caller did not aggregate it (only
    ``k3-seq:orientation=1/r`` needs it, see ``sequence.needs_inverse_k3``)."""

    @property
    def mean_log_ratio_S(self) -> np.ndarray:
        return self.seq_log_ratio_S / self.n_tokens_S


@dataclass(frozen=True)
class Statistic:
    """A per-token (token rules) or per-sequence (sequence rules) quantity a rule compares with its thresholds.

    ``compare-masks --write`` writes one column per statistic, shared by the
    rules that threshold the same one (icepop, token-mask, tis, cispo and
    ppo-clip all read ``ratio``), so the audit shows the number each decision
    was taken on.
    """

    name: str | Callable[[Any], str]
    """the audit column's name, or config -> name where the option chooses the quantity (verl-rs, k3-seq)."""
    doc: str
    """what it is, in the reference's words (docs/format.md)."""
    fn: Callable[[Any, Any], np.ndarray]
    """(config, TokenTerms or SequenceInputs) -> the value per token or per sequence."""
    params: tuple[str, ...] = ()
    """config fields the value depends on: a value other than the rule's default names the column apart
    (``binary_kl_max[eps=0]``), so two settings never share one."""
    absolute_of: Statistic | None = None
    """the statistic this one is the absolute value of, to the bit (``abs_p_minus_q`` of ``p_minus_q``): where a
    pass's rules threshold both, the audit stores the signed one alone."""

    def column(self, config: Any) -> str:
        """The audit column of this statistic under ``config``."""
        base = self.name(config) if callable(self.name) else self.name
        defaults = {f.name: f.default for f in fields(config)}
        moved = [f"{k}={_fmt(getattr(config, k))}" for k in self.params if getattr(config, k) != defaults[k]]
        return f"{base}[{','.join(moved)}]" if moved else base


@dataclass(frozen=True)
class RuleSpec:
    name: str
    level: Level | Callable[[Any], Level]
    """fixed, or derived from the config (``verl-rs``: its option)."""
    config_cls: type
    fn: Callable[..., np.ndarray]
    uses_advantage: bool
    acts: Literal["reject", "reweight"]
    source: str
    summary: str
    ratio_thresholds: Callable[[Any], Sequence[tuple[str, float | None]]] | None = None
    """config -> (label, value) of each threshold on r = p/q (the log-ratio histogram draws them)."""
    sweeps: Callable[[Any], dict[str, tuple]] | None = None
    """config -> {param: grid}; default: the ``grid`` of each parameter."""
    quantity: str = ""
    """what the rule thresholds, in the reference's words (docs/rules.md)."""
    drawn_by_default: bool = False
    """drawn in report's pictures when no --rule is given."""
    notes: str = ""
    """longer reading for docs/rules.md: choices made where the sources differ."""
    at_threshold: Callable[[Any, TokenTerms], np.ndarray] | None = None
    """token rules: (config, terms) -> the tokens whose quantity sits exactly on a threshold, where a ``>`` and a
    ``>=`` would disagree (the side-by-side view of readings names them)."""
    statistics: tuple[Statistic, ...] = ()
    """what the rule thresholds, per token or per sequence (``compare-masks --write`` writes each)."""
    weight: Callable[[Any, Any], np.ndarray] | None = None
    """reweighting rules: (config, TokenTerms or SequenceInputs) -> the importance weight the rule applies,
    the ratio where it keeps it and the truncated or clipped value where it reweights."""

    @property
    def fixed_level(self) -> Level | None:
        return None if callable(self.level) else self.level  # type: ignore[return-value]

    @property
    def level_text(self) -> str:
        return self.fixed_level or "token or sequence"

    def param_names(self) -> list[str]:
        return [f.name for f in fields(self.config_cls)]

    def params(self) -> list[dataclasses.Field]:
        return list(fields(self.config_cls))

    @property
    def required(self) -> list[str]:
        return [f.name for f in fields(self.config_cls) if f.default is MISSING]

    def help_line(self) -> str:
        ps = ", ".join(
            f"{f.name}={'REQUIRED' if f.default is MISSING else _fmt(f.default)}" for f in fields(self.config_cls)
        )
        return f"{self.name}:{ps}  [{self.level_text}, {self.acts}{', uses A' if self.uses_advantage else ''}] {self.summary}"

    def sweep_grids(self, config: Any) -> dict[str, tuple]:
        if self.sweeps is not None:
            return self.sweeps(config)
        return {f.name: f.metadata["grid"] for f in fields(self.config_cls) if f.metadata.get("grid")}


RULES: dict[str, RuleSpec] = {}


C = TypeVar("C")
"""a rule's config type: ``register`` holds its callbacks to it."""
RuleFn = TypeVar("RuleFn", bound=Callable[..., np.ndarray])


def register(
    name: str,
    *,
    level: Level | Callable[[C], Level],
    config: type[C],
    uses_advantage: bool,
    acts: Literal["reject", "reweight"],
    source: str,
    summary: str,
    quantity: str = "",
    ratio_thresholds: Callable[[C], Sequence[tuple[str, float | None]]] | None = None,
    sweeps: Callable[[C], dict[str, tuple]] | None = None,
    drawn_by_default: bool = False,
    notes: str = "",
    at_threshold: Callable[[C, TokenTerms], np.ndarray] | None = None,
    statistics: tuple[Statistic, ...] = (),
    weight: Callable[[C, Any], np.ndarray] | None = None,
) -> Callable[[RuleFn], RuleFn]:
    """Decorator: put a rule function in the registry under ``name``.

    Generic in the config type, so a registration's callbacks (its level,
    thresholds, sweeps) are checked against the config they read.
    """

    def wrap(fn: RuleFn) -> RuleFn:
        RULES[name] = RuleSpec(
            name=name,
            level=level,
            config_cls=config,
            fn=fn,
            uses_advantage=uses_advantage,
            acts=acts,
            source=source,
            summary=summary,
            ratio_thresholds=ratio_thresholds,
            sweeps=sweeps,
            quantity=quantity,
            drawn_by_default=drawn_by_default,
            notes=notes,
            at_threshold=at_threshold,
            statistics=statistics,
            weight=weight,
        )
        return fn

    return wrap


@dataclass(frozen=True)
class RuleInstance:
    """A rule with concrete parameters, as selected on the command line."""

    spec: RuleSpec
    config: Any
    reading: str | None = None
    """the framework reading whose defaults and conventions the config starts from (``readings.READINGS``)."""

    @property
    def name(self) -> str:
        """``dppo-kl``, or ``dppo-kl@skyrl`` for a reading: what every output names it by, and what
        :func:`make_instance` reads back."""
        return f"{self.spec.name}@{self.reading}" if self.reading else self.spec.name

    @property
    def level(self) -> Level:
        lv = self.spec.level
        return lv(self.config) if callable(lv) else lv

    @property
    def params(self) -> dict[str, RuleParam]:
        """The config's values by field name (every rule's config holds numbers, optional numbers and names)."""
        return dataclasses.asdict(self.config)

    @property
    def label(self) -> str:
        ps = ",".join(f"{k}={_fmt(v)}" for k, v in self.params.items())
        return f"{self.name}:{ps}" if ps else self.name

    def token_actions(self, terms: TokenTerms, advantage_T: np.ndarray | None) -> np.ndarray:
        return self.spec.fn(self.config, terms, advantage_T)

    def sequence_actions(self, seq: SequenceInputs) -> np.ndarray:
        return self.spec.fn(self.config, seq)

    def ratio_thresholds(self) -> list[tuple[str, float]]:
        """(label, r) of each finite positive threshold on the ratio, for the histogram."""
        if self.spec.ratio_thresholds is None:
            return []
        pairs = self.spec.ratio_thresholds(self.config)
        return [(f"{self.name} {k}={v:g}", v) for k, v in pairs if v is not None and v > 0 and math.isfinite(v)]


def where(mask: np.ndarray, action: np.int8) -> np.ndarray:
    """``action`` where ``mask`` holds, KEEP elsewhere: the shape every rule returns.

    KEEP is 0, so a boolean mask times the action is the answer in one pass (``np.where`` then a cast took
    two, and a temporary of eight bytes a token, for every rule of every batch)."""
    mask = np.asarray(mask)
    if mask.dtype == np.bool_:
        return np.multiply(mask, action, dtype=np.int8)
    return np.where(mask, action, KEEP).astype(np.int8)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:g}"
    if v is None:
        return "off"
    return str(v)


def lookup(name: str) -> RuleSpec:
    """The rule ``name`` (``RULE`` or ``RULE@READING``: the reading must have the rule)."""
    from .readings import rule_reading, split_name

    rule, reading = split_name(name)
    try:
        spec = RULES[rule]
    except KeyError:
        raise UsageError(f"unknown rule {rule!r}", hint=f"valid rules: {', '.join(sorted(RULES))}") from None
    if reading is not None:
        rule_reading(rule, reading)
    return spec


def make_instance(name: str, overrides: dict[str, Any]) -> RuleInstance:
    """A rule instance with ``overrides`` parsed and checked against each parameter's range.

    Every error names the rule, the parameter and what it allows, in one line.
    ``name`` may carry a reading (``dppo-kl@skyrl``): its parameters come first, ``overrides`` on top.
    """
    from .readings import rule_reading, split_name

    spec = lookup(name)
    name, reading = split_name(name)
    by_name = {f.name: f for f in spec.params()}
    values: dict[str, Any] = dict(rule_reading(name, reading).params) if reading else {}
    for key, raw in overrides.items():
        if key not in by_name:
            raise UsageError(
                f"rule {name!r} has no parameter {key!r}",
                hint=f"valid parameters of {name}: {', '.join(by_name) or 'none'}",
            )
        values[key] = _parse_value(name, by_name[key], raw)
    missing = [n for n in spec.required if n not in values]
    if missing:
        example = ",".join(f"{n}={_example(by_name[n])}" for n in spec.required)
        raise UsageError(f"rule {name!r} needs {' and '.join(missing)}", hint=f"e.g. --rule {name}:{example}")
    try:
        config = spec.config_cls(**values)
    except (TypeError, ValueError) as e:
        raise UsageError(f"rule {name!r}: {e}") from None
    return RuleInstance(spec, config, reading)


def _example(f: dataclasses.Field) -> str:
    if f.metadata.get("example"):
        return f.metadata["example"]
    choices = f.metadata.get("choices")
    if choices:
        return choices[-1]
    grid = f.metadata.get("grid")
    return str(grid[0]) if grid else "VALUE"


def _parse_value(rule: str, f: dataclasses.Field, raw: Any) -> Any:
    choices = f.metadata.get("choices")
    rng: Range | None = f.metadata.get("range")
    if choices is not None:
        text = str(raw).strip()
        if text not in choices:
            raise UsageError(f"rule {rule!r}: {f.name}={text!r} is not one of {', '.join(choices)}")
        return text
    if rng is None:  # a word the config parses itself (verl-rs threshold strings)
        text = str(raw).strip()
        if not text:
            raise UsageError(f"rule {rule!r}: {f.name} is empty")
        return text
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("off", "none")):
        if not f.metadata.get("optional"):
            raise UsageError(f"rule {rule!r}: {f.name} cannot be off (it must be a number in {rng.text})")
        return None
    if isinstance(raw, bool):
        raise UsageError(f"rule {rule!r}: {f.name}={raw!r} is not a number")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        value = parse_number(str(raw))
        if value is None:
            raise UsageError(f"rule {rule!r}: parameter {f.name}={str(raw).strip()!r} is not a number") from None
    if math.isnan(value):
        raise UsageError(f"rule {rule!r}: parameter {f.name} is NaN")
    if not rng.contains(value):
        shown = f"{value:g}" if float(f"{value:g}") == value else repr(value)  # 1.0000001 must not print as 1
        raise UsageError(f"rule {rule!r}: {f.name}={shown} is outside its range {rng.text}")
    return value


_NUMBER = re.compile(r"[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.ASCII | re.IGNORECASE)


def parse_number(text: str) -> float | None:
    """A decimal number as people write thresholds (``0.2``, ``5``, ``1e-3``, ``inf``); None otherwise.

    Stricter than ``float()``: Python also reads ``1_000`` and other scripts'
    digits, and ``_`` is verl's separator of a threshold's two bounds
    (``0.5_2``), so ``0.5_2_3`` must not quietly become 0.5 and 23.
    """
    text = text.strip()
    return float(text) if _NUMBER.fullmatch(text) else None


def parse_rule(text: str) -> RuleInstance:
    """``icepop``, ``icepop:alpha=0.2,beta=5`` or ``icepop@slime`` (a framework reading) -> a rule instance."""
    name, _, rest = text.partition(":")
    return make_instance(name.strip(), parse_overrides(name, rest, text))


def parse_overrides(name: str, rest: str, text: str) -> dict[str, str | float]:
    """``KEY=VALUE,KEY=VALUE`` (the part after ``NAME:``) -> {key: raw value}; ``text`` is what errors quote."""
    overrides: dict[str, str | float] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise UsageError(
                    f"cannot parse rule parameter {item!r} in {text!r}", hint="write --rule NAME:KEY=VALUE,KEY=VALUE"
                )
            if key.strip() in overrides:
                raise UsageError(
                    f"rule {name.strip()!r}: {key.strip()} is given twice in {text!r}", hint="give each parameter once"
                )
            overrides[key.strip()] = value
    return overrides


def parse_sweep(text: str, base: dict[str, RuleInstance] | None = None) -> tuple[str, str, list[RuleInstance]]:
    """``icepop.beta=1.5,2,3`` -> (rule, param, one instance per value).

    Other parameters come from the rule instance selected with ``--rule``
    (when there is one) or from the defaults.
    """
    head, eq, values = text.partition("=")
    name, dot, key = head.partition(".")
    if not eq or not dot or not values.strip():
        raise UsageError(
            f"cannot parse sweep {text!r}", hint="write --sweep RULE.PARAM=V1,V2,V3, e.g. icepop.beta=1.5,2,3,5,8"
        )
    name, key = name.strip(), key.strip()
    lookup(name)  # an unknown rule or reading fails here, before any value is parsed
    fixed = dict(base[name].params) if base and name in base else {}
    instances = []
    for v in values.split(","):
        overrides = {k: val for k, val in fixed.items() if val is not None}
        overrides[key] = v
        instances.append(make_instance(name, overrides))
    return name, key, instances
