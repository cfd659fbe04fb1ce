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
_reading(
    Reading(
        "reference",
        "DPPO reference code",
        "sail-sg/Stable-RL",
        "main at c6af1d1 (2026-03-02)",
        {
            "dppo-tv": RuleReading({}, _SRL + "; thresholds from the paper's scripts (clip_ratio_low/high)"),
            "dppo-kl": RuleReading({}, _SRL + " (loss_mode dppo_binary_kl); thresholds from the paper's scripts"),
        },
    )
)

_VERL = "verl/trainer/ppo/core_algos.py"
_reading(
    Reading(
        "verl",
        "verl",
        "verl-project/verl",
        "main at 1dda039 (2026-08-22)",
        {
            "dppo-tv": RuleReading(
                {},
                _VERL + " (compute_policy_loss_dppo_tv); 0.15 from examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh",
            ),
            "dppo-kl": RuleReading(
                {},
                _VERL + " (compute_policy_loss_dppo_kl); 0.05 from examples/dppo_trainer/run_qwen3_30b_a3b_megatron.sh",
            ),
            "icepop": RuleReading(
                {},
                "verl/trainer/ppo/rollout_corr_helper.py (rollout_is threshold 'lower_upper'); "
                "defaults from verl/trainer/config/algorithm.py (decoupled_token_icepop)",
            ),
            "kpop": RuleReading(
                {"phi": 2.0},
                "pull request #6800 (rollout_rs=binary_kl, decoupled token KPop); not in main at this snapshot",
                "phi 2.0",
            ),
        },
        lacks_hint="verl's rollout_rs family (geometric, k1/k2/k3 bounds per token or sequence) is the verl-rs rule, "
        "e.g. --rule verl-rs:option=seq_mean_k3,threshold=0.01",
    )
)

_SKY_OPC = "skyrl/backends/skyrl_train/utils/off_policy_correction_utils.py"
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
            ),
            "dppo-kl": RuleReading(
                {"delta": 0.2, "zero_advantage": "keep"},
                _SKY_DPPO,
                "A = 0 never masked (only A < 0 takes the negative branch); delta 0.2",
            ),
            "token-mask": RuleReading(
                {},
                _SKY_OPC + " (token_mask_is_threshold_low/high)",
                "SkyRL sets no default (off until given): mismatchscope's 0.5, 2",
            ),
            "seq-mis": RuleReading({}, _SKY_OPC + " (sequence_mask_metric=product; product_mask_low/high)"),
            "geo-mask": RuleReading(
                {"lo": 0.99, "hi": 1.01},
                _SKY_OPC + " (sequence_mask_metric=geometric; geo_mask_low/high)",
                "bounds 0.99, 1.01",
            ),
            "veto": RuleReading(
                {"hi": 100.0},
                _SKY_OPC + " (outlier_token_is_threshold_low/high)",
                "upper bound 100 (SkyRL's suggested values; both off until given)",
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
                f"{_PRL_LOSS} (ipo_loss_fn); {_PRL_CFG} (IPOLossConfig.ipo_threshold)",
                "delta 0.1 (0.3 is in a pending change)",
            ),
            "dppo-tv": RuleReading(
                {"delta_low": 0.2, "delta_high": 0.2},
                f"{_PRL_LOSS} (default_loss_fn); {_PRL_CFG} (DefaultLossConfig.dppo_mask_low/high)",
                "delta 0.2",
            ),
            "kpop": RuleReading(
                {}, "pull request #3283 (p and q clamped to [1e-6, 1 - 1e-6]); not in main at this snapshot"
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
                "slime/backends/megatron_utils/loss.py (icepop_function); "
                "slime/utils/arguments.py (--tis-clip-low 0, --tis-clip 2.0)",
                "bounds [0, 2]: no lower cut, upper 2",
            ),
            "opsm": RuleReading(
                {}, "slime/utils/ppo_utils.py (compute_opsm_mask); slime/utils/arguments.py (--opsm-delta)"
            ),
        },
    )
)

_reading(
    Reading(
        "areal",
        "AReaL",
        "inclusionAI/AReaL",
        "main at 4aef98d (2026-05-21)",
        {
            "k3-seq": RuleReading(
                {"orientation": "1/r"},
                "areal/utils/functional/functional.py (apply_rejection_sampling, metric kl_k3, level "
                "sequence, agg mean); areal/utils/data.py (KLEstimator._compute_approx_kl)",
                "k3 of 1/r: exp(lq - lp) - 1 - (lq - lp); AReaL has no k3 default threshold",
            ),
            "icepop": RuleReading(
                {"alpha": 0.0},
                "areal/utils/functional/functional.py (apply_rejection_sampling, metric "
                "ratio, level token); areal/api/cli_args.py (upper 5.0, lower None)",
                "no lower bound (lower None); upper 5",
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
