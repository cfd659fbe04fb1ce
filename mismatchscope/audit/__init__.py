"""The per-token audit ``compare-masks --write DIR`` writes: every selected rule's decision on every token.

:mod:`.columns` says which columns the files have and computes them from a
batch the pass has judged; :mod:`.writer` writes them while the pass runs.
"""

from .columns import AUDIT_SCHEMA_VERSION, DECISIONS, SEQUENCES_FILE, TOKENS_FILE, AuditLayout
from .writer import AuditWriter, audit_writer

__all__ = [
    "AUDIT_SCHEMA_VERSION",
    "DECISIONS",
    "SEQUENCES_FILE",
    "TOKENS_FILE",
    "AuditLayout",
    "AuditWriter",
    "audit_writer",
]
