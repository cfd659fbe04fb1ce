"""Masking and correction rules behind one registry (see ``base.RULES``)."""

from . import (
    sequence,  # noqa: F401
    token,  # noqa: F401  (registration; token rules list first)
    verl,  # noqa: F401
)
from .base import (
    KEEP,
    REJECT,
    REWEIGHT,
    RULES,
    Range,
    RuleInstance,
    RuleSpec,
    SequenceInputs,
    lookup,
    make_instance,
    parse_rule,
    parse_sweep,
)

__all__ = [
    "KEEP",
    "REJECT",
    "REWEIGHT",
    "RULES",
    "Range",
    "RuleInstance",
    "RuleSpec",
    "SequenceInputs",
    "default_rules",
    "lookup",
    "make_instance",
    "parse_rule",
    "parse_sweep",
]


def default_rules() -> list[RuleInstance]:
    """Every registered rule that has reference defaults (no ``--rule`` given).

    ``verl-rs`` has none (its option and threshold are the user's verl setting), so it runs only when selected.
    """
    return [make_instance(name, {}) for name, spec in RULES.items() if not spec.required]
