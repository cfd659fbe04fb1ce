"""Gate limits: typed, loaded from TOML (stdlib ``tomllib``), overridable by flags.

The built-in defaults *are* the starter file (:data:`STARTER_TOML`, written by
``mismatchscope gate --init``): :func:`default_config` parses that text, so
the documented defaults and the ones in force cannot drift apart.

A config file replaces the defaults' limit sections as a whole: a file with
no ``[regression]`` table has no regression limits. Keys of ``[gate]`` that a
file leaves out keep their default.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from ..errors import GateConfigError, UsageError
from ..rules import lookup, make_instance
from .limits import Statistic, check_rule_level, lookup_metric

DEFAULT_FILE = "gate.toml"

STARTER_TOML = """\
# mismatchscope gate: limits on the train-inference mismatch of a serving stack.
#
#   mismatchscope gate CANDIDATE --baseline BASELINE     # reads ./gate.toml
#
# CANDIDATE and BASELINE are probe runs (or token-pair files) of the same
# checkpoint and prompts with the same sampling settings, sampled by the new
# and by the current serving stack. Exit code 0: every limit holds; 1: a limit
# failed; 2: a usage or input error (including incomparable runs).
#
# Metric names are the keys of `mismatchscope report --format json`
# ("metrics" and "sequence_metrics.*") and RULE.STAT for masking rules, where
# STAT is token_reject_rate, token_reweight_rate, sequence_reject_rate (rules
# that reject whole sequences) or sequences_with_rejection_rate.

[gate]
# Resamples of the bootstrap over sequences. Every mean-type metric and rule
# rate gets a confidence interval; 0 compares point estimates only.
bootstrap = 1000
# Two-sided confidence of the percentile intervals.
confidence = 0.95
# Seed of the bootstrap: the same files and settings give the same verdict.
seed = 0
# Comparability keys that may differ between baseline and candidate, e.g.
# ["seed"] for two runs sampled with different seeds. Keys: checkpoint,
# prompts, sampling (all of it) or sampling.KEY (temperature, top_p, top_k,
# n, max_tokens, top_k_logprobs, seed, logprobs_mode), n, seed, trainer (all
# of it) or trainer.KEY (dtype, attn_implementation, fp32_lm_head, and
# checkpoint: the trainer scored with other weights than the sampler).
allow_different = []
# The baseline run used when --baseline is not given (relative to the
# current directory).
# baseline = "runs/baseline"

# Parameters of the rules named below (defaults: the reference values). A verl
# rollout_rs setting is written as it is in verl, e.g.
# verl-rs = { option = "seq_mean_k3", threshold = "0.01" }
[rules]
icepop = { alpha = 0.5, beta = 5.0 }
# ipo: 0.3 as in prime-rl's pending PR #3586 (its main defaults to 0.1: ipo@prime-rl).
ipo = { delta = 0.3 }

# Limits on the candidate alone. `max`: fails when the interval's lower end
# is above it; `min`: fails when the interval's upper end is below it. Loose
# on purpose: a real regression is caught by the relative limits below.
[absolute]
# verl's yardstick: < 0.005 normal, > 0.01 an inference precision problem.
tv_token_mean = { max = 0.01 }
# NeMo-RL sees ~1e-3 in healthy runs; ten times that is not healthy.
k3_mean = { max = 0.01 }
# More than 1% of tokens outside IcePop's [0.5, 5] band.
"icepop.token_reject_rate" = { max = 0.01 }

