"""compare-masks' terminal tables: the columns that read together stay together, and every column is explained."""

from __future__ import annotations

import pytest

from tests.helpers import SAMPLE_PAIRS, cli


@pytest.mark.parametrize("width", [80, 85, 100])
def test_the_tail_table_keeps_p_above_q_beside_p_below_q(width):
    """At 85 columns the table of which tail each rule cuts once put p>q at the end of one part and p<q alone in
    the continued one: the two signs of one split are one pair."""
    out = cli("compare-masks", str(SAMPLE_PAIRS), env={"COLUMNS": str(width)}).stdout
    tails = out[out.index("Which tail each rule cuts: rejected") : out.index("Which tail each rule cuts: icepop")]
    parts = tails.split("(continued)")
    assert [i for i, p in enumerate(parts) if "p>q" in p] == [i for i, p in enumerate(parts) if "p<q" in p]
    assert max(len(line) for line in out.splitlines()) <= width


def test_the_hypothesis_column_is_explained():
    """The rules table's ``hyp.`` column was never explained."""
    out = " ".join(cli("compare-masks", str(SAMPLE_PAIRS)).stdout.split())
    assert (
        "hyp.: the advantages a rule's count assumes: data, the run's own (or none needed); A>0 or A<0, every advantage of that sign "
        "(the run records none); mean, the mean of the two" in out
    )
