"""Framework readings: a rule as one framework's own code computes it, selected as ``RULE@READING``.

Frameworks implement the same rule with different defaults and conventions:
where a token with A = 0 goes, which way k3 is taken, the epsilon in a binary
KL, the thresholds. A reading is those choices for one framework, written as
the rule's own parameters, so ``dppo-kl@skyrl`` is ``dppo-kl`` with SkyRL's
defaults and ``dppo-kl@skyrl:delta=0.05`` SkyRL's code at another threshold.
Every command that takes a rule takes a reading (``--rule``, gate's
``[rules]`` and metric names, the Monitor's ``rules``); ``compare-masks
--readings RULE`` lays them side by side.

Each reading names the framework file it follows and the snapshot read
(docs/rules.md lists them); a rule a framework lacks is an error naming the
rules it has.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

DEFAULT = "mismatchscope"
"""the name the side-by-side view gives a rule at mismatchscope's own defaults."""


@dataclass(frozen=True)
class RuleReading:
    """One rule as one framework computes it."""

    params: dict[str, Any]
    """the framework's defaults and conventions, as the rule's parameters (the others keep mismatchscope's defaults)."""
    file: str
    """where the framework computes it (path in the repository, and the function or setting)."""
    differs: str = ""
    """what differs from mismatchscope's defaults, in words; empty: nothing."""
    numbers: str = ""
    """where the reading's numbers come from: the framework's config default or an example script's, with the
    file (in the reading's snapshot unless another commit is named)."""


@dataclass(frozen=True)
class Reading:
    name: str
    framework: str
    repository: str
    version: str
    """the snapshot read: branch, commit and date."""
    rules: dict[str, RuleReading] = field(default_factory=dict)
    lacks_hint: str = ""
    """said when a rule is missing: where the framework's nearest equivalent lives, if anywhere."""


READINGS: dict[str, Reading] = {}


def _reading(r: Reading) -> None:
    READINGS[r.name] = r


_SRL = "verl/trainer/ppo/core_algos.py (_compute_token_mask_for_policy_loss)"
_SRL_CFG = (
    "config default: verl/trainer/config/actor/actor.yaml (clip_ratio_low/high 0.2); the repository holds no "
    "DPPO script (0.15 and 0.05 are verl's example script's: the verl reading)"
)
_reading(
    Reading(
        "reference",
        "DPPO reference code",
        "sail-sg/Stable-RL",
        "main at c6af1d1 (2026-03-02)",
        {
            "dppo-tv": RuleReading(
                {"delta_low": 0.2, "delta_high": 0.2},
                _SRL + " (loss_mode dppo_binary_tv)",
                "delta 0.2 (the repository's config default)",
                _SRL_CFG,
            ),
            "dppo-kl": RuleReading(
                {"delta": 0.2},
                _SRL + " (loss_mode dppo_binary_kl)",
                "delta 0.2 (the repository's config default)",
                _SRL_CFG,
            ),
        },
    )
)

_VERL = "verl/trainer/ppo/core_algos.py"
_VERL_DPPO_SCRIPT = (
    "example script: examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh (CLIP_DEFAULT {0} for {1}); verl's "
    "config default is clip_ratio_low/high 0.2 (verl/trainer/config/actor/actor.yaml): pass delta=0.2 for it"
)
_reading(
    Reading(
        "verl",
        "verl",
        "verl-project/verl",
        "main at 1dda039 (2026-08-22)",
        {
            "dppo-tv": RuleReading(
                {},
                _VERL + " (compute_policy_loss_dppo_tv)",
                numbers=_VERL_DPPO_SCRIPT.format("0.15", "dppo_tv"),
            ),
            "dppo-kl": RuleReading(
                {},
                _VERL + " (compute_policy_loss_dppo_kl)",
                numbers=_VERL_DPPO_SCRIPT.format("0.05", "dppo_kl"),
            ),
            "icepop": RuleReading(
                {},
                "verl/trainer/ppo/rollout_corr_helper.py (rollout_is threshold 'lower_upper')",
                numbers="config default: verl/trainer/config/algorithm.py (decoupled_token_icepop: threshold_lower "
                "0.5, threshold 5.0)",
            ),
            "kpop": RuleReading(
                {"phi": 2.0},
                "pull request #6800 (rollout_rs=binary_kl, decoupled token KPop); not in main at this snapshot",
                "phi 2.0",
                numbers="the pull request's default (phi 2.0); not in main at this snapshot",
            ),
        },
        lacks_hint="verl's rollout_rs family (geometric, k1/k2/k3 bounds per token or sequence) is the verl-rs rule, "
        "e.g. --rule verl-rs:option=seq_mean_k3,threshold=0.01",
    )
)

