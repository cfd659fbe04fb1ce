"""Masking and correction rules behind one registry (see ``base.RULES``)."""

from . import token  # noqa: F401  (registration; token rules list first)
from . import sequence  # noqa: F401
from .base import (
    KEEP,
    REJECT,
    REWEIGHT,
    RULES,
    RuleInstance,
    RuleSpec,
    SequenceInputs,
    lookup,
    make_instance,
    parse_rule,
    parse_sweep,
)

__all__ = [
    "KEEP", "REJECT", "REWEIGHT", "RULES", "RuleInstance", "RuleSpec", "SequenceInputs",
    "lookup", "make_instance", "parse_rule", "parse_sweep", "default_rules",
]


def default_rules() -> list[RuleInstance]:
    """Every registered rule with its reference defaults (no ``--rule`` given)."""
    return [make_instance(name, {}) for name in RULES]