# Limits against the baseline. `max_increase = 0.25`: the candidate may be at
# most 25% above the baseline. A check fails only when BOTH hold:
#   - the lower end of the interval of candidate / baseline exceeds 1 + max_increase,
#   - the lower end of the interval of candidate - baseline exceeds `floor`.
# The floor keeps ratios of noise from failing (fp32 against fp32: k3 of
# 1e-12 against 2e-12 is +100% and means nothing). Default floors: 1e-4 for
# TV, |log p - log q| and rates (0.01 percentage points); 1e-6 for the KL
# estimators k2, k3 and reverse k3.
[regression]
tv_token_mean = { max_increase = 0.25, floor = 1e-4 }
abs_logprob_diff_mean = { max_increase = 0.25, floor = 1e-4 }
k3_mean = { max_increase = 0.25, floor = 1e-6 }
"icepop.token_reject_rate" = { max_increase = 0.25, floor = 1e-4 }
"ipo.token_reject_rate" = { max_increase = 0.25, floor = 1e-4 }
"""

_TOP_KEYS = {"gate", "rules", "absolute", "regression"}
_GATE_KEYS = {"bootstrap", "confidence", "seed", "allow_different", "baseline"}
MAX_BOOTSTRAP = 100_000
"""resamples at most: the interval's ends settle long before (1,000 is the default), and each resample
costs a pass over the per-sequence sums."""


@dataclass(frozen=True)
class AbsoluteLimit:
    metric: str
    max: float | None = None
    """fails when the candidate's interval lies entirely above it."""
    min: float | None = None
    """fails when the candidate's interval lies entirely below it."""


@dataclass(frozen=True)
class RegressionLimit:
    metric: str
    max_increase: float
    """largest allowed rise as a fraction of the baseline: 0.25 = +25%."""
    floor: float
    """smallest absolute rise that can fail, whatever the ratio."""


@dataclass(frozen=True)
class GateConfig:
    absolute: tuple[AbsoluteLimit, ...] = ()
    regression: tuple[RegressionLimit, ...] = ()
    rules: dict[str, dict[str, float | str]] = field(default_factory=dict)
    """rule name -> parameter overrides, for the rules the limits name."""
    bootstrap: int = 1000
    confidence: float = 0.95
    seed: int = 0
    allow_different: tuple[str, ...] = ()
    baseline: str | None = None
    source: str = "built-in defaults"

    def metrics(self) -> list[Statistic]:
        names = [a.metric for a in self.absolute] + [r.metric for r in self.regression]
        return [lookup_metric(n) for n in dict.fromkeys(names)]

    def rule_instances(self):
        """The rules the limits name, with the configured parameters (reference defaults otherwise)."""
        names = [m.rule for m in self.metrics() if m.rule]
        out = []
        for n in dict.fromkeys(names):
            missing = [p for p in lookup(n).required if p not in self.rules.get(n, {})]
            if missing:
                raise GateConfigError(
                    f"a limit names {n}, which has no default for {' and '.join(missing)}",
                    hint=f"set them in the config ([rules] {n} = {{ {', '.join(p + ' = ...' for p in missing)} }}) "
                    f"or with --rule {n}:...",
                )
            out.append(make_instance(n, self.rules.get(n, {})))
        return out


def default_config() -> GateConfig:
    return parse_config(tomllib.loads(STARTER_TOML), "built-in defaults")


def load_config(path: Path | None, *, cwd: Path | None = None) -> GateConfig:
    """``path``, else ``./gate.toml`` when it exists, else the built-in defaults."""
    if path is None:
        local = (cwd or Path.cwd()) / DEFAULT_FILE
        if not local.is_file():
            return default_config()
        path = local
    if path.is_dir():
        raise GateConfigError(f"config file {path} is a directory", hint=f"give a file, e.g. {path / DEFAULT_FILE}")
    if path.exists() and not path.is_file():
        raise GateConfigError(f"config file {path} is not a regular file", hint="give a gate.toml file")
    if not path.exists():
        raise GateConfigError(f"config file {path} not found", hint="write one with mismatchscope gate --init")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise GateConfigError(
            f"{path} is not valid TOML: {e}", hint="fix the file, or write a fresh one with mismatchscope gate --init"
        ) from None
    except UnicodeDecodeError:
        raise GateConfigError(f"{path} is not a text file") from None
    except RecursionError:
        raise GateConfigError(f"{path} is nested too deeply to be a gate configuration") from None
    return parse_config(data, str(path))