_SKY_OPC = "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py"
_SKY_CFG = "skyrl/train/config/config.py"
_SKY_F32 = "ratios in float32 (safe_exp_delta casts log r to float32, clamped to +-20)"
_SKY_DPPO = (
    "skyrl/backends/skyrl_train/utils/ppo_utils.py (dppo_policy_loss); defaults in "
    "skyrl/train/config/config.py (DPPOConfig)"
)
_reading(
    Reading(
        "skyrl",
        "SkyRL",
        "NovaSky-AI/SkyRL",
        "main at a956457 (2026-08-21)",
        {
            "dppo-tv": RuleReading(
                {"delta_low": 0.2, "delta_high": 0.2, "zero_advantage": "keep"},
                _SKY_DPPO,
                "A = 0 never masked (only A < 0 takes the negative branch); delta 0.2",
                f"config default: {_SKY_CFG} (DPPOConfig.delta_low/high 0.2)",
            ),
            "dppo-kl": RuleReading(
                {"delta": 0.2, "zero_advantage": "keep"},
                _SKY_DPPO,
                "A = 0 never masked (only A < 0 takes the negative branch); delta 0.2",
                f"config default: {_SKY_CFG} (DPPOConfig.delta_low/high 0.2; its docstring recommends 0.05 for KL)",
            ),
            "token-mask": RuleReading(
                {},
                _SKY_OPC + " (token_mask_is_threshold_low/high)",
                "SkyRL sets no default (off until given): mismatchscope's 0.5, 2; " + _SKY_F32,
                f"none: {_SKY_CFG} (OffPolicyCorrectionConfig.token_mask_is_threshold_low/high None, off)",
            ),
            "seq-mis": RuleReading(
                {},
                _SKY_OPC + " (sequence_mask_metric=product; product_mask_low/high)",
                _SKY_F32,
                f"config default: {_SKY_CFG} (OffPolicyCorrectionConfig.product_mask_low 0.5, product_mask_high 2.0)",
            ),
            "geo-mask": RuleReading(
                {"lo": 0.99, "hi": 1.01},
                _SKY_OPC + " (sequence_mask_metric=geometric; geo_mask_low/high)",
                "bounds 0.99, 1.01; " + _SKY_F32,
                f"config default: {_SKY_CFG} (OffPolicyCorrectionConfig.geo_mask_low 0.99, geo_mask_high 1.01)",
            ),
            "veto": RuleReading(
                {"hi": 100.0},
                _SKY_OPC + " (outlier_token_is_threshold_low/high)",
                "upper bound 100 (SkyRL's suggested values; both off until given); " + _SKY_F32,
                f"suggested, not defaults: {_SKY_CFG} (OffPolicyCorrectionConfig.outlier_token_is_threshold_low/high "
                "docstrings suggest 1e-4 and 100; both default to None, off)",
            ),
        },
    )
)

_PRL_LOSS = "src/prime_rl/trainer/rl/loss.py"
_PRL_CFG = "packages/prime-rl-configs/src/prime_rl/configs/trainer.py"
_reading(
    Reading(
        "prime-rl",
        "prime-rl",
        "PrimeIntellect-ai/prime-rl",
        "main at 559b447 (2026-08-21)",
        {
            "ipo": RuleReading(
                {"delta": 0.1},
                f"{_PRL_LOSS} (ipo_loss_fn)",
                "delta 0.1 (0.3 is in a pending change)",
                f"config default: {_PRL_CFG} (IPOLossConfig.ipo_threshold 0.1)",
            ),
            "dppo-tv": RuleReading(
                {"delta_low": 0.2, "delta_high": 0.2},
                f"{_PRL_LOSS} (default_loss_fn)",
                "delta 0.2",
                f"config default: {_PRL_CFG} (DefaultLossConfig.dppo_mask_low/high 0.2)",
            ),
            "kpop": RuleReading(
                {},
                "pull request #3283 (p and q clamped to [1e-6, 1 - 1e-6]); not in main at this snapshot",
                numbers="the pull request's clamp (1e-6); not in main at this snapshot",
            ),
        },
    )
)

