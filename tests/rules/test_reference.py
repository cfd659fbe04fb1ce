"""docs/rules.md is generated from the registry, and says what the registry says."""

from __future__ import annotations

from mismatchscope.rules import (
    RULES,
)
from tests.helpers import REPO


def test_docs_rules_md_is_the_registry():

    from mismatchscope.rules.reference import rules_markdown

    doc = (REPO / "docs" / "rules.md").read_text()
    assert doc == rules_markdown(), "docs/rules.md is stale: python -m mismatchscope.rules.reference > docs/rules.md"
    for name in RULES:
        assert f"## `{name}`" in doc