def parse_config(data: dict[str, Any], source: str) -> GateConfig:
    where = source
    _no_unknown(data, _TOP_KEYS, where, "table")
    gate = data.get("gate", {})
    _table(gate, f"{where} [gate]")
    _no_unknown(gate, _GATE_KEYS, f"{where} [gate]", "key")
    defaults = GateConfig()
    cfg = GateConfig(
        absolute=tuple(_absolute(data.get("absolute", {}), where)),
        regression=tuple(_regression(data.get("regression", {}), where)),
        rules=_rules(data.get("rules", {}), where),
        bootstrap=_int(gate.get("bootstrap", defaults.bootstrap), f"{where} [gate] bootstrap", lo=0, hi=MAX_BOOTSTRAP),
        confidence=_number(gate.get("confidence", defaults.confidence), f"{where} [gate] confidence"),
        seed=_int(gate.get("seed", defaults.seed), f"{where} [gate] seed", lo=0),
        allow_different=tuple(_strings(gate.get("allow_different", []), f"{where} [gate] allow_different")),
        baseline=_string_or_none(gate.get("baseline"), f"{where} [gate] baseline"),
        source=source,
    )
    return validate(cfg)


def validate(cfg: GateConfig) -> GateConfig:
    """Checks that need the whole config (after flags were applied too)."""
    from .compare import check_keys

    if not 0.0 < cfg.confidence < 1.0:
        raise GateConfigError(
            f"confidence must be between 0 and 1 (exclusive), got {cfg.confidence:g}", hint="e.g. 0.95"
        )
    check_keys(cfg.allow_different)
    for r in cfg.regression:
        m = lookup_metric(r.metric)
        if not m.regressable:
            raise GateConfigError(
                f"{r.metric} cannot take a regression limit: "
                + (
                    "it has no 'worse' direction"
                    if m.worse is None
                    else "lower is worse"
                    if m.worse == "lower"
                    else "it can be negative"
                ),
                hint=f"give it an absolute limit instead: [absolute] in the config, or --limit '{r.metric}<=VALUE' / '>=VALUE'",
            )
    for a in cfg.absolute:
        _satisfiable(a, lookup_metric(a.metric))
    instances = {r.name: r for r in cfg.rule_instances()}  # unknown parameters fail here, before any file is read
    for m in cfg.metrics():
        if m.rule:
            check_rule_level(m, instances[m.rule])
    return cfg


def _satisfiable(a: AbsoluteLimit, m: Statistic) -> None:
    """A limit no value can meet would fail every run: a typo, not a gate."""
    if (a.min is not None and a.min == math.inf) or (a.max is not None and a.max == -math.inf):
        bound = f"min {a.min:g}" if a.min == math.inf else f"max {a.max:g}"
        raise GateConfigError(f"{a.metric}: {bound} leaves no value that passes", hint="give a finite limit")
    if (a.min is not None and a.min == -math.inf) or (a.max is not None and a.max == math.inf):
        bound = f"min {a.min:g}" if a.min == -math.inf else f"max {a.max:g}"
        raise GateConfigError(
            f"{a.metric}: {bound} is no limit (every value passes it)",
            hint="give a finite limit, or leave the metric out",
        )
    if a.min is not None and a.max is not None and a.min > a.max:
        raise GateConfigError(
            f"{a.metric}: min {a.min:g} is above max {a.max:g}, so no run can pass", hint="swap them, or drop one"
        )
    lo, hi = m.bounds
    if a.max is not None and a.max < lo:
        raise GateConfigError(
            f"{a.metric}: max {a.max:g} is below {lo:g}, the smallest value {a.metric} can take, so no run can pass",
            hint=f"give a limit >= {lo:g}",
        )
    if a.min is not None and a.min > hi:
        raise GateConfigError(
            f"{a.metric}: min {a.min:g} is above {hi:g}, the largest value {a.metric} can take, so no run can pass",
            hint="shares, rates and TV are fractions: 0.01 = 1%" if hi == 1 else f"give a limit <= {hi:g}",
        )