_reading(
    Reading(
        "slime",
        "slime",
        "THUDM/slime",
        "main at 624b824 (2026-08-21)",
        {
            "icepop": RuleReading(
                {"alpha": 0.0, "beta": 2.0},
                "slime/backends/megatron_utils/loss.py (icepop_function)",
                "bounds [0, 2]: no lower cut, upper 2",
                "config default: slime/utils/arguments.py (--tis-clip-low 0, --tis-clip 2.0)",
            ),
            "opsm": RuleReading(
                {},
                "slime/utils/ppo_utils.py (compute_opsm_mask)",
                numbers="config default: slime/utils/arguments.py (--opsm-delta 1e-4)",
            ),
        },
    )
)

_AREAL_RS = "areal/utils/functional/functional.py (apply_rejection_sampling"
_AREAL_UPPER = "config default: areal/api/cli_args.py (RejectionSamplingConfig.upper 5.0 for every metric, lower None)"
_reading(
    Reading(
        "areal",
        "AReaL",
        "areal-project/AReaL (formerly inclusionAI/AReaL)",
        "main at cbff54d (2026-08-22)",
        {
            "k3-seq": RuleReading(
                {"orientation": "1/r", "delta": 5.0},
                f"{_AREAL_RS}, metric kl_k3, level sequence, agg mean); "
                "areal/utils/data.py (KLEstimator._compute_approx_kl)",
                "k3 of 1/r: exp(lq - lp) - 1 - (lq - lp); delta 5 (the upper default every metric shares; the "
                "option's help suggests 0.5-2.0 for k3); in float32",
                _AREAL_UPPER,
            ),
            "icepop": RuleReading(
                {"alpha": 0.0},
                f"{_AREAL_RS}, metric ratio, level token)",
                "no lower bound (lower None); upper 5; r in float32, a non-finite log r read as 0 (kept)",
                _AREAL_UPPER,
            ),
            "kpop": RuleReading(
                {"phi": 5.0, "eps": 1e-8},
                f"{_AREAL_RS}, metric binary_kl, level token; compute_binary_kl_divergence), since #1405",
                "phi 5 (the shared upper default), p and q clamped to [1e-8, 1 - 1e-8]; at this snapshot "
                "RejectionSamplingConfig refuses metric binary_kl in __post_init__ (its _VALID_METRICS omits it), "
                "so only a config built without that check reaches it",
                _AREAL_UPPER + "; eps 1e-8 is compute_binary_kl_divergence's default",
            ),
        },
    )
)


def split_name(text: str) -> tuple[str, str | None]:
    """``dppo-kl@skyrl`` -> ("dppo-kl", "skyrl"); ``dppo-kl`` -> ("dppo-kl", None)."""
    rule, at, reading = text.partition("@")
    return rule.strip(), (reading.strip() if at else None)


def rule_reading(rule: str, reading: str) -> RuleReading:
    """The reading of ``rule`` by ``reading``, or a one-line error naming what exists."""
    r = READINGS.get(reading)
    if r is None:
        raise UsageError(
            f"unknown reading {reading!r} in {rule}@{reading}",
            hint=f"readings: {', '.join(READINGS)} (compare-masks --help lists them)",
        )
    if rule not in r.rules:
        hint = f"{r.framework}'s reading has {', '.join(r.rules)}" + (f"; {r.lacks_hint}" if r.lacks_hint else "")
        raise UsageError(f"{r.framework} has no {rule} (reading {reading!r})", hint=hint)
    return r.rules[rule]


def readings_of(rule: str) -> list[str]:
    """The readings that have ``rule``, in registry order."""
    return [name for name, r in READINGS.items() if rule in r.rules]


def help_lines() -> list[str]:
    """One line per reading for ``--help``: its name, framework and rules."""
    return [f"{r.name}: {r.framework} ({r.repository}, {r.version}): {', '.join(r.rules)}" for r in READINGS.values()]