def with_overrides(
    cfg: GateConfig,
    *,
    limits: list[str] | None = None,
    increases: list[str] | None = None,
    rules: list[str] | None = None,
    allow_different: list[str] | None = None,
    bootstrap: int | None = None,
    confidence: float | None = None,
    seed: int | None = None,
    baseline: str | None = None,
    absolute_only: bool = False,
) -> GateConfig:
    """Flags win over the file: a flag's limit replaces the file's limit on the same metric."""
    from ..rules import parse_rule

    flagged: dict[str, AbsoluteLimit] = {}
    for text in limits or []:  # two flags on one metric: a min and a max make one limit; the same bound twice is a typo
        lim = parse_limit_flag(text)
        prev = flagged.get(lim.metric)
        if prev is not None:
            side = "max" if lim.max is not None else "min"
            if getattr(prev, side) is not None:
                raise GateConfigError(
                    f"--limit {text!r}: {lim.metric} already has a {side} ({getattr(prev, side):g}) from another --limit",
                    hint="give each bound of a metric once",
                )
            lim = AbsoluteLimit(
                lim.metric, max=prev.max if lim.max is None else lim.max, min=prev.min if lim.min is None else lim.min
            )
        flagged[lim.metric] = lim
    absolute = [a for a in cfg.absolute if a.metric not in flagged] + list(flagged.values())
    if absolute_only and increases:
        raise GateConfigError(
            "--max-increase sets a regression limit against the baseline, which --absolute-only leaves out",
            hint="drop --absolute-only to compare with the baseline, or drop --max-increase",
        )
    if absolute_only and baseline is not None:
        raise GateConfigError(
            f"--baseline {baseline} names a run to compare with, which --absolute-only leaves out",
            hint="drop --absolute-only to compare with the baseline, or drop --baseline",
        )
    regression = [] if absolute_only else list(cfg.regression)
    for text in increases or []:
        reg = parse_increase_flag(text, {r.metric: r for r in cfg.regression})
        regression = [r for r in regression if r.metric != reg.metric] + [reg]
    rule_params = dict(cfg.rules)
    for text in rules or []:
        inst = parse_rule(text)
        rule_params[inst.name] = {k: v for k, v in inst.params.items() if v is not None}
    out = replace(
        cfg,
        absolute=tuple(absolute),
        regression=tuple(regression),
        rules=rule_params,
        allow_different=tuple(dict.fromkeys([*cfg.allow_different, *(allow_different or [])])),
        bootstrap=cfg.bootstrap if bootstrap is None else _int(bootstrap, "--bootstrap", lo=0, hi=MAX_BOOTSTRAP),
        confidence=cfg.confidence if confidence is None else confidence,
        seed=cfg.seed if seed is None else seed,
        baseline=baseline if baseline is not None else cfg.baseline,
    )
    return validate(out)


def parse_limit_flag(text: str) -> AbsoluteLimit:
    """``tv_token_mean<=0.005`` or ``ess>=0.9``."""
    for op in ("<=", ">="):
        name, found, value = text.partition(op)
        if found:
            v = _number_text(value, f"--limit {text}")
            lookup_metric(name.strip())
            return AbsoluteLimit(name.strip(), max=v) if op == "<=" else AbsoluteLimit(name.strip(), min=v)
    raise GateConfigError(
        f"cannot parse --limit {text!r}", hint="write METRIC<=VALUE or METRIC>=VALUE, e.g. tv_token_mean<=0.005"
    )


def parse_increase_flag(text: str, known: dict[str, RegressionLimit]) -> RegressionLimit:
    """``k3_mean=25%`` (or ``=0.25``); the floor comes from the file's limit on the metric, else the metric's default."""
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise GateConfigError(f"cannot parse --max-increase {text!r}", hint="write METRIC=PERCENT, e.g. k3_mean=25%")
    value = value.strip()
    frac = (
        _number_text(value[:-1], f"--max-increase {text}") / 100.0
        if value.endswith("%")
        else _number_text(value, f"--max-increase {text}")
    )
    m = lookup_metric(name)
    floor = known[name].floor if name in known else m.floor
    return _regression_limit(name, frac, floor, f"--max-increase {text}")


# ---- TOML sections ----------------------------------------------------------


def _absolute(section: Any, where: str) -> list[AbsoluteLimit]:
    _table(section, f"{where} [absolute]")
    out = []
    for name, spec in section.items():
        ctx = f"{where} [absolute] {name}"
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            spec = {"max": spec}
        _table(spec, ctx)
        spec = cast("dict[str, Any]", spec)  # _table raised unless it is a dict
        _no_unknown(spec, {"max", "min"}, ctx, "key")
        if not spec:
            raise GateConfigError(f"{ctx}: give max and/or min", hint=f'e.g. "{name}" = {{ max = 0.01 }}')
        lo = _number(spec["min"], f"{ctx} min") if "min" in spec else None
        hi = _number(spec["max"], f"{ctx} max") if "max" in spec else None
        lookup_metric(name)
        out.append(AbsoluteLimit(name, max=hi, min=lo))
    return out


def _regression(section: Any, where: str) -> list[RegressionLimit]:
    _table(section, f"{where} [regression]")
    out = []
    for name, spec in section.items():
        ctx = f"{where} [regression] {name}"
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            spec = {"max_increase": spec}
        _table(spec, ctx)
        spec = cast("dict[str, Any]", spec)  # _table raised unless it is a dict
        _no_unknown(spec, {"max_increase", "floor"}, ctx, "key")
        if "max_increase" not in spec:
            raise GateConfigError(f"{ctx}: max_increase is missing", hint=f'e.g. "{name}" = {{ max_increase = 0.25 }}')
        m = lookup_metric(name)
        floor = _number(spec["floor"], f"{ctx} floor") if "floor" in spec else m.floor
        out.append(_regression_limit(name, _number(spec["max_increase"], f"{ctx} max_increase"), floor, ctx))
    return out


def _regression_limit(name: str, frac: float, floor: float, ctx: str) -> RegressionLimit:
    if frac < 0:
        raise GateConfigError(f"{ctx}: max_increase must be >= 0 (a fraction: 0.25 = +25%), got {frac:g}")
    if floor < 0:
        raise GateConfigError(f"{ctx}: floor must be >= 0, got {floor:g}")
    return RegressionLimit(name, frac, floor)


def _rules(section: Any, where: str) -> dict[str, dict[str, float | str]]:
    _table(section, f"{where} [rules]")
    out = {}
    for name, params in section.items():
        _table(params, f"{where} [rules] {name}")
        clean = {k: v if isinstance(v, str) else _number(v, f"{where} [rules] {name}.{k}") for k, v in params.items()}
        try:
            lookup(name)
            make_instance(name, clean)  # unknown or invalid parameters fail here
        except UsageError as e:
            raise GateConfigError(f"{where} [rules]: {e}") from None
        out[name] = clean
    return out


# ---- small typed readers ----------------------------------------------------


def _no_unknown(d: dict, valid: set[str], where: str, what: str) -> None:
    unknown = sorted(set(d) - valid)
    if unknown:
        raise GateConfigError(
            f"{where}: unknown {what} {', '.join(map(repr, unknown))}", hint=f"valid: {', '.join(sorted(valid))}"
        )


def _table(x: Any, where: str) -> None:
    if not isinstance(x, dict):
        raise GateConfigError(f"{where} must be a table, got {type(x).__name__} {x!r}")


def _number(x: Any, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x):
        raise GateConfigError(f"{where} must be a number, got {x!r}")
    return float(x)


def _number_text(text: str, where: str) -> float:
    from ..rules.base import parse_number

    v = parse_number(text)
    if v is None:
        raise GateConfigError(f"{where}: {text.strip()!r} is not a number")
    if math.isnan(v):
        raise GateConfigError(f"{where}: NaN is not a limit")
    return v


def _int(x: Any, where: str, lo: int, hi: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < lo or (hi is not None and x > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi:,}"
        raise GateConfigError(f"{where} must be an integer {bounds}, got {x!r}")
    return x


def _strings(x: Any, where: str) -> list[str]:
    if not isinstance(x, list) or not all(isinstance(v, str) for v in x):
        raise GateConfigError(f"{where} must be a list of strings, got {x!r}")
    return x


def _string_or_none(x: Any, where: str) -> str | None:
    if x is not None and not isinstance(x, str):
        raise GateConfigError(f"{where} must be a string, got {x!r}")
    return x
